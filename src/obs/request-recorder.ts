/**
 * The output worker's request metrics: it sees every token of every request of its API server, so it
 * observes vLLM's request figures where they happen, into this server's request-metrics slots of the
 * shared region (layout.ts, RM_*), which any API server sums at scrape time. Nothing is allocated per
 * token: per-request times live in the RequestTimeline's float64 rows, figures in region slots.
 *
 * The definitions follow vLLM v1 (vllm/v1/metrics/stats.py, IterationStats): time to first token is
 * the frontend's time on seeing the first token minus the arrival; inter-token latency is the
 * difference of the engine's step timestamps of consecutive tokens; prompt tokens are counted when
 * the first token arrives; generation tokens as they arrive; e2e latency when the response completes.
 * Queue, prefill and decode time use the engine's step clock: the engine writes no SCHEDULED event,
 * so the request's first engine step is taken to start at `clock - modelled duration` of the step
 * whose output first names it. That is exact for a prompt prefilled in one step (and for requests
 * returning routing, whose every prefill chunk has an output row); a prompt chunked over several
 * steps without routing counts the earlier chunks as queue time.
 *
 * A restarted API server's worker continues the totals it finds in the region: counters of the
 * cluster never go backwards.
 */

import {
  RM_DECODE,
  RM_E2E,
  RM_FINISH_REASON_COUNT,
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
} from '../shm/layout.js';
import { FinishReason } from '../wire/types.js';
import { build125Buckets, ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS } from './buckets.js';
import { RegionHistogram } from './region-histogram.js';
import {
  TimelineField as F,
  type RequestTimeline,
  TIMELINE_STRIDE,
  wallClockMs,
} from './request-timeline.js';

/** What the output worker's scatter reports; StepScatter calls it, nothing else does. */
export interface ScatterMetrics {
  /** A STEP record begins: the engine's clock at the step's end and its modelled duration, ms. */
  step(clockMs: number, stepMs: number): void;
  /** The worker saw the first output of (slot, gen). */
  begin(slot: number, gen: number): void;
  /** One token of `slot` was appended to its response. */
  token(slot: number): void;
  /** The response of `slot` completed with `finish` (FinishReason) after `completion` tokens. */
  finished(slot: number, finish: number, completion: number): void;
}

/** Where a worker's recorder writes: sent by the main thread (see worker-metrics.ts). */
export interface RequestRecorderTarget {
  /** The float64 slots holding this server's request metrics (the region's). */
  slots: Float64Array;
  /** Index of RM_* slot 0 in `slots`. */
  base: number;
  timeline: RequestTimeline;
  /** Prompt length of a slot's current request (the slot meta's). */
  promptLen(slot: number): number;
  /** Sets the bounds of the prompt and generation token histograms (vLLM: 1-2-5 up to it). */
  maxModelLen: number;
  /** Wall-clock ms, read once per STEP record (default wallClockMs; tests pass their own). */
  clock?: () => number;
  /**
   * Called once per STEP record with that clock: the output worker's loop never yields to its
   * event loop, so its thread health publishes from here (thread-health-share.ts).
   */
  onStep?: (nowMs: number) => void;
}

/** vLLM's FINISH_REASON_STRINGS index of an engine FinishReason, or -1 for none. */
export function finishReasonIndex(finish: number): number {
  switch (finish) {
    case FinishReason.Stop:
      return 0;
    case FinishReason.Length:
      return 1;
    case FinishReason.Abort:
      return 2;
    case FinishReason.Error:
      return 3;
    default:
      return -1;
  }
}

export class RequestRecorder implements ScatterMetrics {
  readonly #slots: Float64Array;
  readonly #base: number;
  readonly #rows: Float64Array;
  readonly #target: RequestRecorderTarget;
  readonly #clock: () => number;
  readonly #ttft: RegionHistogram;
  readonly #itl: RegionHistogram;
  readonly #e2e: RegionHistogram;
  readonly #queue: RegionHistogram;
  readonly #prefill: RegionHistogram;
  readonly #decode: RegionHistogram;
  readonly #inference: RegionHistogram;
  readonly #promptTokens: RegionHistogram;
  readonly #generationTokens: RegionHistogram;
  #clockMs = 0;
  #stepMs = 0;
  #nowMs = 0;

  constructor(target: RequestRecorderTarget) {
    const { slots, base } = target;
    this.#slots = slots;
    this.#base = base;
    this.#rows = target.timeline.rows;
    this.#target = target;
    this.#clock = target.clock ?? wallClockMs;
    const hist = (at: number, bounds: readonly number[]) =>
      new RegionHistogram(slots, base + at, bounds);
    const tokenBuckets = build125Buckets(target.maxModelLen);
    this.#ttft = hist(RM_TTFT, TTFT_BUCKETS);
    this.#itl = hist(RM_ITL, ITL_BUCKETS);
    this.#e2e = hist(RM_E2E, REQUEST_LATENCY_BUCKETS);
    this.#queue = hist(RM_QUEUE, REQUEST_LATENCY_BUCKETS);
    this.#prefill = hist(RM_PREFILL, REQUEST_LATENCY_BUCKETS);
    this.#decode = hist(RM_DECODE, REQUEST_LATENCY_BUCKETS);
    this.#inference = hist(RM_INFERENCE, REQUEST_LATENCY_BUCKETS);
    this.#promptTokens = hist(RM_PROMPT_HIST, tokenBuckets);
    this.#generationTokens = hist(RM_GENERATION_HIST, tokenBuckets);
  }

  /** Also reads the wall clock: the time the frontend handles the step (vLLM's iteration timestamp). */
  step(clockMs: number, stepMs: number): void {
    this.#clockMs = clockMs;
    this.#stepMs = stepMs;
    this.#nowMs = this.#clock();
    this.#target.onStep?.(this.#nowMs);
  }

  /**
   * For an output path that does not track a request's first output itself (the inline baseline):
   * call for every output row of a current request; the first row of (slot, gen) begins it.
   */
  seen(slot: number, gen: number): void {
    if (this.#rows[slot * TIMELINE_STRIDE + F.Gen] !== gen) this.begin(slot, gen);
  }

  begin(slot: number, gen: number): void {
    const row = slot * TIMELINE_STRIDE;
    const rows = this.#rows;
    rows[row + F.Gen] = gen;
    rows[row + F.Scheduled] = this.#clockMs - this.#stepMs;
    rows[row + F.FirstToken] = -1;
    rows[row + F.LastToken] = -1;
    rows[row + F.TtftMs] = -1;
    rows[row + F.Completion] = 0;
    rows[row + F.Finish] = 0;
  }

  token(slot: number): void {
    const row = slot * TIMELINE_STRIDE;
    const rows = this.#rows;
    const clock = this.#clockMs;
    const last = rows[row + F.LastToken]!;
    if (last < 0) {
      const ttftMs = nonNegative(this.#nowMs - rows[row + F.Arrival]!);
      rows[row + F.FirstToken] = clock;
      rows[row + F.TtftMs] = ttftMs;
      this.#ttft.observe(ttftMs / 1000);
      this.#slots[this.#base + RM_PROMPT_TOKENS]! += this.#target.promptLen(slot);
    } else {
      this.#itl.observe(nonNegative(clock - last) / 1000);
    }
    rows[row + F.LastToken] = clock;
    this.#slots[this.#base + RM_GENERATION_TOKENS]!++;
  }

  finished(slot: number, finish: number, completion: number): void {
    const row = slot * TIMELINE_STRIDE;
    const rows = this.#rows;
    rows[row + F.Completion] = completion;
    rows[row + F.Finish] = finish;
    const reason = finishReasonIndex(finish);
    if (reason >= 0 && reason < RM_FINISH_REASON_COUNT) {
      this.#slots[this.#base + RM_SUCCESS + reason]!++;
    }
    this.#e2e.observe(nonNegative(this.#nowMs - rows[row + F.Arrival]!) / 1000);
    const first = rows[row + F.FirstToken]!;
    if (first >= 0) {
      const scheduled = rows[row + F.Scheduled]!;
      const last = rows[row + F.LastToken]!;
      const prefillMs = nonNegative(first - scheduled);
      const decodeMs = nonNegative(last - first);
      this.#queue.observe(nonNegative(scheduled - rows[row + F.Arrival]!) / 1000);
      this.#prefill.observe(prefillMs / 1000);
      this.#decode.observe(decodeMs / 1000);
      this.#inference.observe((prefillMs + decodeMs) / 1000);
    }
    this.#promptTokens.observe(this.#target.promptLen(slot));
    this.#generationTokens.observe(completion);
  }
}

/** Clocks of different threads and processes may disagree by a fraction of a millisecond. */
function nonNegative(ms: number): number {
  return Math.max(ms, 0);
}
