// The main thread's packer pool: a thin typed class over piscina (the pool keeps its threads, its
// queue and its load balancing) that runs workers/packer.js and hands back Buffers. The encoded
// bytes are moved, not copied, from the packer thread; a task that takes longer than its bound is
// abandoned with RS_ERR_OUTPUT_PACK_TIMEOUT.
import { Piscina } from 'piscina';
import { RingserveError } from '../../errors.js';
import type { ResponseForm } from '../../protocol/generate-response.js';
import { SAME_PRIORITY, type ThreadPriority } from '../../shm/thread-priority.js';
import { RS_ERR_OUTPUT_PACK_TIMEOUT } from './errors.js';
import { distPath } from './output-worker-handle.js';

/** One finished request to encode. */
export interface PackTask {
  /** The request's slots, choice i from slots[i] (n = 1: one slot). */
  slots: readonly number[];
  /** The slots' generations when the response finished; a packer refuses a slot that moved on. */
  generations?: readonly number[];
  form: ResponseForm;
  /** The id without the `generate-tokens-` prefix. */
  requestId: string;
  model: string;
  /** Unix seconds. */
  created: number;
  kvTransferParams?: unknown;
}

/** What a packer returns instead of bytes when a request cannot be packed. */
export interface PackFailure {
  code: string;
  message: string;
  statusCode: number;
}

export interface PackerWorkerData {
  metaSab: SharedArrayBuffer;
  accSab: SharedArrayBuffer;
  arenaSab: SharedArrayBuffer;
  priority: ThreadPriority;
}

export interface PackerPoolOptions {
  metaSab: SharedArrayBuffer;
  accSab: SharedArrayBuffer;
  arenaSab: SharedArrayBuffer;
  /** Packer threads (default 1: the machine's other core is the output worker's). */
  threads?: number;
  /** Longest a task may take, queueing included (default 30 s). */
  taskTimeoutMs?: number;
  /** How far the packer threads lower themselves below the main thread (default: not at all). */
  priority?: ThreadPriority;
}

export class PackerPool {
  readonly #pool: Piscina<PackTask, Uint8Array | PackFailure>;
  readonly #timeoutMs: number;

  constructor(opts: PackerPoolOptions) {
    const threads = opts.threads ?? 1;
    this.#timeoutMs = opts.taskTimeoutMs ?? 30_000;
    const workerData: PackerWorkerData = {
      metaSab: opts.metaSab,
      accSab: opts.accSab,
      arenaSab: opts.arenaSab,
      priority: opts.priority ?? SAME_PRIORITY,
    };
    this.#pool = new Piscina({
      filename: distPath('workers/packer.js'),
      minThreads: threads,
      maxThreads: threads,
      idleTimeout: Number.POSITIVE_INFINITY,
      workerData,
      name: 'default',
    });
  }

  /** Encodes a finished request; the Buffer's memory was transferred from the packer thread. */
  async pack(task: PackTask): Promise<Buffer> {
    const signal = AbortSignal.timeout(this.#timeoutMs);
    try {
      const out = await this.#pool.run(task, { signal });
      if (!(out instanceof Uint8Array)) {
        throw new RingserveError(out.code, out.message, out.statusCode, null);
      }
      return Buffer.from(out.buffer, out.byteOffset, out.byteLength);
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

  /** Finishes queued tasks, then stops the threads. */
  async close(): Promise<void> {
    await this.#pool.close();
  }
}
