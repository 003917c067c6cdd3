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
