// The main thread's packer pool: a thin typed class over piscina (the pool keeps its threads, its
// queue and its load balancing) that runs workers/packer.js and hands back Buffers. A packer writes
// an answer into the response pool (response-pool.ts) and the main thread gets a view of it, or,
// when the pool has no room, the packer moves (not copies) a Buffer of its own; a task that takes
// longer than its bound is abandoned with RS_ERR_OUTPUT_PACK_TIMEOUT.

import { Piscina } from 'piscina';
import { errorFromData, RingserveError } from '../../errors.js';
import { SAME_PRIORITY, type ThreadPriority } from '../../shm/thread-priority.js';
import type { SharedTokenBytes } from '../../tokenizer/token-bytes.js';
import { RS_ERR_OUTPUT_PACK_TIMEOUT } from '../cross-thread/errors.js';
import type { PackAnswer, PackerWorkerData, PackTask } from '../cross-thread/pack-task.js';
import { ResponsePool, type ResponsePoolStats } from '../cross-thread/response-pool.js';
import { distPath } from './output-worker-handle.js';
import { pooledAnswer } from './sent-answers.js';

/**
 * Every POOL_TRIM_EVERY_MS the response pool gives back the chunks no answer used for the last
 * POOL_IDLE_TICKS ticks (10-12 s): a burst's peak goes back soon after it, a steady load keeps
 * its working set warm, and a lull shorter than that (an engine restart, the gap between two
 * rollout batches) keeps it too, rather than giving pages back only to fault them in again.
 */
const POOL_TRIM_EVERY_MS = 2_000;
const POOL_IDLE_TICKS = 5;

export interface PackerPoolOptions {
  metaSab: SharedArrayBuffer;
  accSab: SharedArrayBuffer;
  arenaSab: SharedArrayBuffer;
  /** Packer threads (default 1: the machine's other core is the output worker's). */
  threads?: number;
  /** Longest a task may take, queueing included (default 30 s). */
  taskTimeoutMs?: number;
  /** Size of the response pool (default 0: none). */
  responsePoolBytes?: number;
  /** How far the packer threads lower themselves below the main thread (default: not at all). */
  priority?: ThreadPriority;
  /**
   * The token bytes of the OpenAI answers' logprobs: the served tokenizer's table, shared; without
   * one, the byte-level stand-in with these special ids (default none).
   */
  tokenBytes?: SharedTokenBytes;
  specialTokenIds?: readonly number[];
}

export class PackerPool {
  readonly #pool: Piscina<PackTask, PackAnswer>;
  readonly #timeoutMs: number;
  readonly #answers: ResponsePool | null;
  readonly #trimTimer: NodeJS.Timeout | null;

  constructor(opts: PackerPoolOptions) {
    const threads = opts.threads ?? 1;
    this.#timeoutMs = opts.taskTimeoutMs ?? 30_000;
    const poolBytes = opts.responsePoolBytes ?? 0;
    this.#answers = poolBytes > 0 ? ResponsePool.create(poolBytes) : null;
    const workerData: PackerWorkerData = {
      metaSab: opts.metaSab,
      accSab: opts.accSab,
      arenaSab: opts.arenaSab,
      poolSab: this.#answers?.sab ?? null,
      priority: opts.priority ?? SAME_PRIORITY,
      specialTokenIds: [...(opts.specialTokenIds ?? [])],
      ...(opts.tokenBytes === undefined ? {} : { tokenBytes: opts.tokenBytes }),
    };
    this.#pool = new Piscina({
      filename: distPath('workers/packer.js'),
      minThreads: threads,
      maxThreads: threads,
      idleTimeout: Number.POSITIVE_INFINITY,
      // Piscina's default ('sync') parks an idle thread in Atomics.wait, where its event loop never
      // turns: its timers (giving its writers' pages back after 10 s idle, publishing its health,
      // answering a request to collect) would wait for the next task. A task is a whole request,
      // so a message event per task costs nothing that shows.
      atomics: 'disabled',
      workerData,
      name: 'default',
    });
    this.#trimTimer =
      this.#answers === null
        ? null
        : setInterval(() => this.#answers!.trim(POOL_IDLE_TICKS), POOL_TRIM_EVERY_MS);
    this.#trimTimer?.unref();
  }

  /**
   * Encodes a finished request: a view of the response pool (send it, then releaseWhenSent), or a
   * Buffer whose memory was transferred from the packer thread.
   */
  async pack(task: PackTask): Promise<Buffer> {
    const signal = AbortSignal.timeout(this.#timeoutMs);
    try {
      const out = await this.#pool.run(task, { signal });
      if (out instanceof Uint8Array) return Buffer.from(out.buffer, out.byteOffset, out.byteLength);
      if ('error' in out) throw errorFromData(out.error);
      return pooledAnswer(this.#answers!, out);
    } catch (err) {
      if (signal.aborted && !(err instanceof RingserveError))
        throw new RS_ERR_OUTPUT_PACK_TIMEOUT(task.requestId, this.#timeoutMs);
      throw err;
    }
  }

  /** Tasks waiting for a thread. */
  get queueSize(): number {
    return this.#pool.queueSize;
  }

  /** How answers were placed (null without a response pool). */
  poolStats(): ResponsePoolStats | null {
    return this.#answers?.stats() ?? null;
  }

  /** Finishes queued tasks, then stops the threads. */
  async close(): Promise<void> {
    if (this.#trimTimer !== null) clearInterval(this.#trimTimer);
    await this.#pool.close();
  }
}
