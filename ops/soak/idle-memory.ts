/**
 * A process's memory at rest, for telling a leak from a working set. Under load an API server's
 * RSS follows what it holds for the requests in flight (the output arena, the response pool, glibc's
 * thread arenas), and in a soak with faults that load is not steady: a server takes its dead
 * sibling's clients and keeps most of them, and the cluster completes more once the engine is no
 * longer being killed. So the soak also measures each process at rest twice, with the same nothing
 * in flight: once at the end of the warm-up (a quiet spell: no new requests, no faults, no pause
 * cycles, until every request in flight has ended and the cluster has had IDLE_SETTLE_MS to give
 * back what it holds for none) and once after the final drain; in a long run also where the
 * engine's last incarnation is past its warm-up (faults.ts engineRestS). What a process kept
 * between its first reading past its warm-up and the last is what it will keep: a leak. verdict.ts
 * turns the two into a slope in %/h.
 *
 * Before each reading every process collects its garbage in every thread and trims malloc
 * (COLLECT_SIGNAL, src/obs/memory-collect.ts). Without it a reading says as much about where each
 * V8 isolate stood in its grow-and-collect cycle as about what the process holds: an API server
 * read up to ±30 MB apart at rest minutes apart, in V8 heap pages, both ways.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { ANSWER_TIMEOUT_MS, COLLECT_SIGNAL } from '../../src/obs/memory-collect.js';
import {
  clusterProcesses,
  type Mapping,
  type MemoryParts,
  openSockets,
  pidOf,
  processKey,
  readMappings,
} from './processes.js';

/**
 * How long a cluster with nothing in flight gets before its memory is read: the output arena gives
 * an idle server's blocks back after 10 s (src/server/output-worker/output-loop.ts), the malloc trimmer
 * runs every 30 s, V8's memory reducer collects an isolate that stopped allocating within seconds.
 */
export const IDLE_SETTLE_MS = 45_000;
/** Reads after the settle, 2 s apart; a process's figure is their median (one slow GC is not it). */
const IDLE_READS = 5;
/** From the signal to the first read: the processes' own wait for their threads, and 2 s more. */
const COLLECT_WAIT_MS = ANSWER_TIMEOUT_MS + 2_000;

/** One process's memory at rest: RSS and its private and shared-region parts, in bytes. */
export type IdleMemory = MemoryParts;

/** Memory at rest of every cluster process, by `title#pid` (the soak's series keys), and when. */
export interface IdleCheckpoint {
  atMs: number;
  /**
   * From the signal to collect to the first read (Date.now() ms): the soak's own disturbance (each
   * main thread pauses for its collection), whose /health probes are not judged.
   */
  collectSpan: [number, number];
  memory: Map<string, IdleMemory>;
  /** Each process's mappings with private memory, read once, with the last read: where it is. */
  mappings: Map<string, Mapping[]>;
  /** Each process's open sockets, read with the last read (processes.ts openSockets). */
  sockets: Map<string, number>;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/**
 * Waits IDLE_SETTLE_MS, has every process collect, then reads each IDLE_READS times; the caller
 * keeps the cluster idle.
 */
export async function readIdleMemory(primaryPid: number): Promise<IdleCheckpoint> {
  await sleep(IDLE_SETTLE_MS);
  const signalledAtMs = Date.now();
  for (const p of await clusterProcesses(primaryPid)) {
    try {
      process.kill(p.pid, COLLECT_SIGNAL);
    } catch {
      // Gone since the listing: it is not at rest, and the reads below leave it out.
    }
  }
  await sleep(COLLECT_WAIT_MS);
  const collectSpan: [number, number] = [signalledAtMs, Date.now()];
  const reads = new Map<string, IdleMemory[]>();
  const mappings = new Map<string, Mapping[]>();
  const sockets = new Map<string, number>();
  for (let i = 0; i < IDLE_READS; i++) {
    if (i > 0) await sleep(2_000);
    for (const p of await clusterProcesses(primaryPid)) {
      const key = processKey(p);
      const list = reads.get(key) ?? [];
      list.push({ rssBytes: p.rssBytes, anonBytes: p.anonBytes, shmemBytes: p.shmemBytes });
      reads.set(key, list);
      if (i === IDLE_READS - 1) {
        mappings.set(key, await readMappings(p.pid));
        const open = await openSockets(p.pid);
        if (open !== null) sockets.set(key, open);
      }
    }
  }
  const memory = new Map<string, IdleMemory>();
  for (const [key, list] of reads) {
    // A process that died or was born during the reads is not at rest.
    if (list.length < IDLE_READS) continue;
    memory.set(key, {
      rssBytes: median(list.map((m) => m.rssBytes)),
      anonBytes: median(list.map((m) => m.anonBytes)),
      shmemBytes: median(list.map((m) => m.shmemBytes)),
    });
  }
  return { atMs: Date.now(), collectSpan, memory, mappings, sockets };
}

/**
 * The soak's disturbances (faults, pause cycles) take turns with quiet spells: an action starts only
 * outside a quiet spell, and a quiet spell starts once the actions under way have ended.
 */
export class Turns {
  #quiet: Promise<void> | null = null;
  readonly #active = new Set<Promise<unknown>>();

  /** Runs `action` once no quiet spell is on. */
  async run<T>(action: () => Promise<T>): Promise<T> {
    while (this.#quiet !== null) await this.#quiet;
    const running = action();
    this.#active.add(running);
    try {
      return await running;
    } finally {
      this.#active.delete(running);
    }
  }

  /** Waits for the actions under way, then runs `during` with no new action starting until it ends. */
  async quietly<T>(during: () => Promise<T>): Promise<T> {
    let end!: () => void;
    this.#quiet = new Promise<void>((resolve) => {
      end = resolve;
    });
    try {
      await Promise.allSettled([...this.#active]);
      return await during();
    } finally {
      this.#quiet = null;
      end();
    }
  }
}

/** What a process logged when it collected ("memory collected", src/obs/memory-collect.ts). */
export interface CollectRecord {
  pid: number;
  timeMs: number;
  /** glibc's heap after the trim, MB: allocated, held from the system; then per arena. */
  mallocMb: [number, number];
  arenasMb: [number, number][];
  /** Of the allocated MB, the main isolate's array buffers and V8's own malloc (null in older logs). */
  mainArrayBuffersMb: number | null;
  mainV8MallocedMb: number | null;
  /** The same summed over the process's other threads (null in older logs). */
  threadsArrayBuffersMb: number | null;
  threadsV8MallocedMb: number | null;
}

/** The "memory collected" records of a cluster log (pino's JSON lines; other lines skipped). */
export function collectRecords(log: string): CollectRecord[] {
  const out: CollectRecord[] = [];
  for (const line of log.split('\n')) {
    if (!line.includes('"memory collected"')) continue;
    try {
      const r = JSON.parse(line);
      if (!Array.isArray(r.malloc_mb) || !Array.isArray(r.malloc_arenas_mb)) continue;
      out.push({
        pid: r.pid,
        timeMs: r.time,
        mallocMb: r.malloc_mb,
        arenasMb: r.malloc_arenas_mb,
        mainArrayBuffersMb:
          typeof r.main_array_buffers_mb === 'number' ? r.main_array_buffers_mb : null,
        mainV8MallocedMb: typeof r.main_v8_malloced_mb === 'number' ? r.main_v8_malloced_mb : null,
        threadsArrayBuffersMb:
          typeof r.threads_array_buffers_mb === 'number' ? r.threads_array_buffers_mb : null,
        threadsV8MallocedMb:
          typeof r.threads_v8_malloced_mb === 'number' ? r.threads_v8_malloced_mb : null,
      });
    } catch {
      // Not a whole pino line.
    }
  }
  return out;
}

/**
 * For a process read at rest twice, where its glibc heap went between the two collections:
 * "malloc allocated a -> b MB, held a -> b MB", then each arena whose allocated bytes moved by 1 MB
 * or more (by position, when both readings have as many arenas). Allocated memory that grows is
 * kept by the process; memory held that grows while allocated memory does not is fragmentation
 * that malloc_trim cannot give back. Null without both records.
 */
export function mallocGrowth(
  pid: number,
  first: IdleCheckpoint,
  last: IdleCheckpoint,
  records: readonly CollectRecord[],
): string | null {
  const a = recordAt(pid, first, records);
  const b = recordAt(pid, last, records);
  if (a === undefined || b === undefined) return null;
  const f = (n: number): string => n.toFixed(1);
  let line =
    `malloc allocated ${f(a.mallocMb[0])} -> ${f(b.mallocMb[0])} MB, ` +
    `held ${f(a.mallocMb[1])} -> ${f(b.mallocMb[1])} MB, ${b.arenasMb.length} arenas`;
  if (a.arenasMb.length === b.arenasMb.length) {
    const moved = b.arenasMb
      .map(([allocated, held], i) => ({ i, allocated, held, before: a.arenasMb[i]! }))
      .filter(({ allocated, before }) => Math.abs(allocated - before[0]) >= 1)
      .map(
        ({ i, allocated, held, before }) =>
          `arena ${i} allocated ${f(before[0])} -> ${f(allocated)}, held ${f(before[1])} -> ${f(held)}`,
      );
    if (moved.length > 0) line += `; ${moved.join('; ')}`;
  }
  return line;
}

/** The "memory collected" record a process logged in a checkpoint's collection span. */
function recordAt(
  pid: number,
  c: IdleCheckpoint,
  records: readonly CollectRecord[],
): CollectRecord | undefined {
  return records.find(
    (r) => r.pid === pid && r.timeMs >= c.collectSpan[0] && r.timeMs <= c.collectSpan[1] + 1_000,
  );
}

/**
 * For a process read at rest more than twice, glibc's allocated memory at every reading from
 * `first` to `last`, seconds into the run: "malloc allocated 44.7, 45.9, 46.5 MB at 679, 2481,
 * 3721 s", then what of it was the main isolate's array buffers and V8's own malloc, and the other
 * threads', where logged, and the process's open sockets at each reading. Two readings cannot tell
 * a cache that filled from a leak; a third in between can. Null with fewer than three readings.
 */
export function mallocAtRest(
  pid: number,
  checkpoints: readonly IdleCheckpoint[],
  first: IdleCheckpoint,
  last: IdleCheckpoint,
  records: readonly CollectRecord[],
  startMs: number,
): string | null {
  const from = checkpoints.indexOf(first);
  const to = checkpoints.indexOf(last);
  if (from < 0 || to < from) return null;
  const read = checkpoints
    .slice(from, to + 1)
    .map((c) => ({ c, r: recordAt(pid, c, records) }))
    .filter((x): x is { c: IdleCheckpoint; r: CollectRecord } => x.r !== undefined);
  if (read.length < 3) return null;
  const list = (xs: readonly number[]): string => xs.map((x) => x.toFixed(1)).join(', ');
  let line =
    `malloc allocated ${list(read.map((x) => x.r.mallocMb[0]))} MB at ` +
    `${read.map((x) => ((x.c.atMs - startMs) / 1000).toFixed(0)).join(', ')} s`;
  const parts = (pick: (r: CollectRecord) => number | null): number[] | null => {
    const xs = read.map((x) => pick(x.r));
    return xs.every((x): x is number => x !== null) ? xs : null;
  };
  const buffers = parts((r) => r.mainArrayBuffersMb);
  const v8 = parts((r) => r.mainV8MallocedMb);
  if (buffers !== null && v8 !== null) {
    line += `; of it the main isolate's array buffers ${list(buffers)}, V8's own ${list(v8)}`;
  }
  const threadBuffers = parts((r) => r.threadsArrayBuffersMb);
  const threadV8 = parts((r) => r.threadsV8MallocedMb);
  if (threadBuffers !== null && threadV8 !== null) {
    line += `; the other threads' array buffers ${list(threadBuffers)}, V8's own ${list(threadV8)}`;
  }
  // What an API server holds per connection follows its connections (processes.ts openSockets).
  const sockets = read.map((x) => socketsOf(pid, x.c));
  if (sockets.every((n): n is number => n !== undefined)) {
    line += `; open sockets ${sockets.join(', ')}`;
  }
  return line;
}

function socketsOf(pid: number, c: IdleCheckpoint): number | undefined {
  for (const [key, n] of c.sockets) if (pidOf(key) === pid) return n;
  return undefined;
}
