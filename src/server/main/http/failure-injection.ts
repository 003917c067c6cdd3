/**
 * Failures injected on purpose, so that users can test their own clients against a server that
 * misbehaves the way real ones do (llm-d-inference-sim offers the same with
 * --failure-injection-rate / --failure-types):
 *
 * - `--failure-rate R`: each inference request fails with probability R, its kind drawn evenly from
 *   `--failure-kinds`. The draws come from a PRNG seeded by `--seed` and the API server's index, so
 *   a run with the same seed and the same request order fails the same requests the same way.
 * - `x-ringserve-fail: <kind>` forces one failure on that request, only with
 *   `--allow-failure-header` (otherwise the header is ignored, so a production server cannot be
 *   made to fail by whoever sends it). A forced failure takes no draw from the PRNG.
 *
 * Kinds: `rate_limit` (429 with Retry-After), `unavailable` (503), `context_length` (400 naming
 * token_ids), each the contract's error body; `abort`: the request runs, and its connection is cut
 * after the first bytes of the answer (the first SSE event of a stream, half of a finished body).
 *
 * The routes call `check()` once the request is known to be valid (bad input is still a 400 naming
 * the field), and wrap their reply in `AbortingReply` when it returns `abort`.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import {
  type FailureKind,
  isFailureKind,
  parseFailureKinds,
  type RingserveConfig,
} from '../../../config.js';
import {
  RS_ERR_INJECTED_CONTEXT_LENGTH,
  RS_ERR_INJECTED_RATE_LIMIT,
  RS_ERR_INJECTED_UNAVAILABLE,
  RS_ERR_REQ_INVALID_FIELD,
} from '../../../errors.js';
import { CONTENT_TYPE, type ResponseForm } from '../../../protocol/generate-response.js';
import type { ReplySink } from '../reply-sink.js';
import { releaseWhenSent } from '../sent-answers.js';

export const FAILURE_HEADER = 'x-ringserve-fail';
/** Seconds a client told "rate limited" is asked to wait. */
const RATE_LIMIT_RETRY_AFTER_S = 1;

export class FailureInjector {
  readonly #rate: number;
  readonly #kinds: readonly FailureKind[];
  readonly #allowHeader: boolean;
  readonly #maxModelLen: number;
  #state: number;

  /** `stream`: the API server's index, so that servers of one cluster draw different sequences. */
  constructor(config: RingserveConfig, stream: number) {
    this.#rate = config.failureRate;
    this.#kinds = parseFailureKinds(config.failureKinds);
    this.#allowHeader = config.allowFailureHeader;
    this.#maxModelLen = config.maxModelLen;
    this.#state =
      (Math.imul(config.seed ^ 0x5bd1e995, 0x9e3779b1) + Math.imul(stream + 1, 0x85ebca6b)) | 0;
  }

  /** Whether this server injects anything at all (routes skip the call otherwise). */
  get active(): boolean {
    return this.#rate > 0 || this.#allowHeader;
  }

  /**
   * The failure this request gets: throws the coded error of an error kind (the route answers it
   * as any other), returns `abort` for a connection to cut, or null to serve it normally.
   */
  check(request: FastifyRequest, reply: FastifyReply): 'abort' | null {
    const kind = this.pick(request.headers[FAILURE_HEADER]);
    if (kind === null || kind === 'abort') return kind;
    if (kind === 'rate_limit') {
      reply.header('retry-after', String(RATE_LIMIT_RETRY_AFTER_S));
      throw new RS_ERR_INJECTED_RATE_LIMIT();
    }
    if (kind === 'unavailable') throw new RS_ERR_INJECTED_UNAVAILABLE();
    throw new RS_ERR_INJECTED_CONTEXT_LENGTH(this.#maxModelLen);
  }

  /** The kind for a request with this header value (a forced one, a drawn one, or none). */
  pick(header: string | string[] | undefined): FailureKind | null {
    if (this.#allowHeader && header !== undefined) {
      const text = (Array.isArray(header) ? header.join(',') : header).trim();
      if (!isFailureKind(text)) {
        throw new RS_ERR_REQ_INVALID_FIELD(
          FAILURE_HEADER,
          `must be one of ${this.#kinds.join(', ')}`,
        );
      }
      return text;
    }
    if (this.#rate === 0 || this.#next() >= this.#rate) return null;
    return this.#kinds[Math.floor(this.#next() * this.#kinds.length)]!;
  }

  /** mulberry32: a uniform draw in [0, 1). */
  #next(): number {
    this.#state = (this.#state + 0x6d2b79f5) | 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
}

/**
 * A reply whose connection is cut after the first bytes of the answer: the client sees a status
 * line and part of the body, then the connection closes, as when a server dies mid-answer. The
 * request ran in the engine; the closed connection aborts it there as any client disconnect does.
 */
export class AbortingReply implements ReplySink {
  readonly #inner: ReplySink;
  readonly #reply: FastifyReply;
  #cut = false;

  constructor(inner: ReplySink, reply: FastifyReply) {
    this.#inner = inner;
    this.#reply = reply;
  }

  send(body: Buffer, form: ResponseForm): void {
    this.#reply.hijack();
    const raw = this.#reply.raw;
    raw.writeHead(200, { 'content-type': CONTENT_TYPE[form], 'content-length': body.length });
    releaseWhenSent(raw, body);
    this.#cutAfter(body.subarray(0, body.length >> 1));
  }

  fail(error: unknown): void {
    if (!this.#cut) this.#inner.fail(error);
  }

  startStream(): void {
    this.#inner.startStream();
  }

  write(bytes: Buffer, _last: boolean): void {
    if (!this.#cut) this.#cutAfter(bytes);
  }

  onClose(listener: () => void): void {
    this.#inner.onClose(listener);
  }

  /** Writes `bytes`, then destroys the connection once the socket has taken them. */
  #cutAfter(bytes: Buffer): void {
    this.#cut = true;
    const raw = this.#reply.raw;
    raw.write(bytes, () => raw.destroy());
  }
}
