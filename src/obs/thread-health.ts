/**
 * One thread's own GC and heap, in its entry of its API server's thread-health table (layout.ts,
 * TH_*), so that /metrics and the benchmark see every isolate of the process, not only the main
 * thread's: process.memoryUsage().heapUsed and perf_hooks' GC entries describe the calling isolate
 * alone, and the output worker and the packers are isolates of their own.
 *
 * A worker thread's GC pauses go straight into its entry from V8's GC callbacks (the addon's
 * watchGc), as each one ends: perf_hooks delivers 'gc' entries through the thread's event loop,
 * which the output worker's never turns (output-loop.ts), and a v8.GCProfiler stopped and
 * restarted on a timer to harvest it keeps what its GC callbacks wrote (Node 20.20: 600 cycles over
 * 1,500 scavenges left ~2 GB of RSS; an API server's busiest worker grew 3-5 MB/s in the soak).
 * The main thread's entry is written by its ProcessHealth from the perf_hooks observer it already
 * runs.
 */
import { getHeapStatistics } from 'node:v8';
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
import { shmAddon } from '../shm/native.js';

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

  /** From now on the calling thread's GC pauses reach the entry as they end (see above). */
  watchGc(): void {
    const b = this.#base;
    shmAddon().watchGc(this.#slots, b + TH_GC_SECONDS, b + TH_GC_COUNT, b + TH_GC_MAX);
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
 * A worker thread's publisher: its GC pauses reach the entry as they end (watchGc), its isolate's
 * heap at each publish. A thread whose event loop runs publishes on a timer (start(intervalMs));
 * one whose loop never turns calls publishIfDue() from its own loop.
 */
export class WorkerThreadHealth {
  readonly #entry: ThreadHealthEntry;
  #timer: NodeJS.Timeout | null = null;
  #lastMs = 0;

  constructor(entry: ThreadHealthEntry) {
    this.#entry = entry;
  }

  /** Starts watching GC and publishes once; with `intervalMs`, then again on a timer. */
  start(intervalMs?: number): void {
    this.#entry.begin();
    this.#entry.watchGc();
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
    this.#entry.publish(getHeapStatistics().used_heap_size);
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    shmAddon().unwatchGc();
  }
}
