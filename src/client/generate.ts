import { pack } from 'msgpackr';
import { type Dispatcher, request } from 'undici';
import {
  type RingserveError,
  RS_ERR_CLIENT_DECODE,
  RS_ERR_CLIENT_HTTP,
  RS_ERR_CLIENT_TIMEOUT,
} from '../errors.js';
import { decodeGenerateBody, type GenerateResult } from './decode.js';
import { SseParser, StreamAccumulator, type StreamDelta } from './stream.js';

/**
 * A client for POST /inference/v1/generate over undici, decoding every answer form into typed
 * arrays. Every call has a bound (`timeoutMs`) and ends in a coded error: RS_ERR_CLIENT_HTTP for a
 * non-2xx answer or a stream error event (with `status` and the error `body`), RS_ERR_CLIENT_TIMEOUT,
 * RS_ERR_CLIENT_DECODE for a malformed answer.
 */

export interface GenerateOptions {
  /** Response form: JSON (packed or legacy, as the body's `packed` says) or msgpack. */
  accept?: 'json' | 'msgpack';
  /** How the request body is sent. */
  bodyEncoding?: 'json' | 'msgpack';
  apiKey?: string;
  /** Sent as X-Request-Id, which the server prefers over the body's request_id. */
  requestId?: string;
  headers?: Record<string, string>;
  /** Bound on the whole exchange, headers to last byte (default 10 minutes: long RL rollouts). */
  timeoutMs?: number;
  signal?: AbortSignal;
  dispatcher?: Dispatcher;
  /** Default `/inference/v1/generate`. */
  path?: string;
}

/** RS_ERR_CLIENT_HTTP with what the server said. */
export type ClientHttpError = RingserveError & { status: number; body: unknown };

const DEFAULT_TIMEOUT_MS = 600_000;
const GENERATE_PATH = '/inference/v1/generate';

async function send(
  baseUrl: string,
  body: Record<string, unknown>,
  opts: GenerateOptions,
  signal: AbortSignal,
): Promise<Dispatcher.ResponseData> {
  const headers: Record<string, string> = {
    accept: opts.accept === 'msgpack' ? 'application/msgpack' : 'application/json',
    'content-type': opts.bodyEncoding === 'msgpack' ? 'application/msgpack' : 'application/json',
    ...opts.headers,
  };
  if (opts.apiKey !== undefined) headers.authorization = `Bearer ${opts.apiKey}`;
  if (opts.requestId !== undefined) headers['x-request-id'] = opts.requestId;
  // token_ids may be handed over as a typed array (e.g. a previous result's tokenIds); both wire
  // encodings want a plain array of numbers.
  const ids = body.token_ids;
  const plain = ArrayBuffer.isView(ids)
    ? { ...body, token_ids: Array.from(ids as Int32Array) }
    : body;
  const payload = opts.bodyEncoding === 'msgpack' ? pack(plain) : JSON.stringify(plain);
  const url = new URL(opts.path ?? GENERATE_PATH, baseUrl);
  const res = await request(url, {
    method: 'POST',
    headers,
    body: payload,
    signal,
    ...(opts.dispatcher === undefined ? {} : { dispatcher: opts.dispatcher }),
  });
  if (res.statusCode >= 200 && res.statusCode < 300) return res;
  const text = await res.body.text();
  throw httpError(res.statusCode, parseErrorBody(text));
}

function parseErrorBody(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function httpError(status: number, body: unknown): ClientHttpError {
  const message = (body as { error?: { message?: unknown } } | null)?.error?.message;
  const err = new RS_ERR_CLIENT_HTTP(
    status,
    typeof message === 'string' ? message : String(body),
  ) as ClientHttpError;
  err.status = status;
  err.body = body;
  return err;
}

interface Bound {
  signal: AbortSignal;
  /** Turn an error into RS_ERR_CLIENT_TIMEOUT when the bound, not the caller, ended the call. */
  translate(err: unknown): unknown;
}

function bound(opts: GenerateOptions, extra?: AbortSignal): Bound {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const timeout = AbortSignal.timeout(timeoutMs);
  const signals = [timeout];
  if (opts.signal !== undefined) signals.push(opts.signal);
  if (extra !== undefined) signals.push(extra);
  return {
    signal: signals.length === 1 ? timeout : AbortSignal.any(signals),
    translate: (err) =>
      timeout.aborted && opts.signal?.aborted !== true ? new RS_ERR_CLIENT_TIMEOUT(timeoutMs) : err,
  };
}

/** POST a generate request and decode the (non-streamed) answer. */
export async function generate(
  baseUrl: string,
  body: Record<string, unknown>,
  opts: GenerateOptions = {},
): Promise<GenerateResult> {
  const { signal, translate } = bound(opts);
  try {
    const res = await send(baseUrl, { ...body, stream: false }, opts, signal);
    const bytes = new Uint8Array(await res.body.arrayBuffer());
    return decodeGenerateBody(bytes, String(res.headers['content-type'] ?? 'application/json'));
  } catch (err) {
    throw translate(err);
  }
}

/**
 * A streamed generate: iterate for the decoded deltas as they arrive; after the iteration,
 * `result()` holds the concatenated arrays (the same a non-streamed answer decodes to). Leaving
 * the loop early closes the connection, which aborts the request on the server.
 */
export class GenerateStream implements AsyncIterable<StreamDelta> {
  readonly #accumulator = new StreamAccumulator();
  readonly #baseUrl: string;
  readonly #body: Record<string, unknown>;
  readonly #opts: GenerateOptions;

  constructor(baseUrl: string, body: Record<string, unknown>, opts: GenerateOptions = {}) {
    this.#baseUrl = baseUrl;
    this.#body = { ...body, stream: true };
    this.#opts = { ...opts, accept: 'json' };
  }

  async *[Symbol.asyncIterator](): AsyncIterator<StreamDelta> {
    const stop = new AbortController();
    const { signal, translate } = bound(this.#opts, stop.signal);
    let done = false;
    try {
      const res = await send(this.#baseUrl, this.#body, this.#opts, signal);
      const parser = new SseParser();
      for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
        for (const event of parser.push(chunk)) {
          if (event.kind === 'done') {
            done = true;
            continue;
          }
          const error = (event.json as { error?: { code?: unknown } }).error;
          if (error !== undefined) throw httpError(Number(error.code ?? 500), event.json);
          yield this.#accumulator.push(event.json);
        }
      }
      if (!done) throw new RS_ERR_CLIENT_DECODE('the stream ended without data: [DONE]');
    } catch (err) {
      throw translate(err);
    } finally {
      if (!done) stop.abort();
    }
  }

  /** Drain the stream and return the concatenated result. */
  async collect(): Promise<GenerateResult> {
    for await (const _ of this) {
      // each delta is folded into the accumulator as it is decoded
    }
    return this.result();
  }

  /** What has arrived so far (all of it once iteration has finished). */
  result(): GenerateResult {
    return this.#accumulator.result();
  }
}

export function generateStream(
  baseUrl: string,
  body: Record<string, unknown>,
  opts: GenerateOptions = {},
): GenerateStream {
  return new GenerateStream(baseUrl, body, opts);
}
