// The main thread's side of the output worker: starts the thread, passes it the shared tables,
// sends it control messages, and hands each pass's batch to one callback. Every wait is bounded:
// start and stop end in RS_ERR_OUTPUT_WORKER_TIMEOUT, a worker that throws or exits ends in
// RS_ERR_OUTPUT_WORKER_FAILED (reported once to onFailure).
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';
import { errorFromData, type RingserveError } from '../../errors.js';
import { Doorbell } from '../../shm/doorbell.js';
import { RING_DOORBELL } from '../../shm/layout.js';
import type { ThreadPriority } from '../../shm/thread-priority.js';
import type { AccumulatorTable } from '../cross-thread/accumulators.js';
import type { TokenBytesData } from '../cross-thread/detokenizer.js';
import {
  RS_ERR_OUTPUT_WORKER_FAILED,
  RS_ERR_OUTPUT_WORKER_TIMEOUT,
} from '../cross-thread/errors.js';
import type {
  FromOutputWorker,
  OutputBatch,
  OutputWorkerData,
  StreamMessage,
  ToOutputWorker,
} from '../cross-thread/messages.js';
import type { SlotMetaTable } from '../cross-thread/slot-meta.js';

/**
 * The worker's tables, callbacks and token bytes (TokenBytesData): the served tokenizer's table,
 * handed over without a copy, else the byte-level stand-in with the special ids.
 */
export interface OutputWorkerOptions extends TokenBytesData {
  ringSab: SharedArrayBuffer;
  ringOffset: number;
  ringCapacity: number;
  meta: SlotMetaTable;
  acc: AccumulatorTable;
  arenaSab: SharedArrayBuffer;
  serverIndex: number;
  /**
   * Not read: the token bytes are `tokenBytes`, else the stand-in, whatever the preset. Accepted
   * so that callers which still name it (bench/arena-rss.ts) compile.
   */
  preset?: string;
  onBatch: (batch: OutputBatch) => void;
  /** A worker error: `fatal` ones mean the worker is gone and in-flight requests must fail. */
  onFailure: (error: RingserveError, fatal: boolean) => void;
  /** Longest futex sleep of the worker on an empty ring (default 50 ms). */
  waitMs?: number;
  startTimeoutMs?: number;
  arenaGrowStepBytes?: number;
  /** How far the worker thread lowers its scheduling priority (default: not at all). */
  priority?: ThreadPriority;
}

/** dist/<rel>, found from this module whether it runs from src/ (vitest) or dist/src/. */
export function distPath(rel: string): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json'))) return join(dir, 'dist', rel);
    const parent = dirname(dir);
    if (parent === dir) throw new RS_ERR_OUTPUT_WORKER_FAILED(`no package root above ${rel}`);
    dir = parent;
  }
}

export class OutputWorker {
  readonly #worker: Worker;
  readonly #port: MessagePort;
  readonly #meta: SlotMetaTable;
  readonly #doorbell: Doorbell;
  readonly #onFailure: OutputWorkerOptions['onFailure'];
  #exited = false;
  #stopping = false;
  #failed = false;

  private constructor(worker: Worker, port: MessagePort, opts: OutputWorkerOptions) {
    this.#worker = worker;
    this.#port = port;
    this.#meta = opts.meta;
    this.#doorbell = new Doorbell(opts.ringSab, opts.ringOffset + RING_DOORBELL);
    this.#onFailure = opts.onFailure;
  }

  /** Starts the thread; resolves once it is draining the ring. */
  static start(opts: OutputWorkerOptions): Promise<OutputWorker> {
    const channel = new MessageChannel();
    const data: OutputWorkerData = {
      ringSab: opts.ringSab,
      ringOffset: opts.ringOffset,
      ringCapacity: opts.ringCapacity,
      metaSab: opts.meta.sab,
      accSab: opts.acc.sab,
      arenaSab: opts.arenaSab,
      port: channel.port2,
      serverIndex: opts.serverIndex,
      specialTokenIds: [...opts.specialTokenIds],
      waitMs: opts.waitMs ?? 50,
      ...(opts.tokenBytes === undefined ? {} : { tokenBytes: opts.tokenBytes }),
      ...(opts.arenaGrowStepBytes === undefined
        ? {}
        : { arenaGrowStepBytes: opts.arenaGrowStepBytes }),
      ...(opts.priority === undefined ? {} : { priority: opts.priority }),
    };
    const worker = new Worker(distPath('workers/output-worker.js'), {
      workerData: data,
      transferList: [channel.port2],
      name: `ringserve-output-${opts.serverIndex}`,
    });
    const handle = new OutputWorker(worker, channel.port1, opts);
    return handle.#awaitReady(opts, opts.startTimeoutMs ?? 10_000);
  }

  #awaitReady(opts: OutputWorkerOptions, timeoutMs: number): Promise<OutputWorker> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        void this.#worker.terminate();
        reject(new RS_ERR_OUTPUT_WORKER_TIMEOUT('start', timeoutMs));
      }, timeoutMs);
      this.#port.on('message', (msg: FromOutputWorker) => {
        if (msg.type === 'ready') {
          clearTimeout(timer);
          resolve(this);
        } else if (msg.type === 'batch') opts.onBatch(msg);
        else if (msg.type === 'error') {
          const cause = errorFromData(msg.error);
          const error = new RS_ERR_OUTPUT_WORKER_FAILED(`${cause.code}: ${cause.message}`);
          error.cause = cause;
          this.#fail(error, msg.fatal);
        }
      });
      this.#worker.on('error', (err) => {
        clearTimeout(timer);
        reject(new RS_ERR_OUTPUT_WORKER_FAILED(err.message));
        this.#fail(new RS_ERR_OUTPUT_WORKER_FAILED(err.message), true);
      });
      this.#worker.on('exit', (code) => {
        this.#exited = true;
        clearTimeout(timer);
        this.#port.close();
        const error = new RS_ERR_OUTPUT_WORKER_FAILED(`the thread exited with code ${code}`);
        reject(error);
        if (!this.#stopping) this.#fail(error, true);
      });
    });
  }

  #fail(error: RingserveError, fatal: boolean): void {
    if (fatal) {
      if (this.#failed) return;
      this.#failed = true;
    }
    this.#onFailure(error, fatal);
  }

  /** Tells the worker about a streaming request; call before committing its ADD record. */
  stream(
    slot: number,
    generation: number,
    requestId: string,
    model: string,
    created: number,
    openai?: Pick<StreamMessage, 'echo' | 'promptTokenIds' | 'chatParse'>,
  ): void {
    this.#send({ type: 'stream', slot, generation, requestId, model, created, ...openai });
  }

  /** The slot's response is sent (or abandoned): return its blocks. Generation defaults to the meta's. */
  free(slot: number, generation = this.#meta.generation(slot)): void {
    this.#send({ type: 'free', slot, generation });
  }

  /** The engine died: drop every request started so far (the main thread fails them). */
  engineDown(): void {
    const generations = new Int32Array(this.#meta.slots);
    for (let s = 0; s < generations.length; s++) generations[s] = this.#meta.generation(s);
    this.#send({ type: 'engine-down', generations }, [generations.buffer]);
    this.#doorbell.wake();
  }

  /** Stops the worker; terminates it if it has not stopped within `timeoutMs` (then rejects). */
  async stop(timeoutMs = 5_000): Promise<void> {
    if (this.#exited) return;
    const exited = new Promise<void>((resolve) => this.#worker.once('exit', () => resolve()));
    this.#stopping = true;
    this.#send({ type: 'stop' });
    this.#doorbell.wake();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), timeoutMs);
    });
    const late = await Promise.race([exited.then(() => false), timedOut]);
    clearTimeout(timer);
    if (late) {
      await this.#worker.terminate();
      throw new RS_ERR_OUTPUT_WORKER_TIMEOUT('stop', timeoutMs);
    }
  }

  #send(msg: ToOutputWorker, transfer: ArrayBuffer[] = []): void {
    if (!this.#exited) this.#port.postMessage(msg, transfer);
  }
}
