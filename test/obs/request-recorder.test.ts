/**
 * The output worker's request metrics, through the real StepScatter: what vLLM's IterationStats would
 * record for the same outputs (counters, bucket positions, sums, per-request phase times), each
 * finished request counted once, and the timeline row the main thread logs from.
 */
import { describe, expect, it } from 'vitest';
import { build125Buckets } from '../../src/obs/buckets.js';
import { finishReasonIndex } from '../../src/obs/request-recorder.js';
import {
  RM_DECODE,
  RM_E2E,
  RM_GENERATION_HIST,
  RM_GENERATION_TOKENS,
  RM_INFERENCE,
  RM_ITL,
  RM_PREFILL,
  RM_PROMPT_HIST,
  RM_PROMPT_TOKENS,
  RM_QUEUE,
  RM_SUCCESS,
  RM_TTFT,
} from '../../src/shm/layout.js';
import { makeRecorderHarness, type RecorderHarness } from './recorder-harness.js';

const STOP = 1;
const LENGTH = 2;
const ABORT = 3;
const ERROR = 4;
const SUCCESS = {
  stop: RM_SUCCESS,
  length: RM_SUCCESS + 1,
  abort: RM_SUCCESS + 2,
  error: RM_SUCCESS + 3,
};

/** Bucket counts of the histogram at `slot` with `n` bounds, then +Inf. */
function buckets(h: RecorderHarness, slot: number, n: number): number[] {
  return Array.from({ length: n + 1 }, (_, i) => h.at(slot + i));
}

/** The histogram's count (sum of its buckets) and sum. */
function countAndSum(h: RecorderHarness, slot: number, n: number): [number, number] {
  return [buckets(h, slot, n).reduce((a, b) => a + b, 0), h.at(slot + n + 1)];
}

const ascii = (s: string): number[] => [...s].map((c) => c.charCodeAt(0));

describe('request recorder', () => {
  it('records one request as vLLM would: TTFT, ITL, phases, token counters and histograms', () => {
    const h = makeRecorderHarness();
    h.open(0, 7, 1000, { promptLen: 4 });
    // Engine steps end at 1030 (20 ms modelled: the request was scheduled at 1010), 1080, 1200.
    h.step(1030, 20, 1031, [{ slot: 0, gen: 7, token: 65 }]);
    h.step(1080, 20, 1081, [{ slot: 0, gen: 7, token: 66 }]);
    h.step(1200, 20, 1201, [{ slot: 0, gen: 7, token: 67, finish: LENGTH }]);

    expect(h.at(RM_PROMPT_TOKENS)).toBe(4);
    expect(h.at(RM_GENERATION_TOKENS)).toBe(3);
    expect(
      [STOP, LENGTH, ABORT, ERROR].map((f) => h.at(RM_SUCCESS + finishReasonIndex(f))),
    ).toEqual([0, 1, 0, 0]);
    // TTFT 31 ms: the bucket le=0.04 (index 4 of vLLM's TTFT bounds).
    expect(buckets(h, RM_TTFT, 22).indexOf(1)).toBe(4);
    expect(countAndSum(h, RM_TTFT, 22)).toEqual([1, 0.031]);
    // ITL 50 ms (le=0.05, index 2) and 120 ms (le=0.15, index 5), from the engine's clock.
    const itl = buckets(h, RM_ITL, 19);
    expect(itl[2]).toBe(1);
    expect(itl[5]).toBe(1);
    expect(countAndSum(h, RM_ITL, 19)[1]).toBeCloseTo(0.17, 12);
    // e2e 201 ms, queue 10 ms, prefill 20 ms, decode 170 ms, inference 190 ms: all le=0.3.
    for (const [slot, seconds] of [
      [RM_E2E, 0.201],
      [RM_QUEUE, 0.01],
      [RM_PREFILL, 0.02],
      [RM_DECODE, 0.17],
      [RM_INFERENCE, 0.19],
    ] as const) {
      expect(buckets(h, slot, 21)[0]).toBe(1);
      expect(countAndSum(h, slot, 21)[1]).toBeCloseTo(seconds, 9);
    }
    // Prompt 4 and completion 3 tokens: both in the le=5 bucket of 1-2-5.
    const tokenBounds = build125Buckets(4096).length;
    expect(buckets(h, RM_PROMPT_HIST, tokenBounds).indexOf(1)).toBe(2);
    expect(buckets(h, RM_GENERATION_HIST, tokenBounds).indexOf(1)).toBe(2);
    expect(h.timeline.outcome(0, 7)).toEqual({ completionTokens: 3, finish: LENGTH, ttftMs: 31 });
    expect(h.timeline.outcome(0, 8)).toBeNull();
  });

  it('counts a stop-string finish once, when the response completes, not again at the engine abort', () => {
    const h = makeRecorderHarness();
    h.open(1, 3, 0, { stop: ['xy'] });
    const tokens = ascii('axyz');
    h.step(10, 5, 11, [{ slot: 1, gen: 3, token: tokens[0]! }]);
    h.step(20, 5, 21, [{ slot: 1, gen: 3, token: tokens[1]! }]);
    h.step(30, 5, 31, [{ slot: 1, gen: 3, token: tokens[2]! }]);
    expect(h.scatter.finished.count).toBe(1);
    // The engine runs one more step before the ABORT reaches it, then confirms with finish=abort.
    h.step(40, 5, 41, [{ slot: 1, gen: 3, token: tokens[3]! }]);
    h.step(50, 5, 51, [{ slot: 1, gen: 3, finish: ABORT }]);
    expect(h.at(SUCCESS.stop)).toBe(1);
    expect(h.at(SUCCESS.abort)).toBe(0);
    // Only the tokens delivered in the response are generation tokens.
    expect(h.at(RM_GENERATION_TOKENS)).toBe(3);
    expect(countAndSum(h, RM_E2E, 21)[0]).toBe(1);
    expect(h.timeline.outcome(1, 3)?.finish).toBe(STOP);
  });

  it('counts a refused request as error and an aborted one as abort, with no TTFT for either', () => {
    const h = makeRecorderHarness();
    h.open(2, 5, 0);
    h.open(3, 6, 0);
    h.step(10, 5, 12, [
      { slot: 2, gen: 5, finish: ERROR, rejectReason: 1 },
      { slot: 3, gen: 6, token: 65 },
    ]);
    h.step(20, 5, 22, [{ slot: 3, gen: 6, finish: ABORT }]);
    expect(h.at(SUCCESS.error)).toBe(1);
    expect(h.at(SUCCESS.abort)).toBe(1);
    expect(countAndSum(h, RM_TTFT, 22)[0]).toBe(1); // slot 3's first token only
    expect(countAndSum(h, RM_E2E, 21)[0]).toBe(2);
    // Queue/prefill/decode need a first token: only the aborted request has them.
    expect(countAndSum(h, RM_QUEUE, 21)[0]).toBe(1);
    expect(h.timeline.outcome(2, 5)).toEqual({ completionTokens: 0, finish: ERROR, ttftMs: null });
  });

  it('ignores outputs of a previous request on a reused slot, and continues totals it finds', () => {
    const h = makeRecorderHarness();
    h.slots[40 + RM_GENERATION_TOKENS] = 1000; // a predecessor process's total
    h.open(0, 2, 0);
    h.step(10, 1, 10, [{ slot: 0, gen: 1, token: 65 }]); // stale generation: dropped
    h.step(20, 1, 20, [{ slot: 0, gen: 2, token: 66, finish: LENGTH }]);
    expect(h.at(RM_GENERATION_TOKENS)).toBe(1001);
    expect(h.at(SUCCESS.length)).toBe(1);
  });

  it('never observes a negative time when clocks disagree by a fraction of a millisecond', () => {
    const h = makeRecorderHarness();
    h.open(0, 1, 100.7);
    h.step(100, 0, 100.2, [{ slot: 0, gen: 1, token: 65, finish: LENGTH }]);
    expect(countAndSum(h, RM_TTFT, 22)).toEqual([1, 0]);
    expect(buckets(h, RM_TTFT, 22)[0]).toBe(1);
    expect(countAndSum(h, RM_QUEUE, 21)).toEqual([1, 0]);
  });
});
