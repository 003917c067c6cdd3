/**
 * A process's own health, published by its main thread into its health slots of the shared region
 * (layout.ts, HEALTH_*), so that any API server renders every process's figures at scrape time
 * without asking it: GC pauses by kind (perf_hooks 'gc' entries, as prom-client's
 * collectDefaultMetrics observes them), event-loop delay (perf_hooks.monitorEventLoopDelay since the
 * process started), heap and RSS, CPU time (process.cpuUsage: every thread of the process), and the
 * API server's in-flight requests and packer queue. An API server's main thread also writes its own
 * entry of the server's thread-health table (thread-health.ts) from the same GC observer.
 *
 * The figures that vLLM-era frontends lose under load are exactly these, so they are written where
 * they happen (the GC observer writes its histogram as each entry arrives) and read without an IPC
 * round trip: a process stuck in a long pause still shows the pauses it finished, and its
 * HEALTH_PUBLISHED_AT_MS shows how long ago it last spoke.
 */
import {
  constants,
  type IntervalHistogram,
  monitorEventLoopDelay,
  type PerformanceEntry,
  PerformanceObserver,
} from 'node:perf_hooks';
import {
  GC_HIST_STRIDE,
  GC_KIND_COUNT,
  HEALTH_CPU_SYSTEM,
  HEALTH_CPU_USER,
  HEALTH_GC_HIST,
  HEALTH_GC_MAX,
  HEALTH_HEAP_USED,
  HEALTH_IN_FLIGHT,
  HEALTH_INLINE_ANSWERS,
  HEALTH_LAG_MAX,
  HEALTH_LAG_P50,
  HEALTH_LAG_P99,
  HEALTH_PACKER_QUEUE,
  HEALTH_PID,
  HEALTH_POOL_IN_USE,
  HEALTH_POOL_ONE_OFF,
  HEALTH_POOL_POOLED,
  HEALTH_PUBLISHED_AT_MS,
  HEALTH_RSS,
} from '../shm/layout.js';
import { GC_BUCKETS } from './buckets.js';
import { RegionHistogram } from './region-histogram.js';
import { ThreadHealthEntry } from './thread-health.js';

/** Label values of `kind`, in HEALTH_GC_MAX / HEALTH_GC_HIST order. */
export const GC_KIND_NAMES = ['minor', 'major', 'incremental', 'weakcb'] as const;

/** perf_hooks' gc kind flag -> GC_KIND_NAMES index, or -1. */
export function gcKindIndex(kind: number): number {
  switch (kind) {
    case constants.NODE_PERFORMANCE_GC_MINOR:
      return 0;
    case constants.NODE_PERFORMANCE_GC_MAJOR:
      return 1;
    case constants.NODE_PERFORMANCE_GC_INCREMENTAL:
      return 2;
    case constants.NODE_PERFORMANCE_GC_WEAKCB:
      return 3;
    default:
      return -1;
  }
}

export const HEALTH_PUBLISH_MS = 100;
/** The event-loop delay monitor samples every this many ms (its own timer). */
const LAG_RESOLUTION_MS = 10;

/** How a process's answers were placed (an API server's response pool, response-pool.ts). */
export interface ResponsePoolFigures {
  /** Bytes held by answers not yet sent. */
  inUseBytes: number;
  /** Answers placed in the pool, since the process started. */
  pooled: number;
  /** Answers larger than a quarter of the pool (a buffer of their own). */
  oversize: number;
  /** Answers that found no free run (a buffer of their own). */
  full: number;
}

export interface ProcessHealthOptions {
  /** Requests whose client is waiting (API servers). */
  inFlight?: () => number;
  /** Encode tasks waiting for a packer thread (API servers). */
  packerQueue?: () => number;
  /** The response pool's figures (API servers; null without a pool). */
  responsePool?: () => ResponsePoolFigures | null;
  /** Answers the main thread encoded itself, since it started (API servers). */
  inlineAnswers?: () => number;
  /** The publish timer fired `lateMs` after it was due: the event loop was blocked that long. */
  onLoopBlocked?: (lateMs: number) => void;
  /** Lateness that counts as a blocked loop, ms. */
  blockedMs?: number;
  /** f64 index of this main thread's thread-health entry (API servers: layout.threadHealthIndex). */
  threadBase?: number;
}

export class ProcessHealth {
  readonly #slots: Float64Array;
  readonly #base: number;
  readonly #options: ProcessHealthOptions;
  readonly #gc: RegionHistogram[] = [];
  readonly #lag: IntervalHistogram;
  readonly #thread: ThreadHealthEntry | null;
  /** CPU seconds of the processes before this one in this block (user, system). */
  #cpuCarry = [0, 0];
  /** Answers the processes before this one in this block placed (pooled, one-off, inline). */
  #answerCarry = [0, 0, 0];
  #observer: PerformanceObserver | null = null;
  #timer: NodeJS.Timeout | null = null;
  #dueAt = 0;

  /** `base`: f64 index of the process's HEALTH_* slot 0 in `slots` (layout.healthIndex). */
  constructor(slots: Float64Array, base: number, options: ProcessHealthOptions = {}) {
    this.#slots = slots;
    this.#base = base;
    this.#options = options;
    for (let k = 0; k < GC_KIND_COUNT; k++) {
      this.#gc.push(
        new RegionHistogram(slots, base + HEALTH_GC_HIST + k * GC_HIST_STRIDE, GC_BUCKETS),
      );
    }
    this.#lag = monitorEventLoopDelay({ resolution: LAG_RESOLUTION_MS });
    this.#thread =
      options.threadBase === undefined ? null : new ThreadHealthEntry(slots, options.threadBase);
  }

  /**
   * Starts observing and publishing. The process-scoped figures (GC maxima, event-loop delay) start
   * afresh; the GC histograms, CPU time and answer counts continue what a predecessor in this block
   * counted.
   */
  start(intervalMs = HEALTH_PUBLISH_MS): void {
    const s = this.#slots;
    const b = this.#base;
    this.#cpuCarry = [s[b + HEALTH_CPU_USER]!, s[b + HEALTH_CPU_SYSTEM]!];
    this.#answerCarry = [
      s[b + HEALTH_POOL_POOLED]!,
      s[b + HEALTH_POOL_ONE_OFF]!,
      s[b + HEALTH_INLINE_ANSWERS]!,
    ];
    s[b + HEALTH_POOL_IN_USE] = 0;
    this.#thread?.begin();
    s.fill(0, b + HEALTH_GC_MAX, b + HEALTH_GC_MAX + GC_KIND_COUNT);
    s.fill(0, b + HEALTH_LAG_P50, b + HEALTH_LAG_MAX + 1);
    s[b + HEALTH_PID] = process.pid;
    this.#lag.enable();
    this.#observer = new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) this.recordGc(gcKindOf(entry), entry.duration);
    });
    this.#observer.observe({ entryTypes: ['gc'] });
    this.publish();
    this.#dueAt = performance.now() + intervalMs;
    this.#timer = setInterval(() => this.#tick(intervalMs), intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    this.#observer?.disconnect();
    this.#observer = null;
    this.#lag.disable();
  }

  /** One GC pause of `durationMs` of kind `kind` (GC_KIND_NAMES index; others are ignored). */
  recordGc(kind: number, durationMs: number): void {
    const histogram = this.#gc[kind];
    if (histogram === undefined) return;
    const seconds = durationMs / 1000;
    histogram.observe(seconds);
    this.#thread?.recordGc(seconds);
    const max = this.#base + HEALTH_GC_MAX + kind;
    if (seconds > this.#slots[max]!) this.#slots[max] = seconds;
  }

  /** Writes the current gauges. */
  publish(): void {
    const s = this.#slots;
    const b = this.#base;
    const lag = this.#lag;
    const opts = this.#options;
    if (lag.count > 0) {
      s[b + HEALTH_LAG_P50] = lagSeconds(lag.percentile(50));
      s[b + HEALTH_LAG_P99] = lagSeconds(lag.percentile(99));
      s[b + HEALTH_LAG_MAX] = lagSeconds(lag.max);
    }
    const heapUsed = process.memoryUsage().heapUsed;
    s[b + HEALTH_HEAP_USED] = heapUsed;
    s[b + HEALTH_RSS] = process.memoryUsage.rss();
    const cpu = process.cpuUsage(); // µs
    s[b + HEALTH_CPU_USER] = this.#cpuCarry[0]! + cpu.user / 1e6;
    s[b + HEALTH_CPU_SYSTEM] = this.#cpuCarry[1]! + cpu.system / 1e6;
    this.#thread?.publish(heapUsed);
    if (opts.inFlight) s[b + HEALTH_IN_FLIGHT] = opts.inFlight();
    if (opts.packerQueue) s[b + HEALTH_PACKER_QUEUE] = opts.packerQueue();
    const pool = opts.responsePool?.() ?? null;
    if (pool !== null) {
      s[b + HEALTH_POOL_IN_USE] = pool.inUseBytes;
      s[b + HEALTH_POOL_POOLED] = this.#answerCarry[0]! + pool.pooled;
      s[b + HEALTH_POOL_ONE_OFF] = this.#answerCarry[1]! + pool.oversize + pool.full;
    }
    if (opts.inlineAnswers)
      s[b + HEALTH_INLINE_ANSWERS] = this.#answerCarry[2]! + opts.inlineAnswers();
    s[b + HEALTH_PUBLISHED_AT_MS] = Date.now();
  }

  #tick(intervalMs: number): void {
    const now = performance.now();
    const late = now - this.#dueAt;
    this.#dueAt = now + intervalMs;
    if (late > (this.#options.blockedMs ?? 1_000)) this.#options.onLoopBlocked?.(late);
    this.publish();
  }
}

/**
 * The monitor records the time between its timer's runs, in ns, which is the resolution plus the
 * delay (an idle loop reads ~10 ms at a 10 ms resolution): the delay is what exceeds the resolution.
 */
function lagSeconds(sampleNs: number): number {
  const delayNs = sampleNs - LAG_RESOLUTION_MS * 1e6;
  return delayNs > 0 ? delayNs / 1e9 : 0;
}

/** The entry's gc kind index (Node >= 16 keeps it in `detail.kind`). */
function gcKindOf(entry: PerformanceEntry): number {
  const detail = (entry as { detail?: { kind?: unknown } }).detail;
  return typeof detail?.kind === 'number' ? gcKindIndex(detail.kind) : -1;
}
