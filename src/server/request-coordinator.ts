/**
 * Per-request life on the main thread: accept (slot, slot meta, ADD record), deliver (the finished
 * Buffer, or SSE bytes), abort (client gone, abort_requests, engine death) and release (the engine
 * confirmed). vLLM v1 keeps this in output_processor.py; here it holds one small object per request
 * and never touches a token.
 *
 * A slot is reused only when both have happened: the client's response is complete and the engine
 * confirmed the request is over. Only then do the output side's accumulators go back to the pool.
 */
import { randomUUID } from 'node:crypto';
import type { FastifyReply } from 'fastify';
import type { RingserveConfig } from '../config.js';
import {
  RS_ERR_ENGINE_DEAD,
  RS_ERR_REQ_INVALID_FIELD,
  RS_ERR_SERVER_DRAINING,
  RS_ERR_SERVER_QUEUE_FULL,
  toErrorBody,
} from '../errors.js';
import { type Logger, rateLimit } from '../metrics/log.js';
import type { RequestTimeline } from '../metrics/request-timeline.js';
import type { GenerateRequest } from '../protocol/generate-request.js';
import { CONTENT_TYPE, type ResponseForm } from '../protocol/generate-response.js';
import { SSE_CONTENT_TYPE } from '../protocol/sse.js';
import type { EngineClient } from './engine-client.js';
import { checkStopStrings } from './output/slot-meta.js';
import type { OutputEvents, OutputPath } from './output-path.js';
import { type InFlight, RequestTable } from './request-table.js';

interface RequestState {
  readonly reply: FastifyReply;
  readonly stream: boolean;
  readonly form: ResponseForm;
  readonly startMs: number;
  readonly promptTokens: number;
  /** The engine confirmed the request is over. */
  released: boolean;
}

export interface CompletedRequest {
  requestId: string;
  slot: number;
  latencyMs: number;
  ok: boolean;
}

export interface CoordinatorOptions {
  /** Request arrivals for the output worker's metrics, and what it recorded for the log line. */
  timeline?: RequestTimeline;
  /** One info line per finished request, warnings for a full request ring. */
  log?: Logger;
  onDone?: (done: CompletedRequest) => void;
}

/** vLLM's finish reason names by FinishReason code (engine/types.ts). */
const FINISH_NAMES = [null, 'stop', 'length', 'abort', 'error'] as const;

export class RequestCoordinator implements OutputEvents {
  readonly table: RequestTable<RequestState>;
  readonly #engine: EngineClient;
  readonly #config: RingserveConfig;
  #output: OutputPath | null = null;
  #draining = false;
  readonly #onDone: (done: CompletedRequest) => void;
  readonly #timeline: RequestTimeline | null;
  readonly #log: Logger | null;
  readonly #ringFullWarning = rateLimit(10_000);

  constructor(config: RingserveConfig, engine: EngineClient, options: CoordinatorOptions = {}) {
    this.#config = config;
    this.#engine = engine;
    this.table = new RequestTable(config.maxQueueLen);
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

  /** Accepts a validated request: the reply is answered later by complete() or stream(). */
  submit(request: GenerateRequest, reply: FastifyReply, headerId: string | undefined): void {
    if (request.n !== 1) {
      throw new RS_ERR_REQ_INVALID_FIELD(
        'sampling_params.n',
        'only n = 1 is supported by this server',
      );
    }
    checkStopStrings(request.stop);
    // Fields the contract accepts but this server cannot honour are refused, never silently dropped.
    if (request.promptLogprobs !== null) {
      throw new RS_ERR_REQ_INVALID_FIELD(
        'sampling_params.prompt_logprobs',
        'prompt logprobs are not produced by this server; send null',
      );
    }
    if (request.priority !== 0 && this.#config.schedulingPolicy !== 'priority') {
      // As vLLM: a priority is only meaningful with --scheduling-policy priority.
      throw new RS_ERR_REQ_INVALID_FIELD('priority', 'needs --scheduling-policy priority');
    }
    if (this.#draining) throw new RS_ERR_SERVER_DRAINING();
    if (!this.#engine.alive()) throw new RS_ERR_ENGINE_DEAD('no heartbeat from the engine core');
    const output = this.#output!;
    const requestId = headerId ?? request.requestId ?? randomUUID().replaceAll('-', '');
    const form: ResponseForm = reply.request.headers.accept?.includes('application/msgpack')
      ? 'msgpack'
      : (request.packed ?? this.#config.generateFormat === 'packed')
        ? 'packed'
        : 'legacy';
    const state: RequestState = {
      reply,
      stream: request.stream,
      form,
      startMs: performance.now(),
      promptTokens: request.promptTokenIds.length,
      released: false,
    };
    const entry = this.table.take(requestId, state);
    if (entry === null) throw new RS_ERR_SERVER_QUEUE_FULL(this.table.capacity);
    const { slot, gen } = entry;
    this.#timeline?.arrive(slot);
    const model = request.model ?? this.#config.servedModelName;
    output.open(slot, gen, request, form, {
      requestId,
      model,
      created: Math.floor(Date.now() / 1000),
    });
    try {
      this.#engine.add({
        slot,
        slotGen: gen,
        promptTokenIds: request.promptTokenIds,
        params: request.params,
        priority: request.priority,
        cacheSalt: request.cacheSalt === null ? null : Buffer.from(request.cacheSalt, 'utf8'),
        arrivalTimeMs: Date.now(),
      });
    } catch (error) {
      this.table.settle(slot);
      this.#free(slot, gen);
      if ((error as { code?: unknown }).code === 'RS_ERR_RING_FULL' && this.#ringFullWarning()) {
        this.#log?.warn((error as Error).message);
      }
      throw error;
    }
    if (request.stream) this.#startStream(reply);
    // A client that leaves before its answer aborts the request in the engine.
    reply.raw.once('close', () => {
      const current = this.table.get(slot);
      if (current?.gen === gen && !current.settled) {
        this.table.settle(slot);
        this.#engine.abort(slot);
        this.#logFinished(current, 499, 'abort');
      }
    });
  }

  /** Aborts the in-flight request with this id, if this server has it; true if it did. */
  abortById(requestId: string): boolean {
    const entry = this.table.byRequestId(requestId);
    if (entry === undefined || entry.state.released) return false;
    this.#engine.abort(entry.slot);
    return true;
  }

  // ---- OutputEvents ------------------------------------------------------------------------------

  complete(slot: number, gen: number, result: Buffer | Error): void {
    const entry = this.table.get(slot);
    if (entry === undefined || entry.gen !== gen) return;
    if (!entry.settled) {
      const { reply, startMs } = entry.state;
      this.table.settle(slot);
      if (result instanceof Error) {
        const body = toErrorBody(result);
        if (entry.state.stream) this.#endStreamWithError(reply, body);
        else reply.code(body.error.code).send(body);
      } else if (!entry.state.stream) {
        reply.header('content-type', CONTENT_TYPE[entry.state.form]).send(result);
      }
      const ok = !(result instanceof Error);
      this.#logFinished(entry, ok ? 200 : toErrorBody(result).error.code, ok ? null : 'error');
      this.#onDone({
        requestId: entry.requestId,
        slot,
        latencyMs: performance.now() - startMs,
        ok,
      });
    }
    this.#maybeFree(slot, gen);
  }

  stream(slot: number, gen: number, bytes: Buffer, last: boolean): void {
    const entry = this.table.get(slot);
    if (entry === undefined || entry.gen !== gen || entry.settled) return;
    const raw = entry.state.reply.raw;
    raw.write(bytes);
    if (last) {
      raw.end();
      this.complete(slot, gen, bytes);
    }
  }

  stopped(slot: number, gen: number): void {
    const entry = this.table.get(slot);
    if (entry === undefined || entry.gen !== gen || entry.state.released) return;
    this.#engine.abort(slot);
  }

  released(slot: number, gen: number): void {
    const entry = this.table.get(slot);
    if (entry === undefined || entry.gen !== gen) return;
    entry.state.released = true;
    this.#maybeFree(slot, gen);
  }

  // ---- engine death and drain --------------------------------------------------------------------

  /** The engine died: every request in flight fails with a 503 and its slot is free again. */
  engineDown(): void {
    this.#engine.setUp(false);
    const error = new RS_ERR_ENGINE_DEAD('the engine core died; retry once /health answers 200');
    for (const entry of [...this.table.slots()]) {
      entry.state.released = true;
      this.complete(entry.slot, entry.gen, error);
    }
    this.#output?.engineDown();
  }

  engineUp(): void {
    this.#engine.setUp(true);
  }

  /** Stops accepting; resolves once nothing is in flight or `timeoutMs` passed (then aborts the rest). */
  async drain(timeoutMs: number): Promise<void> {
    this.#draining = true;
    const deadline = performance.now() + timeoutMs;
    while (this.table.active > 0 && performance.now() < deadline) await sleep(20);
    for (const entry of [...this.table.slots()]) {
      if (!entry.settled) {
        this.complete(entry.slot, entry.gen, new RS_ERR_SERVER_DRAINING());
        this.#engine.abort(entry.slot);
      }
    }
  }

  // ---- internals ---------------------------------------------------------------------------------

  /**
   * The request's one info line. Token counts and the finish reason come from what the output worker
   * recorded (the timeline); `fallback` names the finish when it recorded nothing (a failure before
   * any output, a client that left).
   */
  #logFinished(entry: InFlight<RequestState>, status: number, fallback: string | null): void {
    const log = this.#log;
    if (log === null || !log.isLevelEnabled('info')) return;
    const outcome = this.#timeline?.outcome(entry.slot, entry.gen) ?? null;
    const ttftMs = outcome?.ttftMs ?? null;
    log.info(
      {
        request_id: entry.requestId,
        status,
        prompt_tokens: entry.state.promptTokens,
        completion_tokens: outcome?.completionTokens ?? null,
        finish_reason: (outcome === null ? null : FINISH_NAMES[outcome.finish]) ?? fallback,
        latency_ms: tenths(performance.now() - entry.state.startMs),
        ttft_ms: ttftMs === null ? null : tenths(ttftMs),
        stream: entry.state.stream,
      },
      'request finished',
    );
  }

  #maybeFree(slot: number, gen: number): void {
    const entry = this.table.get(slot);
    if (entry === undefined || entry.gen !== gen) return;
    if (entry.settled && entry.state.released) this.#free(slot, gen);
  }

  #free(slot: number, gen: number): void {
    this.#output?.free(slot, gen);
    this.table.release(slot);
  }

  #startStream(reply: FastifyReply): void {
    reply.hijack();
    reply.raw.writeHead(200, {
      'content-type': SSE_CONTENT_TYPE,
      'cache-control': 'no-cache',
      connection: 'keep-alive',
    });
  }

  #endStreamWithError(reply: FastifyReply, body: ReturnType<typeof toErrorBody>): void {
    const raw = reply.raw;
    if (raw.writableEnded) return;
    raw.write(`data: ${JSON.stringify(body)}\n\ndata: [DONE]\n\n`);
    raw.end();
  }
}

/** Milliseconds to one decimal, for log lines. */
const tenths = (ms: number): number => Math.round(ms * 10) / 10;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
