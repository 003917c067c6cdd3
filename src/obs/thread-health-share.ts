/**
 * How each thread of an API server finds its thread-health entry (thread-health.ts). The main thread
 * shares the region and its server's table through worker_threads' environment data before any
 * other thread starts (as worker-metrics.ts shares the request metrics), so every Worker created
 * afterwards receives it: the output worker, the packers, and pino's log transport, whose code is
 * pino's and whose entry point is ours only as its target (log-transport.ts). A thread started
 * without a share (tests, tools, the supervisor's and the engine's log threads) publishes nothing.
 */
import { getEnvironmentData, setEnvironmentData } from 'node:worker_threads';
import {
  TH_GC_MAX,
  TH_HEAP_USED,
  TH_PUBLISHED_AT_MS,
  THREAD_FIRST_PACKER,
  THREAD_LOG,
  THREAD_OUTPUT,
  THREAD_SLOT_COUNT,
  THREAD_STRIDE,
} from '../shm/layout.js';
import { slotsView, wordsView } from '../shm/words.js';
import { THREAD_PUBLISH_MS, ThreadHealthEntry, WorkerThreadHealth } from './thread-health.js';

const ENVIRONMENT_KEY = 'ringserve:thread-health';

export interface ThreadHealthShare {
  /** The buffer holding the table (the cluster's region). */
  sab: SharedArrayBuffer;
  /** f64 index of entry 0 (layout.threadHealthIndex). */
  entries: number;
  /** i32 index of the THREAD_CLAIM word (layout.threadClaimIndex). */
  claim: number;
}

/**
 * Main thread, at start, before it starts any other thread: clears the gauges a predecessor left in
 * the table and the packers' claim word, and shares the table with the threads to come.
 */
export function shareThreadHealth(share: ThreadHealthShare): void {
  const f64 = slotsView(share.sab);
  for (let t = 0; t < THREAD_SLOT_COUNT; t++) {
    const base = share.entries + t * THREAD_STRIDE;
    f64[base + TH_PUBLISHED_AT_MS] = 0;
    f64[base + TH_HEAP_USED] = 0;
    f64[base + TH_GC_MAX] = 0;
  }
  Atomics.store(wordsView(share.sab), share.claim, 0);
  setEnvironmentData(ENVIRONMENT_KEY, share as unknown as Parameters<typeof setEnvironmentData>[1]);
}

/** Stops sharing (tests). */
export function unshareThreadHealth(): void {
  setEnvironmentData(ENVIRONMENT_KEY, undefined);
}

/** The f64 index of this thread's entry, taking a packer entry from the claim word; or null. */
function entryOf(share: ThreadHealthShare, role: WorkerRole): number | null {
  let entry: number = role === 'output' ? THREAD_OUTPUT : THREAD_LOG;
  if (role === 'packer') {
    const i32 = wordsView(share.sab);
    entry = THREAD_FIRST_PACKER + Atomics.add(i32, share.claim, 1);
    if (entry >= THREAD_SLOT_COUNT) return null;
  }
  return share.entries + entry * THREAD_STRIDE;
}

export type WorkerRole = 'output' | 'packer' | 'log';

/** This thread's publisher, if it publishes from its own loop (the output worker). */
let polled: WorkerThreadHealth | null = null;

/**
 * Starts this worker thread's publisher, or does nothing without a share (or a free entry). The
 * output worker's loop never returns to its event loop, so it publishes from its recorder's
 * per-step hook (threadHealthPoll); the others on a timer.
 */
export function startThreadHealth(role: WorkerRole): WorkerThreadHealth | null {
  const share = getEnvironmentData(ENVIRONMENT_KEY) as ThreadHealthShare | undefined;
  if (share === undefined) return null;
  const base = entryOf(share, role);
  if (base === null) return null;
  const f64 = slotsView(share.sab);
  const health = new WorkerThreadHealth(new ThreadHealthEntry(f64, base));
  if (role === 'output') {
    health.start();
    polled = health;
  } else {
    health.start(THREAD_PUBLISH_MS);
  }
  return health;
}

/** For a loop that never yields: publishes this thread's health when due (ms clock), if it has one. */
export function threadHealthPoll(): ((nowMs: number) => void) | null {
  const health = polled;
  return health === null ? null : (nowMs) => health.publishIfDue(nowMs);
}
