import { describe, expect, it } from 'vitest';
import { StepOutputs } from '../../src/engine/step-outputs.js';
import { BridgeBacklog } from '../../src/engine/vllm/bridge-backlog.js';

/** Adds a token row with rank `rank` and a top area of `k` candidates numbered after `slot`. */
function addTopRow(out: StepOutputs, slot: number, rank: number, k: number): void {
  const row = out.addRow(0, slot, 1);
  out.token[row] = slot * 10;
  out.rank[row] = rank;
  const at = out.reserveTop(k);
  for (let j = 0; j < k; j++) {
    out.topIds[at + j] = slot * 100 + j;
    out.topLogprobs[at + j] = -0.5 * (j + 1);
  }
  out.topStart[row] = at;
  out.topCount[row] = k;
  out.topLength = at + k;
}

function topOf(out: StepOutputs, row: number): { ids: number[]; logprobs: number[] } {
  const from = out.topStart[row] as number;
  const to = from + (out.topCount[row] as number);
  return {
    ids: Array.from(out.topIds.subarray(from, to)),
    logprobs: Array.from(out.topLogprobs.subarray(from, to)),
  };
}

describe('StepOutputs rank and top area', () => {
  it('keep every row through row and top-area growth; a new row has rank 0 and no top', () => {
    const out = new StepOutputs(1);
    for (let slot = 0; slot < 40; slot++) addTopRow(out, slot, slot + 1, 1 + (slot % 20));
    expect(out.topIds.length).toBeGreaterThanOrEqual(out.topLength);
    for (let slot = 0; slot < 40; slot++) {
      expect(out.rank[slot]).toBe(slot + 1);
      const k = 1 + (slot % 20);
      expect(topOf(out, slot).ids).toEqual(Array.from({ length: k }, (_, j) => slot * 100 + j));
      expect(topOf(out, slot).logprobs).toEqual(
        Array.from({ length: k }, (_, j) => -0.5 * (j + 1)),
      );
    }
    out.clear();
    expect(out.topLength).toBe(0);
    const row = out.addRow(0, 0, 1);
    expect([out.rank[row], out.topStart[row], out.topCount[row]]).toEqual([0, 0, 0]);
  });

  it('travel with a row through the vLLM bridge backlog', () => {
    const backlog = new BridgeBacklog(1, 1, 8);
    addTopRow(backlog.rows, 3, 2, 5);
    addTopRow(backlog.rows, 4, 9, 3);
    backlog.rows.addRow(0, 5, 1);
    const out = new StepOutputs(1);
    backlog.drainInto(out, null);
    expect(out.count).toBe(3);
    expect([out.rank[0], out.rank[1], out.rank[2]]).toEqual([2, 9, 0]);
    expect(topOf(out, 0).ids).toEqual([300, 301, 302, 303, 304]);
    expect(topOf(out, 1)).toEqual({ ids: [400, 401, 402], logprobs: [-0.5, -1, -1.5] });
    expect(out.topCount[2]).toBe(0);
  });
});

/** Every row of `out` as plain values, its areas read through its own offsets. */
function rowsOf(out: StepOutputs, from = 0, to = out.count) {
  const rows = [];
  const w = out.routingRowWidth;
  for (let i = from; i < to; i++) {
    const m = out.maskStart[i]!;
    const r = out.routingStart[i]!;
    rows.push({
      slot: out.slot[i],
      token: out.token[i],
      rank: out.rank[i],
      finish: out.finish[i],
      mask: Array.from(out.maskIds.subarray(m, m + out.maskCount[i]!)),
      top: topOf(out, i),
      firstPos: out.routingFirstPos[i],
      routing: Array.from(out.routing.subarray(r * w, (r + out.routingRows[i]!) * w)),
    });
  }
  return rows;
}

describe('StepOutputs.appendRange and swapWith', () => {
  function filled(): StepOutputs {
    const src = new StepOutputs(2);
    src.shapeRouting(2, 2, 300); // uint16 ids
    for (let slot = 0; slot < 30; slot++) {
      addTopRow(src, slot, 1 + (slot % 3), slot % 4);
      const row = slot;
      const n = slot % 3;
      const at = src.reserveMask(n);
      for (let k = 0; k < n; k++) src.maskIds[at + k] = slot * 7 + k;
      src.maskStart[row] = at;
      src.maskCount[row] = n;
      src.maskLength = at + n;
      const rows = slot % 5;
      const r = src.reserveRoutingRows(rows);
      for (let k = 0; k < rows * 4; k++) src.routing[r + k] = 256 + slot + k;
      src.routingRows[row] = rows;
      src.routingFirstPos[row] = slot * 2;
      src.routingRowCount += rows;
    }
    // A row whose routing window was advanced (its first rows went out in pieces).
    src.routingStart[12]! += 1;
    src.routingRows[12]! -= 1;
    return src;
  }

  it('appends a range with its masks, top areas and routing rows, behind rows already there', () => {
    const src = filled();
    const dst = new StepOutputs(1);
    dst.shapeRouting(2, 2, 300);
    addTopRow(dst, 99, 1, 2);
    dst.appendRange(src, 5, 25);
    expect(dst.count).toBe(21);
    expect(rowsOf(dst, 1)).toEqual(rowsOf(src, 5, 25));
    expect(topOf(dst, 0).ids).toEqual([9900, 9901]);
  });

  it('swaps every column, so a swapped pair reads as the other did', () => {
    const a = filled();
    const before = rowsOf(a);
    // Every own field of a StepOutputs is swapped (a new field must join swapWith's list).
    const fields = { ...(a as unknown as Record<string, unknown>) };
    const b = new StepOutputs(4);
    b.shapeRouting(2, 2, 300);
    b.swapWith(a);
    for (const [key, value] of Object.entries(fields)) {
      expect((b as unknown as Record<string, unknown>)[key], key).toBe(value);
    }
    expect(rowsOf(b)).toEqual(before);
    expect(a.count).toBe(0);
    a.swapWith(b);
    expect(rowsOf(a)).toEqual(before);
  });
});
