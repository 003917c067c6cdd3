/**
 * The router's merge threads (issue 32): a thin typed class over piscina that runs
 * workers/router-merge.js, as the server's PackerPool does for its packers. Every decode of an
 * upstream answer, every merge, every encode and every re-written stream event runs there; the main
 * thread moves bytes between sockets and threads and holds no per-token object.
 *
 * A request's merge state (its decoded prefill answer, its stream merger) lives in one thread from
 * its prefill answer to its last event, so a request is pinned to a lane: a piscina pool of one
 * thread (min = max = 1), whose queue runs its tasks in order, one at a time, so a stream's events
 * come back in the order they went. A request takes the lane with the fewest requests open.
 *
 * A thread that dies fails what it held, and only that: piscina rejects its task in flight, and the
 * lane's replacement thread answers RS_ERR_ROUTER_MERGE_WORKER to any later task of a request it
 * does not hold; each is a coded 500 for its own request. Requests of other lanes go on.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Worker } from 'node:worker_threads';
import { Piscina } from 'piscina';
import { errorFromData, RingserveError } from '../errors.js';
import { SAME_PRIORITY, type ThreadPriority } from '../shm/thread-priority.js';
import { RS_ERR_ROUTER_MERGE_WORKER } from './errors.js';
import type { MergeFailure, MergeOp, MergeReply, MergeSpec, MergeTask } from './merge-messages.js';

/** Default merge threads: one, the other core being the main thread's (a 2-core router host). */
export const DEFAULT_MERGE_THREADS = 1;
export const MAX_MERGE_THREADS = 64;
/**
 * Default nice of the merge threads above the main thread: the server's --worker-nice default, so
 * on a machine whose cores are all busy the event loop (/health, the sockets) wins the CPU.
 */
export const DEFAULT_MERGE_NICE = 10;

export interface MergePoolOptions {
  /** Merge threads (lanes), 1..MAX_MERGE_THREADS (default DEFAULT_MERGE_THREADS). */
  threads?: number;
  /** How far the merge threads lower themselves below the main thread (default nice 10). */
  priority?: ThreadPriority;
}

export interface MergeWorkerData {
  priority: ThreadPriority;
}

type Lane = Piscina<MergeTask, MergeReply | MergeFailure>;

export class MergePool {
  readonly #lanes: Lane[];
  /** Requests open per lane. */
  readonly #open: Int32Array;
  #nextId = 1;

  constructor(opts: MergePoolOptions = {}) {
    const threads = opts.threads ?? DEFAULT_MERGE_THREADS;
    if (!Number.isInteger(threads) || threads < 1 || threads > MAX_MERGE_THREADS)
      throw new RangeError(`merge threads must be an integer in [1, ${MAX_MERGE_THREADS}]`);
    const workerData: MergeWorkerData = {
      priority: opts.priority ?? { ...SAME_PRIORITY, nice: DEFAULT_MERGE_NICE },
    };
    this.#open = new Int32Array(threads);
    this.#lanes = Array.from(
      { length: threads },
      () =>
        new Piscina({
          filename: distPath('workers/router-merge.js'),
          minThreads: 1,
          maxThreads: 1,
          idleTimeout: Number.POSITIVE_INFINITY,
          // A parked thread (Atomics.wait) would save a message per task, but a lane's tasks come
          // one event at a time from many sockets: the message is what wakes it.
          atomics: 'disabled',
          workerData,
          name: 'default',
        }),
    );
  }

  /** A new request on the lane with the fewest open; close() the job when the request is over. */
  open(): MergeJob {
    let lane = 0;
    for (let k = 1; k < this.#open.length; k++)
      if ((this.#open[k] as number) < (this.#open[lane] as number)) lane = k;
    (this.#open[lane] as number)++;
    return new MergeJob(this, lane, this.#nextId++);
  }

  /** Runs one task on `lane`; a failure is thrown as the request's coded error. */
  async run(lane: number, task: MergeTask): Promise<MergeReply> {
    let out: MergeReply | MergeFailure;
    try {
      const transferList = task.bytes === null ? [] : [task.bytes.buffer as ArrayBuffer];
      out = await (this.#lanes[lane] as Lane).run(task, { transferList });
    } catch (error) {
      // The thread exited with the task in it (or the pool is closing): piscina's plain Error.
      if (error instanceof RingserveError) throw error;
      throw new RS_ERR_ROUTER_MERGE_WORKER((error as Error).message);
    }
    if ('error' in out) throw errorFromData(out.error);
    return out;
  }

  /** @internal MergeJob's */
  release(lane: number): void {
    (this.#open[lane] as number)--;
  }

  /** Each lane's thread (tests: end one to see its requests fail, and only those). */
  get threads(): readonly Worker[] {
    return this.#lanes.flatMap((lane) => lane.threads);
  }

  /** Requests open, all lanes. */
  get openRequests(): number {
    return this.#open.reduce((a, b) => a + b, 0);
  }

  async close(): Promise<void> {
    await Promise.all(this.#lanes.map((lane) => lane.close()));
  }
}

/** Bytes of a merge thread as a Buffer over the same memory (it was moved, not copied). */
const asBuffer = (out: Uint8Array): Buffer =>
  Buffer.from(out.buffer, out.byteOffset, out.byteLength);

/**
 * One request's merge, pinned to its lane. The upstream bytes given are moved to the thread: the
 * caller must not touch them after.
 */
export class MergeJob {
  readonly #pool: MergePool;
  readonly #lane: number;
  readonly #id: number;
  /** The thread holds this request's state (from a prefill answer decoded to the end). */
  #held = false;
  #closed = false;

  constructor(pool: MergePool, lane: number, id: number) {
    this.#pool = pool;
    this.#lane = lane;
    this.#id = id;
  }

  /** Decodes the prefill answer there and keeps it; the handle for the decode request. */
  async prefill(bytes: Uint8Array, contentType: string, upstream: string, spec: MergeSpec) {
    const reply = await this.#run('prefill', bytes, contentType, upstream, spec);
    this.#held = true;
    return reply.handle;
  }

  /** The decode answer merged with the prefill's, in the client's form. */
  async merge(bytes: Uint8Array, contentType: string, upstream: string) {
    this.#held = false;
    const reply = await this.#run('merge', bytes, contentType, upstream, null);
    return { body: asBuffer(reply.out as Uint8Array), kv: reply.kv };
  }

  /** Decode stream bytes in; the client's SSE bytes (null: no event completed) and whether done. */
  async chunk(bytes: Uint8Array): Promise<{ out: Buffer | null; done: boolean }> {
    const reply = await this.#run('chunk', bytes, '', '', null);
    if (reply.done) this.#held = false;
    return { out: reply.out === null ? null : asBuffer(reply.out), done: reply.done };
  }

  /** The decode stream ended before [DONE]: an error event naming `upstream`, and [DONE]. */
  async end(upstream: string): Promise<Buffer | null> {
    this.#held = false;
    const reply = await this.#run('end', null, '', upstream, null);
    return reply.out === null ? null : asBuffer(reply.out);
  }

  /** The request is over: its lane counts it no more, and a thread still holding it forgets it. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#pool.release(this.#lane);
    if (!this.#held) return;
    this.#held = false;
    // Nothing waits for it: a thread that died took the state with it anyway.
    this.#run('drop', null, '', '', null).catch(() => {});
  }

  async #run(
    op: MergeOp,
    bytes: Uint8Array | null,
    contentType: string,
    upstream: string,
    spec: MergeSpec | null,
  ): Promise<MergeReply> {
    try {
      return await this.#pool.run(this.#lane, {
        op,
        id: this.#id,
        bytes,
        contentType,
        upstream,
        spec,
      });
    } catch (error) {
      // A thread forgets a request whose task failed (and a dead one forgot everything).
      this.#held = false;
      throw error;
    }
  }
}

/** `dist/<rel>` under the package root (where package.json is), from src/ (vitest) or dist/src/. */
function distPath(rel: string): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new RS_ERR_ROUTER_MERGE_WORKER(`no package root above ${rel}`);
    dir = parent;
  }
  return join(dir, 'dist', rel);
}
