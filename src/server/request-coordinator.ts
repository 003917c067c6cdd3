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
import { type Logger, rateLimit } from '../obs/log.js';
import type { RequestTimeline } from '../obs/request-timeline.js';
import type { GenerateRequest } from '../protocol/generate-request.js';
import { CONTENT_TYPE, type ResponseForm } from '../protocol/generate-response.js';
import { SSE_CONTENT_TYPE } from '../protocol/sse.js';
import { childSeed } from '../wire/child-seed.js';
import type { EngineClient } from './engine-client.js';
import { releaseWhenSent } from './output/sent-answers.js';
import { checkStopStrings } from './output/slot-meta.js';
import type { ChoiceGroup, OutputEvents, OutputPath } from './output-path.js';
import { type InFlight, RequestTable } from './request-table.js';

interface RequestState {
  readonly reply: FastifyReply;
  readonly stream: boolean;
  readonly form: ResponseForm;
  readonly startMs: number;
  readonly promptTokens: number;
  /** The request's sequences (one per choice); the first names the request in OutputEvents. */
  readonly group: ChoiceGroup;
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
    if (request.n > 1 && request.stream) {
      throw new RS_ERR_REQ_INVALID_FIELD(
        'sampling_params.n',
        'n > 1 is supported without stream only',
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
    const group: ChoiceGroup = { slots: [], gens: [], remaining: request.n, failed: false };
    const state: RequestState = {
      reply,
      stream: request.stream,
      form,
      startMs: performance.now(),
      promptTokens: request.promptTokenIds.length,
      group,
    };
    const entries = this.#take(requestId, state, request.n);
    const identity = {
      requestId,
      model: request.model ?? this.#config.servedModelName,
      created: Math.floor(Date.now() / 1000),
    };
    const cacheSalt = request.cacheSalt === null ? null : Buffer.from(request.cacheSalt, 'utf8');
    let added = 0;
    try {
      for (let i = 0; i < entries.length; i++) {
        const { slot, gen } = entries[i]!;
        this.#timeline?.arrive(slot);
        // vLLM v1's parallel sampling: choice i is its own sequence, seeded seed + i.
        const child =
          i === 0
            ? request
            : {
                ...request,
                params: { ...request.params, seed: childSeed(request.params.seed, i) },
              };
        output.open(group, i, child, form, identity);
        this.#engine.add({
          slot,
          slotGen: gen,
          promptTokenIds: request.promptTokenIds,
          params: child.params,
          priority: request.priority,
          cacheSalt,
          arrivalTimeMs: Date.now(),
        });
        added++;
      }
    } catch (error) {
      // Sequences the engine has are aborted (their slots come back when it confirms); the others
      // never reached it, so their slots are free at once.
      for (let i = 0; i < entries.length; i++) {
        const { slot, gen } = entries[i]!;
        this.table.settle(slot);
        if (i < added) this.#engine.abort(slot);
        else this.#free(slot, gen);
      }
      if ((error as { code?: unknown }).code === 'RS_ERR_RING_FULL' && this.#ringFullWarning()) {
        this.#log?.warn((error as Error).message);
      }
      throw error;
    }
    if (request.stream) this.#startStream(reply);
    // A client that leaves before its answer aborts the request in the engine.
    const first = entries[0]!;
    reply.raw.once('close', () => {
      const current = this.table.get(first.slot);
      if (current?.gen === first.gen && !current.settled) {
        this.#settleGroup(group);
        this.#abortGroup(group);
        this.#logFinished(current, 499, 'abort');
      }
    });
  }

  /** Takes n slots for one request, or none (429) when fewer are free. */
  #take(requestId: string, state: RequestState, n: number): InFlight<RequestState>[] {
    const entries: InFlight<RequestState>[] = [];
    for (let i = 0; i < n; i++) {
      const entry = this.table.take(requestId, state);
      if (entry === null) {
        for (const taken of entries) {
          this.table.settle(taken.slot);
          this.table.release(taken.slot);
        }
        throw new RS_ERR_SERVER_QUEUE_FULL(this.table.capacity);
      }
      entries.push(entry);
      state.group.slots.push(entry.slot);
      state.group.gens.push(entry.gen);
    }
    return entries;
  }

  #settleGroup(group: ChoiceGroup): void {
    for (const slot of group.slots) this.table.settle(slot);
  }

  #abortGroup(group: ChoiceGroup): void {
    for (let i = 0; i < group.slots.length; i++) {
      const entry = this.table.get(group.slots[i]!);
      if (entry !== undefined && entry.gen === group.gens[i] && !entry.released) {
        this.#engine.abort(entry.slot);
      }
    }
  }

  /** Aborts the in-flight request with this id, if this server has it; true if it did. */
  abortById(requestId: string): boolean {
    const entry = this.table.byRequestId(requestId);
    if (entry === undefined) return false;
    this.#abortGroup(entry.state.group);
    return true;
  }

  // ---- OutputEvents ------------------------------------------------------------------------------

  complete(slot: number, gen: number, result: Buffer | Error): void {
    const entry = this.table.get(slot);
    if (entry === undefined || entry.gen !== gen) return;
    const group = entry.state.group;
    if (!entry.settled) {
      const { reply, startMs } = entry.state;
      this.#settleGroup(group);
      if (result instanceof Error) {
        const body = toErrorBody(result);
        if (entry.state.stream) this.#endStreamWithError(reply, body);
        else reply.code(body.error.code).send(body);
      } else if (!entry.state.stream) {
        reply.header('content-type', CONTENT_TYPE[entry.state.form]).send(result);
        releaseWhenSent(reply.raw, result);
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
    for (let i = 0; i < group.slots.length; i++) this.#maybeFree(group.slots[i]!, group.gens[i]!);
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
    if (entry === undefined || entry.gen !== gen || entry.released) return;
    this.#engine.abort(slot);
  }

  released(slot: number, gen: number): void {
    const entry = this.table.get(slot);
    if (entry === undefined || entry.gen !== gen) return;
    entry.released = true;
    this.#maybeFree(slot, gen);
  }

  // ---- engine death and drain --------------------------------------------------------------------

  /** The engine died: every request in flight fails with a 503 and its slot is free again. */
  engineDown(): void {
    this.#engine.setUp(false);
    const error = new RS_ERR_ENGINE_DEAD('the engine core died; retry once /health answers 200');
    const entries = [...this.table.slots()];
    for (const entry of entries) entry.released = true;
    for (const entry of entries) this.complete(entry.slot, entry.gen, error);
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
        this.#abortGroup(entry.state.group);
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
    if (entry.settled && entry.released) this.#free(slot, gen);
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
