/**
 * The soak's clients: `concurrency` closed loops over one undici Pool, each sending its next request
 * when the last is over. Requests rotate through the four answer forms (packed JSON, msgpack, SSE
 * stream, legacy per-token JSON); some clients leave at a random moment, some read a stream slowly.
 * Every request ends in exactly one outcome: completed (the whole answer, of the asked length),
 * left (the client disconnected on purpose), failed with a cause, or lost (no answer within the
 * client's timeout, or none by the end of the drain). Nothing per request is kept but counters.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import {
  BodyTail,
  completionTokensJson,
  completionTokensMsgpack,
} from '../../bench/loadtest/response-tail.js';

export interface TrafficSpec {
  url: string;
  concurrency: number;
  minTokens: number;
  maxTokens: number;
  seed: number;
  /** A request unanswered this long is lost. */
  answerTimeoutMs: number;
}

export interface TrafficCounts {
  sent: number;
  completed: number;
  /** Clients that disconnected on purpose (not failures). */
  left: number;
  /** Slow-reader streams among the completed. */
  slowReaders: number;
  failed: Record<string, number>;
  lost: number;
  inFlight: number;
  /** The first lost requests: form, when sent, whether any answer (headers) had arrived. */
  lostDetails: string[];
}

interface Pending {
  form: string;
  sentAtMs: number;
  headersAtMs: number | null;
}

const LOST_DETAILS_KEPT = 20;

const FORMS = ['packed', 'msgpack', 'stream', 'legacy'] as const;
/** Of every 100 requests: this many clients leave midway, this many streams are read slowly. */
const LEAVE_PERCENT = 8;
const SLOW_PERCENT = 6;
const SLOW_READ_PAUSE_MS = 40;
/** After a failure a client waits this long (a restarting server is not hammered). */
const FAILURE_BACKOFF_MS = 200;
/** After a hold, clients come back spread over this long. */
const RESUME_SPREAD_MS = 10_000;

/** mulberry32: a small seeded generator, so a run's request mix is reproducible. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

export class Traffic {
  readonly counts: TrafficCounts = {
    sent: 0,
    completed: 0,
    left: 0,
    slowReaders: 0,
    failed: {},
    lost: 0,
    inFlight: 0,
    lostDetails: [],
  };
  readonly #pending = new Map<number, Pending>();
  #serial = 0;
  readonly #spec: TrafficSpec;
  readonly #pool: Pool;
  readonly #rand: () => number;
  readonly #stopSending = new AbortController();
  readonly #clients: Promise<void>[] = [];
  #drained = false;
  /** While set, clients send nothing new (a quiet spell: idle-memory.ts); resolved when it ends. */
  #held: Promise<void> | null = null;
  #release: (() => void) | null = null;

  constructor(spec: TrafficSpec) {
    this.#spec = spec;
    this.#rand = random(spec.seed);
    this.#pool = new Pool(spec.url, {
      connections: spec.concurrency,
      pipelining: 1,
      headersTimeout: spec.answerTimeoutMs,
      bodyTimeout: spec.answerTimeoutMs,
    });
  }

  start(): void {
    for (let c = 0; c < this.#spec.concurrency; c++) this.#clients.push(this.#client(c));
  }

  /**
   * Holds every client before its next request; resolves true once none is in flight, false if
   * some still are after `timeoutMs` (the hold stays on either way, until resume()).
   */
  async hold(timeoutMs: number): Promise<boolean> {
    if (this.#held === null) {
      this.#held = new Promise<void>((resolve) => {
        this.#release = resolve;
      });
    }
    const deadline = Date.now() + timeoutMs;
    while (this.counts.inFlight > 0 && Date.now() < deadline) await sleep(100);
    return this.counts.inFlight === 0;
  }

  /** Lets held clients go on. */
  resume(): void {
    this.#release?.();
    this.#held = null;
    this.#release = null;
  }

  /** Stops sending; resolves when every request in flight has ended or `drainMs` passed. */
  async drain(drainMs: number): Promise<void> {
    this.#stopSending.abort();
    this.resume();
    await Promise.race([Promise.all(this.#clients), sleep(drainMs)]);
    // What is still in flight now was accepted and never answered.
    this.#drained = true;
    for (const p of this.#pending.values()) this.#noteLost(p);
    this.counts.lost += this.counts.inFlight;
    this.counts.inFlight = 0;
    await this.#pool.destroy().catch(() => {});
  }

  #noteLost(p: Pending): void {
    if (this.counts.lostDetails.length >= LOST_DETAILS_KEPT) return;
    const sent = new Date(p.sentAtMs).toISOString();
    const answer =
      p.headersAtMs === null
        ? 'no answer headers'
        : `headers after ${p.headersAtMs - p.sentAtMs} ms, body stalled`;
    this.counts.lostDetails.push(`${p.form} sent ${sent}: ${answer}`);
  }

  #fail(cause: string): void {
    this.counts.failed[cause] = (this.counts.failed[cause] ?? 0) + 1;
  }

  async #client(index: number): Promise<void> {
    const tail = new BodyTail();
    for (let n = 0; !this.#stopSending.signal.aborted; n++) {
      if (this.#held !== null) {
        await this.#held;
        if (this.#stopSending.signal.aborted) break;
        // Not all at once: 300 requests in one instant measure a start, not a steady load.
        await sleep(this.#rand() * RESUME_SPREAD_MS);
      }
      const ok = await this.#one(FORMS[(index + n) % FORMS.length]!, tail);
      if (!ok && !this.#stopSending.signal.aborted) await sleep(FAILURE_BACKOFF_MS);
    }
  }

  /** One request start to end; false when it failed. */
  async #one(form: (typeof FORMS)[number], tail: BodyTail): Promise<boolean> {
    const { minTokens, maxTokens, answerTimeoutMs } = this.#spec;
    const r = this.#rand;
    const asked = minTokens + Math.floor(r() * (maxTokens - minTokens + 1));
    const roll = r() * 100;
    const leaveAfterMs = roll < LEAVE_PERCENT ? 50 + r() * 3_000 : null;
    const slow = form === 'stream' && roll >= LEAVE_PERCENT && roll < LEAVE_PERCENT + SLOW_PERCENT;
    const body = JSON.stringify({
      token_ids: Array.from(
        { length: 16 + Math.floor(r() * 240) },
        () => 1 + Math.floor(r() * 900),
      ),
      sampling_params: {
        max_tokens: asked,
        ignore_eos: true,
        logprobs: 1,
        top_k: 64,
        return_sampling_mask: r() < 0.25,
        return_routed_experts: r() < 0.25,
      },
      packed: form !== 'legacy',
      stream: form === 'stream',
    });
    const leave = new AbortController();
    const timers: NodeJS.Timeout[] = [];
    if (leaveAfterMs !== null) timers.push(setTimeout(() => leave.abort(), leaveAfterMs));
    const timedOut = AbortSignal.timeout(answerTimeoutMs);
    this.counts.sent++;
    this.counts.inFlight++;
    const serial = this.#serial++;
    const pending: Pending = { form, sentAtMs: Date.now(), headersAtMs: null };
    this.#pending.set(serial, pending);
    let outcome: string;
    try {
      outcome = await this.#exchange(
        form,
        body,
        asked,
        slow,
        tail,
        AbortSignal.any([leave.signal, timedOut]),
        pending,
      );
    } catch (error) {
      if (leave.signal.aborted) outcome = 'left';
      else if (timedOut.aborted) outcome = 'lost';
      else outcome = causeOf(error);
    } finally {
      for (const t of timers) clearTimeout(t);
      this.#pending.delete(serial);
    }
    // drain() counted what was still in flight as lost.
    if (this.#drained) return false;
    this.counts.inFlight--;
    if (outcome === 'completed') {
      this.counts.completed++;
      if (slow) this.counts.slowReaders++;
      return true;
    }
    if (outcome === 'left') this.counts.left++;
    else if (outcome === 'lost') {
      this.counts.lost++;
      this.#noteLost(pending);
    } else this.#fail(outcome);
    return outcome === 'left';
  }

  async #exchange(
    form: (typeof FORMS)[number],
    body: string,
    asked: number,
    slow: boolean,
    tail: BodyTail,
    signal: AbortSignal,
    pending: Pending,
  ): Promise<string> {
    const res = await this.#pool.request({
      path: '/inference/v1/generate',
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: form === 'msgpack' ? 'application/msgpack' : 'application/json',
      },
      body,
      signal,
    });
    pending.headersAtMs = Date.now();
    tail.reset();
    let text = '';
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      tail.push(chunk);
      if (form === 'stream' || res.statusCode !== 200)
        text = (text + chunk.toString('latin1')).slice(-2048);
      if (slow) await sleep(SLOW_READ_PAUSE_MS);
    }
    if (res.statusCode !== 200) {
      const code = /"code":\s*(\d+)/.exec(text)?.[1] ?? res.statusCode;
      return `http_${code}`;
    }
    if (form === 'stream') {
      const error = /data: \{"error":\{[^\n]*"code":(\d+)\}\}/.exec(text);
      if (error !== null) return `stream_error_${error[1]}`;
      return text.endsWith('data: [DONE]\n\n') ? 'completed' : 'stream_truncated';
    }
    const tokens =
      form === 'msgpack'
        ? completionTokensMsgpack(tail.bytes())
        : completionTokensJson(tail.bytes());
    return tokens === asked ? 'completed' : 'wrong_length';
  }
}

function causeOf(error: unknown): string {
  const e = error as { code?: string; message?: string };
  if (e.code === 'UND_ERR_SOCKET' || e.code === 'ECONNRESET' || e.code === 'UND_ERR_CLOSED')
    return 'connection_reset';
  if (e.code === 'ECONNREFUSED') return 'connection_refused';
  return `client_${e.code ?? e.message?.slice(0, 40) ?? 'error'}`;
}
