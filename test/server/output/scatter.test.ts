import { describe, expect, it } from 'vitest';
import { OutputError, SlotState } from '../../../src/server/cross-thread/accumulators.js';
import { requestFailure } from '../../../src/server/cross-thread/response-view.js';
import { events, makeHarness, metaFields } from './harness.js';

/** Routing ids of one row at absolute position `pos` (2 layers x 2 experts). */
function routingRow(pos: number): number[] {
  return [pos % 200, (pos + 1) % 200, (pos + 2) % 200, (pos + 3) % 200];
}

function routingRows(from: number, count: number): number[] {
  const ids: number[] = [];
  for (let p = from; p < from + count; p++) ids.push(...routingRow(p));
  return ids;
}

const STOP = 1;
const LENGTH = 2;
const ABORT = 3;
const ERROR = 4;

describe('StepScatter: columns', () => {
  it('scatters chunked prefill, decode steps and a length finish into the expected columns', () => {
    const h = makeHarness();
    h.meta.write(3, 7, metaFields({ promptLen: 4 }));
    h.meta.write(
      5,
      9,
      metaFields({ promptLen: 2, logprobs: false, samplingMask: false, routedExperts: false }),
    );
    // Prefill in two chunks (no token until the prompt is done), interleaved with slot 5.
    h.feed([
      { slot: 3, gen: 7, routingFirstPos: 0, routing: routingRows(0, 2), weightVersion: 4 },
      {
        slot: 5,
        gen: 9,
        token: 100,
        logprob: -2,
        maskIds: [100, 1],
        routingFirstPos: 0,
        routing: routingRows(50, 2),
      },
    ]);
    h.feed([
      {
        slot: 3,
        gen: 7,
        token: 11,
        logprob: -0.5,
        maskIds: [11, 5],
        routingFirstPos: 2,
        routing: routingRows(2, 2),
        numCached: 2,
        weightVersion: 4,
      },
      { slot: 5, gen: 9, token: 101, finish: STOP, stopTokenId: 101 },
    ]);
    expect(events(h.scatter.finished)).toEqual([[5, 9]]);
    expect(events(h.scatter.released)).toEqual([[5, 9]]);
    h.feed([
      {
        slot: 3,
        gen: 7,
        token: 42,
        logprob: -1,
        maskIds: [42],
        routingFirstPos: 4,
        routing: routingRow(4),
        weightVersion: 5,
      },
    ]);
    expect(h.scatter.finished.count).toBe(0);
    h.feed([
      {
        slot: 3,
        gen: 7,
        token: 3,
        logprob: -0.25,
        finish: LENGTH,
        routingFirstPos: 5,
        routing: routingRow(5),
        weightVersion: 5,
      },
    ]);
    expect(events(h.scatter.finished)).toEqual([[3, 7]]);
    expect(events(h.scatter.released)).toEqual([[3, 7]]);
    expect(events(h.scatter.stopped)).toEqual([]);

    const c = h.view.choice(3, 0);
    expect(Array.from(c.tokenIds)).toEqual([11, 42, 3]);
    expect(Array.from(c.logprobs!)).toEqual([-0.5, -1, -0.25]);
    expect(Array.from(c.maskCounts!)).toEqual([2, 1, 0]);
    expect(Array.from(c.maskIds!)).toEqual([11, 5, 42]);
    expect(c.routing!.rows).toBe(6);
    // The contract's formula: start = prompt + completion - 1 - rows.
    expect(c.routing!.start).toBe(4 + 3 - 1 - 6);
    expect(Array.from(c.routing!.data)).toEqual(routingRows(0, 6));
    expect([c.routing!.layers, c.routing!.topk]).toEqual([2, 2]);
    expect(c.finishReason).toBe('length');
    expect(c.stopReason).toBeNull();
    expect(h.acc.firstWeightVersion(3)).toBe(4);
    expect(h.acc.lastWeightVersion(3)).toBe(5);
    expect(h.acc.numCachedTokens(3)).toBe(2);
    expect(h.acc.state(3)).toBe(SlotState.Done);

    const other = h.view.choice(5, 0);
    expect(Array.from(other.tokenIds)).toEqual([100, 101]);
    expect([other.logprobs, other.maskCounts, other.maskIds, other.routing]).toEqual([
      null,
      null,
      null,
      null,
    ]);
    expect(other.finishReason).toBe('stop');
    expect(other.stopReason).toBe(101);
    expect(h.view.usage([3])).toEqual({ promptTokens: 4, completionTokens: 3, cachedTokens: null });
  });

  it('stores prompt logprobs by position across chunks, skips ones sent again, fails a hole', () => {
    const h = makeHarness();
    h.meta.write(2, 4, metaFields({ promptLen: 5, routedExperts: false }));
    const entry = (p: number): [number, number, number][] => [
      [p * 10, -p, p + 2],
      [1, -0.5, 1],
    ];
    // Positions 1-2 in a prefill chunk with no token, 3-4 (and 2 again, a recompute) with it.
    h.feed([
      { slot: 2, gen: 4, prompt: { firstPos: 1, width: 2, entries: [...entry(1), ...entry(2)] } },
    ]);
    h.feed([
      {
        slot: 2,
        gen: 4,
        token: 7,
        logprob: -0.25,
        prompt: { firstPos: 2, width: 2, entries: [...entry(2), ...entry(3), ...entry(4)] },
      },
    ]);
    h.feed([{ slot: 2, gen: 4, token: 8, logprob: -1, finish: LENGTH }]);
    const p = h.view.promptLogprobs(2)!;
    expect([p.promptLength, p.positions, p.width]).toEqual([5, 4, 2]);
    const flat = [1, 2, 3, 4].flatMap(entry);
    expect(Array.from(p.ids)).toEqual(flat.map((e) => e[0]));
    expect(Array.from(p.logprobs)).toEqual(flat.map((e) => e[1]));
    expect(Array.from(p.ranks)).toEqual(flat.map((e) => e[2]));
    expect(Array.from(h.view.choice(2, 0).tokenIds)).toEqual([7, 8]);
    // A slot that asked none has none.
    h.meta.write(3, 1, metaFields({ promptLen: 5 }));
    h.feed([{ slot: 3, gen: 1, token: 9, logprob: -1, finish: LENGTH }]);
    expect(h.view.promptLogprobs(3)).toBeNull();
    // A jump past the stored positions fails that request alone.
    h.meta.write(4, 1, metaFields({ promptLen: 9 }));
    h.feed([{ slot: 4, gen: 1, prompt: { firstPos: 1, width: 2, entries: entry(1) } }]);
    h.feed([{ slot: 4, gen: 1, prompt: { firstPos: 3, width: 2, entries: entry(3) } }]);
    expect(h.acc.outputError(4)).toBe(OutputError.BadStep);
    expect(requestFailure(h.acc, 4, 'r4')?.message).toMatch(/malformed/);
  });

  it('skips routing rows before routed_experts_prompt_start, whatever the engine sends', () => {
    const h = makeHarness();
    h.meta.write(
      0,
      1,
      metaFields({ promptLen: 5, routedExpertsPromptStart: 3, samplingMask: false }),
    );
    h.feed([{ slot: 0, gen: 1, routingFirstPos: 0, routing: routingRows(0, 2) }]);
    h.feed([{ slot: 0, gen: 1, routingFirstPos: 2, routing: routingRows(2, 3), token: 7 }]);
    h.feed([
      { slot: 0, gen: 1, routingFirstPos: 5, routing: routingRow(5), token: 8, finish: LENGTH },
    ]);
    const r = h.view.choice(0, 0).routing!;
    expect(r.start).toBe(3);
    expect(r.rows).toBe(3);
    expect(r.start).toBe(5 + 2 - 1 - r.rows);
    expect(Array.from(r.data)).toEqual(routingRows(3, 3));
  });

  it('keeps uint16 routing ids when the engine sends 2-byte rows', () => {
    const h = makeHarness();
    h.meta.write(1, 3, metaFields({ promptLen: 1 }));
    const wide = { layers: 1, topk: 3, idBytes: 2 as const };
    h.feed([{ slot: 1, gen: 3, token: 1, routingFirstPos: 0, routing: [300, 2, 511] }], wide);
    h.feed(
      [{ slot: 1, gen: 3, token: 2, finish: LENGTH, routingFirstPos: 1, routing: [4, 5, 1000] }],
      wide,
    );
    const r = h.view.choice(1, 0).routing!;
    expect(r.data).toBeInstanceOf(Uint16Array);
    expect(Array.from(r.data)).toEqual([300, 2, 511, 4, 5, 1000]);
  });

  it('writes rows sent again after a preemption over the stored ones, and fails a request on a hole', () => {
    const h = makeHarness();
    h.meta.write(2, 5, metaFields({ promptLen: 3 }));
    h.feed([{ slot: 2, gen: 5, routingFirstPos: 0, routing: routingRows(0, 3), token: 9 }]);
    h.feed([{ slot: 2, gen: 5, routingFirstPos: 3, routing: routingRow(3), token: 10 }]);
    // Recomputed after preemption: positions 0..4 again, then the next token.
    h.feed([{ slot: 2, gen: 5, routingFirstPos: 0, routing: routingRows(0, 5), token: 11 }]);
    let r = h.view.choice(2, 0).routing!;
    expect(r.rows).toBe(5);
    expect(Array.from(r.data)).toEqual(routingRows(0, 5));
    // A hole: position 5 never came.
    h.feed([{ slot: 2, gen: 5, routingFirstPos: 6, routing: routingRow(6), token: 12 }]);
    expect(events(h.scatter.finished)).toEqual([[2, 5]]);
    expect(events(h.scatter.stopped)).toEqual([[2, 5]]);
    expect(h.acc.outputError(2)).toBe(OutputError.BadStep);
    expect(h.acc.finishReason(2)).toBe(ERROR);
    expect(h.view.failed(2)).toBe(true);
    expect(h.arena.liveBlocks).toBe(0);
    // Further outputs are ignored until the engine's final one, which releases the slot.
    h.feed([{ slot: 2, gen: 5, token: 13 }]);
    expect(h.acc.completionTokens(2)).toBe(3);
    h.feed([{ slot: 2, gen: 5, finish: ABORT }]);
    expect(events(h.scatter.released)).toEqual([[2, 5]]);
    r = h.view.choice(2, 0).routing!;
    expect(r.rows).toBe(5);
  });

  it('fails only the request whose columns cannot fit the arena', () => {
    const h = makeHarness({ arenaInitialBytes: 16 * 1024, arenaMaxBytes: 64 * 1024 });
    h.meta.write(0, 1, metaFields({ promptLen: 1, routedExperts: false }));
    h.meta.write(
      1,
      1,
      metaFields({ promptLen: 1, logprobs: false, samplingMask: false, routedExperts: false }),
    );
    h.feed([
      { slot: 0, gen: 1, token: 1, maskIds: new Array(20_000).fill(3) },
      { slot: 1, gen: 1, token: 1 },
    ]);
    expect(h.acc.outputError(0)).toBe(OutputError.ArenaFull);
    expect(events(h.scatter.finished)).toEqual([[0, 1]]);
    expect(events(h.scatter.stopped)).toEqual([[0, 1]]);
    h.feed([{ slot: 1, gen: 1, token: 2, finish: LENGTH }]);
    expect(Array.from(h.view.choice(1, 0).tokenIds)).toEqual([1, 2]);
  });

  it('grows columns across many blocks and arena growths, and keeps every value', () => {
    // A 16 KiB arena growing 16 KiB at a time: columns move and the buffer grows many times.
    const h = makeHarness({ arenaInitialBytes: 16 * 1024, arenaGrowStepBytes: 16 * 1024 });
    h.meta.write(4, 2, metaFields({ promptLen: 1 }));
    const n = 5000;
    for (let i = 0; i < n; i++) {
      h.feed([
        {
          slot: 4,
          gen: 2,
          token: i,
          logprob: -i / 8,
          maskIds: i % 3 === 0 ? [i, i + 1] : [i],
          routingFirstPos: i,
          routing: routingRow(i),
          finish: i === n - 1 ? LENGTH : 0,
        },
      ]);
    }
    const c = h.view.choice(4, 0);
    expect(c.tokenIds.length).toBe(n);
    const wrong: number[] = [];
    for (let i = 0; i < n; i++) {
      if (
        c.tokenIds[i] !== i ||
        c.logprobs![i] !== -i / 8 ||
        c.maskCounts![i] !== (i % 3 === 0 ? 2 : 1)
      ) {
        wrong.push(i);
      }
    }
    expect(wrong).toEqual([]);
    expect(c.maskIds!.length).toBe(n + Math.ceil(n / 3));
    expect(c.routing!.rows).toBe(n);
    expect(Array.from(c.routing!.data.subarray(4 * 4321, 4 * 4322))).toEqual(routingRow(4321));
    expect(Array.from(c.routing!.data.subarray(4 * (n - 1)))).toEqual(routingRow(n - 1));
    expect(h.arena.sab.byteLength).toBeGreaterThan(64 * 1024);
  });
});

describe('StepScatter: slot lifecycle', () => {
  it('drops outputs whose generation is not the slot meta one, and starts afresh on a new one', () => {
    const h = makeHarness();
    h.meta.write(1, 10, metaFields());
    h.feed([
      { slot: 1, gen: 9, token: 5 },
      { slot: 1, gen: 0, token: 6 },
      { slot: 99, gen: 10, token: 1 },
    ]);
    expect(h.acc.generation(1)).toBe(0);
    expect(h.scatter.badRows).toBe(1);
    h.feed([{ slot: 1, gen: 10, token: 7, maskIds: [7] }]);
    h.feed([{ slot: 1, gen: 10, token: 8, finish: LENGTH, maskIds: [8] }]);
    expect(Array.from(h.view.choice(1, 0).tokenIds)).toEqual([7, 8]);
    const live = h.arena.liveBlocks;
    expect(live).toBeGreaterThan(0);
    // A late output of the finished request changes nothing.
    h.feed([{ slot: 1, gen: 10, token: 9 }]);
    expect(h.acc.completionTokens(1)).toBe(2);
    h.scatter.free(1, 10);
    expect(h.acc.state(1)).toBe(SlotState.Idle);
    expect(h.arena.liveBlocks).toBe(0);
    // The slot is reused: its new request sees none of the old tokens, and reuses the freed blocks.
    h.meta.write(1, 11, metaFields());
    h.feed([{ slot: 1, gen: 11, token: 70, maskIds: [70] }]);
    expect(Array.from(h.view.choice(1, 0).tokenIds)).toEqual([70]);
    expect(h.arena.usedBytes).toBeLessThanOrEqual(live * 1024);
  });

  it('a free before the engine is done drains: outputs dropped, the final one releases', () => {
    const h = makeHarness();
    h.meta.write(0, 3, metaFields());
    h.feed([{ slot: 0, gen: 3, token: 1 }]);
    h.scatter.free(0, 2); // another generation: ignored
    expect(h.acc.state(0)).toBe(SlotState.Running);
    h.scatter.free(0, 3);
    expect(h.acc.state(0)).toBe(SlotState.Draining);
    expect(h.arena.liveBlocks).toBe(0);
    h.feed([{ slot: 0, gen: 3, token: 2 }]);
    expect(h.arena.liveBlocks).toBe(0);
    expect(h.scatter.released.count).toBe(0);
    h.feed([{ slot: 0, gen: 3, finish: ABORT }]);
    expect(events(h.scatter.released)).toEqual([[0, 3]]);
    expect(h.scatter.finished.count).toBe(0);
    expect(h.acc.state(0)).toBe(SlotState.Idle);
  });

  it('an abort or an engine error finishes and releases at once', () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields());
    h.meta.write(1, 1, metaFields());
    h.feed([{ slot: 0, gen: 1, token: 4 }]);
    h.feed([
      { slot: 0, gen: 1, finish: ABORT },
      { slot: 1, gen: 1, finish: ERROR, rejectReason: 5 },
    ]);
    expect(events(h.scatter.finished)).toEqual([
      [0, 1],
      [1, 1],
    ]);
    expect(events(h.scatter.released)).toEqual([
      [0, 1],
      [1, 1],
    ]);
    expect(h.view.finishName(0)).toBe('abort');
    expect(Array.from(h.view.choice(0, 0).tokenIds)).toEqual([4]);
    expect(h.view.failed(1)).toBe(true);
    expect(h.view.finishName(1)).toBeNull();
    expect(requestFailure(h.acc, 1, 'r1')).toMatchObject({
      code: 'RS_ERR_ENGINE_REQUEST_FAILED',
      message:
        'the engine could not run request r1: the request cannot fit in the KV cache even alone (prompt + max_tokens > num_gpu_blocks * block_size)',
    });
    expect(requestFailure(h.acc, 0, 'r0')).toBeNull();
  });

  it('engine death: running requests give their blocks back, complete ones keep them until freed', () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields());
    h.meta.write(1, 1, metaFields());
    h.feed([
      { slot: 0, gen: 1, token: 4, maskIds: [4] },
      { slot: 1, gen: 1, token: 5, finish: LENGTH, maskIds: [5] },
    ]);
    const completeBlocks = h.arena.liveBlocks / 2;
    h.scatter.engineGone(0, 1);
    h.scatter.engineGone(1, 1);
    expect(h.acc.state(0)).toBe(SlotState.Idle);
    expect(h.acc.state(1)).toBe(SlotState.Done);
    expect(h.arena.liveBlocks).toBe(completeBlocks);
    // Leftover outputs of the dead engine for slot 0 do not restart it.
    h.feed([{ slot: 0, gen: 1, token: 6 }]);
    expect(h.acc.state(0)).toBe(SlotState.Idle);
    h.scatter.free(1, 1);
    expect(h.arena.liveBlocks).toBe(0);
  });

  it('refuses a STEP record that declares more than it holds', () => {
    const h = makeHarness();
    const records = new SharedArrayBuffer(1024);
    const i32 = new Int32Array(records);
    i32[0] = 1000; // count
    i32[5] = 1; // id bytes
    const views = {
      bytes: new Uint8Array(records),
      i32,
      f32: new Float32Array(records),
      f64: new Float64Array(records),
      u16: new Uint16Array(records),
    };
    expect(() => h.scatter.scatterStep(views, 0, 512)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_OUTPUT_BAD_STEP' }),
    );
  });
});
