/**
 * Per-request times and outcome, one row of float64 per request slot in a SharedArrayBuffer shared by
 * an API server's main thread and its output worker. The main thread writes a request's arrival
 * before it commits the request's ADD record; the output worker writes the rest as the request's
 * outputs arrive. The ring's publish/acquire chain (ADD commit -> engine -> STEP commit) orders the
 * arrival before any output the worker sees, and the worker's postMessage naming the finished slot
 * orders its figures before the main thread reads them for the request's log line.
 *
 *   slot s, TIMELINE_STRIDE f64:
 *   +---------+-----------+-------------+------------+---------+------------+--------+-----+
 *   | ARRIVAL | SCHEDULED | FIRST_TOKEN | LAST_TOKEN | TTFT_MS | COMPLETION | FINISH | GEN |
 *   +---------+-----------+-------------+------------+---------+------------+--------+-----+
 *     main      worker ----------------------------------------------------------------->
 *
 * Each word has one writer. The worker's words belong to the request whose slot generation is in GEN
 * (written when the worker first sees the request), so the main thread can tell a finished request's
 * figures from a previous occupant's (an engine death fails requests the worker never saw).
 *
 * Wall-clock milliseconds (performance.timeOrigin + performance.now(): sub-millisecond, comparable
 * across threads) except SCHEDULED, FIRST_TOKEN and LAST_TOKEN, which are the engine's step clock.
 */
export const TimelineField = {
  /** When the API server accepted the request. Main thread. */
  Arrival: 0,
  /** Estimated start of the request's first engine step (see request-recorder.ts). */
  Scheduled: 1,
  /** Engine clock of the step that produced the first token; -1 before it. */
  FirstToken: 2,
  LastToken: 3,
  /** Time to first token as observed, ms; -1 before it. */
  TtftMs: 4,
  /** Completion tokens delivered, written when the response completes. */
  Completion: 5,
  /** The engine's FinishReason code (wire/types.ts) once the response completed, else 0. */
  Finish: 6,
  /** Slot generation of the request the worker's words describe. */
  Gen: 7,
} as const;

export const TIMELINE_STRIDE = 8;

/** Wall-clock ms with sub-ms resolution, comparable between threads of one machine. */
export function wallClockMs(): number {
  return performance.timeOrigin + performance.now();
}

export class RequestTimeline {
  readonly sab: SharedArrayBuffer;
  readonly slots: number;
  /** Raw rows: `rows[slot * TIMELINE_STRIDE + TimelineField.X]`. */
  readonly rows: Float64Array;

  /** A new table for `slots` request slots (main thread), or a view of an existing one (worker). */
  constructor(sabOrSlots: SharedArrayBuffer | number) {
    this.sab =
      typeof sabOrSlots === 'number'
        ? new SharedArrayBuffer(sabOrSlots * TIMELINE_STRIDE * 8)
        : sabOrSlots;
    this.rows = new Float64Array(this.sab);
    this.slots = this.rows.length / TIMELINE_STRIDE;
  }

  /** Main thread: the request in `slot` arrived now (call before its ADD record is committed). */
  arrive(slot: number, atMs: number = wallClockMs()): void {
    this.rows[slot * TIMELINE_STRIDE + TimelineField.Arrival] = atMs;
  }

  get(slot: number, field: number): number {
    return this.rows[slot * TIMELINE_STRIDE + field]!;
  }

  /**
   * Main thread, once the response of (slot, gen) is complete: what the worker recorded of it, or
   * null when the worker never saw it (no outputs, or the other output path).
   */
  outcome(slot: number, gen: number): RequestOutcome | null {
    const row = slot * TIMELINE_STRIDE;
    const rows = this.rows;
    if (rows[row + TimelineField.Gen] !== gen || rows[row + TimelineField.Finish] === 0)
      return null;
    const ttft = rows[row + TimelineField.TtftMs]!;
    return {
      completionTokens: rows[row + TimelineField.Completion]!,
      finish: rows[row + TimelineField.Finish]!,
      ttftMs: ttft < 0 ? null : ttft,
    };
  }
}

export interface RequestOutcome {
  completionTokens: number;
  /** FinishReason code (wire/types.ts). */
  finish: number;
  ttftMs: number | null;
}
