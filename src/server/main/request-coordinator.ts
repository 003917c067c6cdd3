/**
 * Per-request life on the main thread: accept (admission, slots, the output side, ADD records),
 * answer (a finished Buffer, or SSE bytes, or an error), abort (client gone, abort_requests, a stop
 * string, a failed choice, drain) and release (the engine confirmed). vLLM v1 keeps this in
 * output_processor.py; here it holds one RequestRecord per request and never touches a token.
 *
 * A slot is reused only when both have happened: the client's answer is settled and the engine
 * confirmed the sequence is over (slot-table.ts). Only then does the output side reuse its state.
 */
import type { RingserveConfig } from '../../config.js';
import {
  RS_ERR_ENGINE_DEAD,
  RS_ERR_REQ_DEADLINE_EXCEEDED,
  RS_ERR_SERVER_DRAINING,
  toRingserveError,
} from '../../errors.js';
import { type Logger, rateLimit } from '../../obs/log.js';
import type { RequestTimeline } from '../../obs/request-timeline.js';
import type { GenerateRequest } from '../../protocol/generate-request.js';
import type { ResponseForm } from '../../protocol/generate-response.js';
import { childSeed } from '../../wire/child-seed.js';
import { admit, requestIdOf } from './admission.js';
import type { EnginePort } from './engine-port.js';
import { type KvTransferFields, kvTransferFields } from './kv-transfer.js';
import type { OutputEvents, OutputPath } from './output-path.js';
import type { ReplySink } from './reply-sink.js';
import { logFinished } from './request-log.js';
import { newRequestRecord, type RequestRecord } from './request-record.js';
import { RequestTable } from './request-table.js';

export interface CompletedRequest {
  requestId: string;
  /** The slot of its first choice. */
  slot: number;
  latencyMs: number;
  ok: boolean;
}

/** How long a request may take from its acceptance, and which limit set it (for the message). */
export interface RequestDeadline {
  ms: number;
  source: '--request-timeout' | 'x-request-deadline-ms';
}

export interface CoordinatorOptions {
  /** Request arrivals for the output worker's metrics, and what it recorded for the log line. */
  timeline?: RequestTimeline;
  /** One info line per finished request, warnings for a full request ring. */
  log?: Logger;
  onDone?: (done: CompletedRequest) => void;
}

export class RequestCoordinator implements OutputEvents {
  readonly table: RequestTable;
  readonly #engine: EnginePort;
  readonly #config: RingserveConfig;
  #output: OutputPath | null = null;
  #draining = false;
  readonly #onDone: (done: CompletedRequest) => void;
  readonly #timeline: RequestTimeline | null;
  readonly #log: Logger | null;
  readonly #ringFullWarning = rateLimit(10_000);

  constructor(config: RingserveConfig, engine: EnginePort, options: CoordinatorOptions = {}) {
    this.#config = config;
    this.#engine = engine;
    this.table = new RequestTable(config.maxQueueLen, engine);
    this.#onDone = options.onDone ?? (() => {});
    this.#timeline = options.timeline ?? null;
    this.#log = options.log ?? null;
  }

  attach(output: OutputPath): void {
    this.#output = output;
  }

  get draining(): boolean {
    return this.#draining;
  }

  /**
   * Accepts a parsed request (every 400 is raised by parsing), or throws why not (admission.ts, or
   * the engine's ADD error). The answer goes to `reply` later, in `form`; one not complete within
   * `deadline` (null: none) is answered 504 and aborted in the engine. `dataParallelRank` (the
   * `X-data-parallel-rank` header, already checked against --data-parallel-size; null: none) goes
   * into the ADD of every choice of every prompt.
   */
  submit(
    request: GenerateRequest,
    reply: ReplySink,
    form: ResponseForm,
    headerId?: string,
    deadline: RequestDeadline | null = null,
    dataParallelRank: number | null = null,
  ): void {
    const requestId = requestIdOf(headerId, request.requestId);
    const kv = kvTransferFields(request, requestId, this.#config);
    admit(
      { draining: this.#draining, engine: this.#engine, table: this.table },
      requestId,
      request.n,
    );
    const model = request.model ?? this.#config.servedModelName;
    const record = newRequestRecord(requestId, model, request, form, reply);
    this.table.add(record);
    try {
      this.#send(record, kv, dataParallelRank);
    } catch (error) {
      this.#unwind(record, error);
      throw error;
    }
    if (record.stream) reply.startStream();
    // A client that leaves before its answer aborts the request in the engine.
    reply.onClose(() => this.#clientGone(record));
    if (deadline !== null) {
      record.deadline = setTimeout(() => this.#deadlinePassed(record, deadline), deadline.ms);
    }
  }

  /** Aborts the in-flight request with this id, if this server has it; true if it did. */
  abortById(requestId: string): boolean {
    const record = this.table.byId(requestId);
    if (record === undefined) return false;
    this.#abortChoices(record, -1);
    return true;
  }

  // ---- OutputEvents ------------------------------------------------------------------------------

  record(slot: number, gen: number): RequestRecord | undefined {
    return this.table.slots.current(slot, gen);
  }

  finished(slot: number, gen: number, failure: Error | null): void {
    const record = this.record(slot, gen);
    if (record === undefined || record.settled) return;
    const index = record.group.indexOf(slot, gen);
    if (failure !== null) {
      if (!record.group.fail(index)) return;
      this.#fail(record, failure);
      // The request is answered: its other sequences need not run on.
      this.#abortChoices(record, index);
      this.#free(record);
    } else if (record.group.succeeded(index)) {
      if (!record.stream) this.#encode(record);
      else if (record.group.size > 1) this.#endStream(record);
    }
  }

  stream(slot: number, gen: number, bytes: Buffer, last: boolean): void {
    const record = this.record(slot, gen);
    if (record === undefined || record.settled) return;
    // With several choices, one choice's last event does not end the stream: #endStream does.
    if (!last || record.group.size > 1) {
      record.reply.write(bytes, false);
      return;
    }
    this.#settle(record, 200, null);
    record.reply.write(bytes, true);
    this.#done(record, true);
    this.#free(record);
  }

  stopped(slot: number, gen: number): void {
    this.table.slots.abort(slot, gen);
  }

  released(slot: number, gen: number): void {
    const record = this.record(slot, gen);
    this.table.slots.ended(slot, gen);
    if (record !== undefined) this.#free(record);
    // The engine is draining its request ring: room, perhaps, for ABORTs that found none.
    this.table.slots.retryAborts();
  }

  // ---- engine death and drain --------------------------------------------------------------------

  /** The engine died: every request in flight fails with a 503 and its slots are free again. */
  engineDown(): void {
    this.#engine.setUp(false);
    const error = new RS_ERR_ENGINE_DEAD('the engine core died; retry once /health answers 200');
    const records = this.table.slots.records();
    this.table.slots.endAll();
    for (const record of records) this.#fail(record, error);
    for (const record of records) this.#free(record);
    this.#output?.engineDown();
  }

  engineUp(): void {
    this.#engine.setUp(true);
  }

  /**
   * Stops accepting; resolves once nothing is in flight, or `timeoutMs` passed, or `stuck()` says the
   * requests in flight cannot finish (a paused engine), and then aborts the rest.
   */
  async drain(timeoutMs: number, stuck: () => boolean = () => false): Promise<void> {
    this.#draining = true;
    const deadline = performance.now() + timeoutMs;
    while (this.table.active > 0 && performance.now() < deadline && !stuck()) await sleep(20);
    for (const record of this.table.slots.records()) {
      if (record.settled) continue;
      this.#fail(record, new RS_ERR_SERVER_DRAINING());
      this.#abortChoices(record, -1);
      this.#free(record);
    }
  }

  // ---- internals ---------------------------------------------------------------------------------

  /** Opens each choice on the output side and writes its ADD (vLLM v1's parallel sampling: choice i seeded seed + i). */
  #send(record: RequestRecord, kv: KvTransferFields, dataParallelRank: number | null): void {
    const { request, group } = record;
    const output = this.#output!;
    const cacheSalt = request.cacheSalt === null ? null : Buffer.from(request.cacheSalt, 'utf8');
    for (let i = 0; i < group.size; i++) {
      const slot = group.slots[i]!;
      const gen = group.gens[i]!;
      this.#timeline?.arrive(slot);
      output.open(record, i);
      const seed = i === 0 ? request.params.seed : childSeed(request.params.seed, i);
      const openai = request.openai;
      const script = openai?.scripts?.[i] ?? null;
      this.#engine.add({
        slot,
        slotGen: gen,
        // An OpenAI completion may send several prompts: choice i runs prompt floor(i / n).
        promptTokenIds:
          openai === undefined ? request.promptTokenIds : openai.prompts[Math.floor(i / openai.n)]!,
        // Prompt logprobs are the request's, not a choice's: choice 0 alone computes them.
        params: i === 0 ? request.params : { ...request.params, seed, promptLogprobs: -1 },
        priority: request.priority,
        cacheSalt,
        arrivalTimeMs: record.timings.arrivalMs,
        pinKv: kv.pinKv,
        importKvTokens: kv.importKvTokens,
        kvParams: kv.kvParams,
        loraId: request.loraId ?? 0,
        script: script?.tokens ?? null,
        scriptEnds: script?.ends ?? false,
        dataParallelRank,
      });
      this.table.slots.sent(slot, gen);
    }
  }

  /**
   * An ADD failed (the route answers with its error): choices the engine has are aborted and their
   * slots come back when it confirms; the others never reached it, so their slots are free at once.
   */
  #unwind(record: RequestRecord, error: unknown): void {
    this.table.settle(record);
    this.#abortChoices(record, -1);
    this.#free(record);
    if ((error as { code?: unknown }).code === 'RS_ERR_RING_FULL' && this.#ringFullWarning()) {
      this.#log?.warn((error as Error).message);
    }
  }

  /** The deadline passed unanswered: a 504 (or a stream's error event), and the engine stops it. */
  #deadlinePassed(record: RequestRecord, deadline: RequestDeadline): void {
    record.deadline = null;
    const { requestId } = record.identity;
    this.#fail(record, new RS_ERR_REQ_DEADLINE_EXCEEDED(requestId, deadline.ms, deadline.source));
    this.#abortChoices(record, -1);
    this.#free(record);
  }

  #clientGone(record: RequestRecord): void {
    if (!this.#settle(record, 499, 'abort')) return;
    this.#abortChoices(record, -1);
    this.#free(record);
  }

  /** Every choice finished well: the output side encodes the answer (a packer, for the worker path). */
  #encode(record: RequestRecord): void {
    let body: Buffer | Promise<Buffer>;
    try {
      body = this.#output!.encode(record);
    } catch (error) {
      this.#encodeFailed(record, error);
      return;
    }
    if (body instanceof Promise) {
      record.encoding = true;
      body.then(
        (buffer) => this.#encoded(record, buffer),
        (error: unknown) => this.#encodeFailed(record, error),
      );
    } else {
      this.#encoded(record, body);
    }
  }

  #encoded(record: RequestRecord, body: Buffer): void {
    record.encoding = false;
    if (this.#settle(record, 200, null)) {
      record.reply.send(body, record.form);
      this.#done(record, true);
    }
    this.#free(record);
  }

  #encodeFailed(record: RequestRecord, error: unknown): void {
    record.encoding = false;
    this.#fail(record, error);
    this.#free(record);
  }

  /** Every choice of a stream with several finished well: its last events end it. */
  #endStream(record: RequestRecord): void {
    const tail = this.#output!.streamTail(record);
    if (this.#settle(record, 200, null)) {
      record.reply.write(tail, true);
      this.#done(record, true);
    }
    this.#free(record);
  }

  /** Answers with `error` unless the answer is already settled. */
  #fail(record: RequestRecord, error: unknown): void {
    if (!this.#settle(record, toRingserveError(error).statusCode, 'error')) return;
    record.reply.fail(error);
    this.#done(record, false);
  }

  /** The answer is complete: no longer in flight; its log line. False when it already was. */
  #settle(record: RequestRecord, status: number, fallback: string | null): boolean {
    if (!this.table.settle(record)) return false;
    if (record.deadline !== null) clearTimeout(record.deadline);
    record.deadline = null;
    logFinished(this.#log, this.#timeline, record, status, fallback);
    return true;
  }

  #done(record: RequestRecord, ok: boolean): void {
    this.#onDone({
      requestId: record.identity.requestId,
      slot: record.group.slots[0]!,
      latencyMs: performance.now() - record.timings.startMs,
      ok,
    });
  }

  /** Ends every choice of the request early but `except` (the slot table knows which need an ABORT). */
  #abortChoices(record: RequestRecord, except: number): void {
    const { slots, gens } = record.group;
    for (let i = 0; i < slots.length; i++) {
      if (i !== except) this.table.slots.abort(slots[i]!, gens[i]!);
    }
  }

  /** Frees the request's slots whose sequence ended, once its answer is settled and not being encoded. */
  #free(record: RequestRecord): void {
    if (!record.settled || record.encoding) return;
    const { slots, gens } = record.group;
    for (let i = 0; i < slots.length; i++) {
      if (this.table.slots.release(slots[i]!, gens[i]!)) this.#output?.free(slots[i]!, gens[i]!);
    }
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
