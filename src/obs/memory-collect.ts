/**
 * Collecting a process's garbage on demand, in every thread, for a reading of what it keeps.
 *
 * At rest a process's RSS still says where each V8 isolate stands in its grow-and-collect cycle:
 * new space and old-space pages that the last scavenge or mark-compact left committed, and which
 * the next collection may or may not hand back. Two readings of an API server at rest minutes apart
 * differed by up to ±30 MB that way, in V8's 256 KiB pages, in both directions (the soak's notes),
 * so a leak of a few MB an hour cannot be told from it. On SIGUSR2 a ringserve process (the
 * primary, the engine, each API server, the router, the headless vLLM engine) therefore collects
 * everything in every one of its isolates (V8's LowMemoryNotification: full collections,
 * compacting, free pages given back), then gives glibc's free memory back (malloc_trim), and logs
 * what it had before and after, and glibc's own account of its heap (malloc_info: allocated and
 * held, arena by arena). What is left is what the process holds. The soak sends it at its readings
 * at rest (ops/soak/idle-memory.ts); an operator may send it to see the same. It is for a process
 * at rest: the main thread's collection pauses it (tens of ms for an API server).
 *
 * The main thread reaches its other threads through a small shared board, handed to every thread
 * it starts through worker_threads' environment data (as thread-health-share.ts does): a request
 * count the main thread raises, and a count of the threads that answered it. A thread whose event
 * loop turns answers from an unref'd timer; the output worker, whose loop never returns to its event
 * loop, from its idle pass (it answers once it is idle, which at rest is at once).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { getHeapStatistics } from 'node:v8';
import { getEnvironmentData, setEnvironmentData } from 'node:worker_threads';
import { shmAddon } from '../shm/native.js';
import type { Logger } from './log.js';

const ENVIRONMENT_KEY = 'ringserve:memory-collect';
/** i32 slots of the board. */
const ASKED = 0; // requests so far (the main thread raises it)
const ANSWERED = 1; // threads that answered the current request
const THREADS = 2; // threads that answer (each adds itself when it starts answering)
// What the answering threads' isolates hold after their collection, summed, kB (each thread adds
// its own before it counts itself answered).
const THREADS_ARRAY_BUFFERS_KB = 3;
const THREADS_V8_MALLOCED_KB = 4;
const BOARD_SLOTS = 5;

/** How often a thread with an event loop looks at the board: one Atomics.load. */
export const ANSWER_EVERY_MS = 250;
/** How long the main thread waits for its other threads before it trims and reports. */
export const ANSWER_TIMEOUT_MS = 5_000;
/** The signal a ringserve process collects on. */
export const COLLECT_SIGNAL = 'SIGUSR2';

/** What one collection did, as logged ("memory collected"). */
export interface CollectReport {
  /** Threads besides the main thread that answered, of those that answered requests when asked. */
  threadsAnswered: number;
  threads: number;
  /** The main thread's isolate: heap committed and used, before and after, bytes. */
  mainHeapTotalBefore: number;
  mainHeapTotalAfter: number;
  mainHeapUsedAfter: number;
  rssBefore: number;
  rssAfter: number;
  /** Whether malloc_trim gave memory back. */
  mallocTrimmed: boolean;
  /**
   * After the collection, of the memory glibc counts as allocated: the main isolate's array
   * buffers (Node allocates their backing stores with malloc) and V8's own malloc for the main
   * isolate (its malloced_memory: zones, tables). The rest is Node's and the addons' native state
   * and the other threads'. Tells a JS object that keeps buffers from native memory kept.
   */
  mainArrayBuffers: number;
  mainV8Malloced: number;
  /**
   * The same for the other threads that answered, summed: their isolates' array buffers (a
   * SharedArrayBuffer is counted by every isolate that holds it, and the shared regions are mapped
   * memory, not glibc's) and V8's malloc. With the main thread's, what is left of glibc's
   * allocated memory is native state outside every isolate.
   */
  threadsArrayBuffers: number;
  threadsV8Malloced: number;
  /** glibc's heap after the trim (empty arenas without glibc). */
  malloc: MallocHeap;
  ms: number;
}

/** The main thread's side: asks, waits for the answers, trims. */
export class MemoryCollect {
  readonly #board: Int32Array;
  #running: Promise<CollectReport> | null = null;

  constructor(board: Int32Array) {
    this.#board = board;
  }

  /** Threads that answer requests now (those started with answerMemoryCollect, not yet ended). */
  get threads(): number {
    return Atomics.load(this.#board, THREADS);
  }

  /** Collects in every thread of the process; a call while one runs joins it. */
  collect(): Promise<CollectReport> {
    this.#running ??= this.#collect().finally(() => {
      this.#running = null;
    });
    return this.#running;
  }

  /**
   * Collects on COLLECT_SIGNAL, logging each report at info (a failure at error). The report
   * answers an operator's request, so it is logged at a level above info too (not when silent).
   */
  onSignal(log: Logger): void {
    const out =
      log.isLevelEnabled('info') || log.level === 'silent' ? log : log.child({}, { level: 'info' });
    process.on(COLLECT_SIGNAL, () => {
      this.collect().then(
        (r) =>
          out.info(
            {
              threads_answered: r.threadsAnswered,
              threads: r.threads,
              main_heap_total_mb: [mb(r.mainHeapTotalBefore), mb(r.mainHeapTotalAfter)],
              main_heap_used_mb: mb(r.mainHeapUsedAfter),
              rss_mb: [mb(r.rssBefore), mb(r.rssAfter)],
              malloc_trimmed: r.mallocTrimmed,
              main_array_buffers_mb: mb(r.mainArrayBuffers),
              main_v8_malloced_mb: mb(r.mainV8Malloced),
              threads_array_buffers_mb: mb(r.threadsArrayBuffers),
              threads_v8_malloced_mb: mb(r.threadsV8Malloced),
              // Allocated / from the system, MB: in all, then arena by arena (the main one first).
              malloc_mb: [mb(allocated(r.malloc)), mb(fromSystem(r.malloc))],
              malloc_arenas_mb: r.malloc.arenas.map((a) => [
                mb(a.systemBytes - a.freeBytes),
                mb(a.systemBytes),
              ]),
              ms: Math.round(r.ms),
            },
            'memory collected',
          ),
        (error: unknown) => out.error({ err: error }, 'memory collection failed'),
      );
    });
  }

  async #collect(): Promise<CollectReport> {
    const started = performance.now();
    const board = this.#board;
    const rssBefore = process.memoryUsage.rss();
    const mainHeapTotalBefore = getHeapStatistics().total_heap_size;
    // The threads counted before the request is raised: a thread that starts answering reads the
    // request count before it counts itself (answerMemoryCollect), so each thread counted here
    // answers this request. One that starts later may answer it too, or not; it is not waited for.
    const threads = Atomics.load(board, THREADS);
    Atomics.store(board, ANSWERED, 0);
    Atomics.store(board, THREADS_ARRAY_BUFFERS_KB, 0);
    Atomics.store(board, THREADS_V8_MALLOCED_KB, 0);
    Atomics.add(board, ASKED, 1);
    shmAddon().collectGarbage();
    const after = getHeapStatistics();
    const deadline = performance.now() + ANSWER_TIMEOUT_MS;
    // A thread that ends meanwhile is not waited for either.
    const pending = (): boolean =>
      Atomics.load(board, ANSWERED) < Math.min(threads, Atomics.load(board, THREADS));
    while (pending() && performance.now() < deadline) {
      await sleep(20);
    }
    const threadsAnswered = Math.min(Atomics.load(board, ANSWERED), threads);
    // Last: the isolates' collections freed native memory too (external buffers, V8's own).
    const mallocTrimmed = shmAddon().trimMalloc();
    const usage = process.memoryUsage();
    return {
      threadsAnswered,
      threads,
      mainHeapTotalBefore,
      mainHeapTotalAfter: after.total_heap_size,
      mainHeapUsedAfter: after.used_heap_size,
      rssBefore,
      rssAfter: usage.rss,
      mallocTrimmed,
      mainArrayBuffers: usage.arrayBuffers,
      mainV8Malloced: getHeapStatistics().malloced_memory,
      threadsArrayBuffers: Atomics.load(board, THREADS_ARRAY_BUFFERS_KB) * 1024,
      threadsV8Malloced: Atomics.load(board, THREADS_V8_MALLOCED_KB) * 1024,
      malloc: mallocHeap(),
      ms: performance.now() - started,
    };
  }
}

/** One glibc arena: what it has from the system and what of that is free (bins and top chunk). */
export interface MallocArena {
  systemBytes: number;
  freeBytes: number;
}

/** glibc's heap: its arenas and the chunks it mmapped on their own (large allocations). */
export interface MallocHeap {
  arenas: MallocArena[];
  mmapBytes: number;
}

/** The process's glibc heap now (malloc_info); no arenas without glibc. */
export function mallocHeap(): MallocHeap {
  return parseMallocInfo(shmAddon().mallocInfo());
}

/**
 * Reads malloc_info(3)'s XML: each `<heap>`'s `system current` and its free `fast` and `rest`
 * totals (`rest` includes the top chunk), and the `mmap` total after the heaps.
 */
export function parseMallocInfo(xml: string): MallocHeap {
  const size = (text: string, re: RegExp): number => Number(re.exec(text)?.[1] ?? 0);
  const arenas: MallocArena[] = [];
  for (const [heap] of xml.matchAll(/<heap nr="\d+">[\s\S]*?<\/heap>/g)) {
    arenas.push({
      systemBytes: size(heap, /<system type="current" size="(\d+)"/),
      freeBytes:
        size(heap, /<total type="fast" count="\d+" size="(\d+)"/) +
        size(heap, /<total type="rest" count="\d+" size="(\d+)"/),
    });
  }
  return { arenas, mmapBytes: size(xml, /<total type="mmap" count="\d+" size="(\d+)"/) };
}

/** Bytes allocated from glibc: in the arenas, and mmapped chunks. */
export function allocated(heap: MallocHeap): number {
  return heap.arenas.reduce((sum, a) => sum + a.systemBytes - a.freeBytes, heap.mmapBytes);
}

/** Bytes glibc has from the system: the arenas, and mmapped chunks. */
export function fromSystem(heap: MallocHeap): number {
  return heap.arenas.reduce((sum, a) => sum + a.systemBytes, heap.mmapBytes);
}

/** MB to 10 kB: a leak of a few hundred bytes a second shows within minutes. */
function mb(bytes: number): number {
  return Math.round(bytes / 1e4) / 100;
}

/** Whole kB: what a thread adds to the board's i32 sums. */
function kb(bytes: number): number {
  return Math.round(bytes / 1024);
}

/**
 * Main thread, before it starts any other thread (pino's log thread included): shares a fresh
 * board with the threads to come and returns the side that asks.
 */
export function shareMemoryCollect(): MemoryCollect {
  const board = new Int32Array(new SharedArrayBuffer(BOARD_SLOTS * 4));
  setEnvironmentData(ENVIRONMENT_KEY, board);
  return new MemoryCollect(board);
}

/** Stops sharing (tests). */
export function unshareMemoryCollect(): void {
  setEnvironmentData(ENVIRONMENT_KEY, undefined);
}

/**
 * A thread other than the main thread: from now on it answers the main thread's requests. With
 * 'timer' it looks every ANSWER_EVERY_MS from an unref'd timer; with 'poll' the caller calls the
 * returned function from its own loop. Returns null (and answers nothing) without a board.
 */
export function answerMemoryCollect(mode: 'timer' | 'poll'): (() => void) | null {
  const board = getEnvironmentData(ENVIRONMENT_KEY) as Int32Array | undefined;
  if (board === undefined) return null;
  // In this order (MemoryCollect.#collect counts the threads before it raises the request).
  let done = Atomics.load(board, ASKED);
  Atomics.add(board, THREADS, 1);
  // A thread that ends (a replaced packer) is not waited for.
  process.once('exit', () => Atomics.sub(board, THREADS, 1));
  const poll = (): void => {
    const asked = Atomics.load(board, ASKED);
    if (asked === done) return;
    done = asked;
    shmAddon().collectGarbage();
    // This isolate's, as process.memoryUsage() reads them in a worker thread.
    Atomics.add(board, THREADS_ARRAY_BUFFERS_KB, kb(process.memoryUsage().arrayBuffers));
    Atomics.add(board, THREADS_V8_MALLOCED_KB, kb(getHeapStatistics().malloced_memory));
    Atomics.add(board, ANSWERED, 1);
  };
  if (mode === 'timer') setInterval(poll, ANSWER_EVERY_MS).unref();
  return poll;
}
