/**
 * One thread's own GC and heap, in its entry of its API server's thread-health table (layout.ts,
 * TH_*), so that /metrics and the benchmark see every isolate of the process, not only the main
 * thread's: process.memoryUsage().heapUsed and perf_hooks' GC entries describe the calling isolate
 * alone, and the output worker and the packers are isolates of their own.
 *
 * A worker thread observes its GC with v8.GCProfiler, not a perf_hooks PerformanceObserver: Node
 * delivers each 'gc' entry through the thread's event loop (node_perf.cc queues it as a native
 * immediate), and the output worker's loop never turns while it runs (output-loop.ts), so an
 * observer there would see nothing and queue every entry until the thread ends. GCProfiler records
 * in V8's GC callbacks and is harvested synchronously at each publish. Its `cost` is the time
 * between the prologue and the epilogue callback, as perf_hooks' duration is. The main thread's
 * entry is written by its ProcessHealth from the observer it already runs.
 */
import { GCProfiler, type GCProfilerResult, getHeapStatistics } from 'node:v8';
import {
  TH_GC_COUNT,
  TH_GC_MAX,
  TH_GC_SECONDS,
  TH_HEAP_USED,
  TH_PUBLISHED_AT_MS,
  THREAD_FIRST_PACKER,
  THREAD_LOG,
  THREAD_MAIN,
  THREAD_OUTPUT,
} from '../shm/layout.js';

export const THREAD_PUBLISH_MS = 100;

/** The `thread` label of entry t: main, output, log, packer-1, packer-2, ... */
export function threadLabel(entry: number): string {
  switch (entry) {
    case THREAD_MAIN:
      return 'main';
    case THREAD_OUTPUT:
      return 'output';
    case THREAD_LOG:
      return 'log';
    default:
      return `packer-${entry - THREAD_FIRST_PACKER + 1}`;
  }
}

/** The writer of one entry; only its thread calls it. */
export class ThreadHealthEntry {
  readonly #slots: Float64Array;
  readonly #base: number;

  /** `base`: f64 index of the entry's TH_* slot 0. */
  constructor(slots: Float64Array, base: number) {
    this.#slots = slots;
    this.#base = base;
  }

  /** The thread starts: its longest pause starts afresh, the GC totals continue a predecessor's. */
  begin(): void {
    this.#slots[this.#base + TH_GC_MAX] = 0;
  }

  recordGc(seconds: number): void {
    const s = this.#slots;
    const b = this.#base;
    s[b + TH_GC_SECONDS]! += seconds;
    s[b + TH_GC_COUNT]!++;
    if (seconds > s[b + TH_GC_MAX]!) s[b + TH_GC_MAX] = seconds;
  }

  publish(heapUsedBytes: number): void {
    this.#slots[this.#base + TH_HEAP_USED] = heapUsedBytes;
    this.#slots[this.#base + TH_PUBLISHED_AT_MS] = Date.now();
  }
}

/**
 * A worker thread's publisher: harvests its GCProfiler and reads its isolate's heap at each
 * publish. A thread whose event loop runs publishes on a timer (start(intervalMs)); one whose loop
 * never turns calls publishIfDue() from its own loop.
 */
export class WorkerThreadHealth {
  readonly #entry: ThreadHealthEntry;
  readonly #profiler = new GCProfiler();
  #timer: NodeJS.Timeout | null = null;
  #lastMs = 0;

  constructor(entry: ThreadHealthEntry) {
    this.#entry = entry;
  }

  /** Starts observing and publishes once; with `intervalMs`, then again on a timer. */
  start(intervalMs?: number): void {
    this.#entry.begin();
    this.#profiler.start();
    this.publish();
    if (intervalMs === undefined) return;
    this.#timer = setInterval(() => this.publish(), intervalMs);
    this.#timer.unref();
  }

  /** Publishes if the last publish is THREAD_PUBLISH_MS old at `nowMs` (any ms clock). */
  publishIfDue(nowMs: number): void {
    if (nowMs - this.#lastMs < THREAD_PUBLISH_MS) return;
    this.#lastMs = nowMs;
    this.publish();
  }

  publish(): void {
    // stop() returns the GCs since start(); a GC between the two calls is the only one missed.
    // (undefined if it was not started).
    const harvest: GCProfilerResult | undefined = this.#profiler.stop();
    this.#profiler.start();
    for (const gc of harvest?.statistics ?? []) this.#entry.recordGc(gc.cost / 1e6); // µs
    this.#entry.publish(getHeapStatistics().used_heap_size);
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    this.#profiler.stop();
  }
}
