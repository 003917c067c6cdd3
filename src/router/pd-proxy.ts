/**
 * One request through the P/D pair, as vLLM's P/D proxies do it
 * (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py): the prefill instance gets the
 * request with max_tokens 1 and `kv_transfer_params: {"do_remote_decode": true}`, the decode
 * instance the same prompt with the handle the prefill answer returned; the answers are merged
 * (merge.ts) and written in the client's form with protocol/'s writers. The router asks both
 * instances for msgpack (raw bytes, no base64) and decodes into typed arrays only.
 *
 * An instance's error answer (4xx, 503, ...) is the client's answer, status and body as sent; an
 * instance that cannot be reached or answers something that does not decode is a 502.
 */
import { randomUUID } from 'node:crypto';
import { pack } from 'msgpackr';
import { request } from 'undici';
import { decodeGenerateBody, type GenerateResult } from '../client/decode.js';
import { decodePromptLogprobs } from '../client/prompt-logprobs.js';
import { RS_ERR_ROUTER_UPSTREAM, toRingserveError } from '../errors.js';
import { GenerateResponseEncoder, type ResponseForm } from '../protocol/generate-response.js';
import { mergeAnswers } from './merge.js';
import type { RouterMetrics } from './router-metrics.js';
import type { Upstream, UpstreamPool } from './upstreams.js';

export const GENERATE_PATH = '/inference/v1/generate';

type Body = Record<string, unknown>;

/** An instance's answer: decoded when 200, else passed through as is. */
export type UpstreamAnswer =
  | { ok: true; result: GenerateResult }
  | { ok: false; status: number; contentType: string; body: Buffer };

/** What the client gets for a non-streamed request. */
export interface ProxyReply {
  status: number;
  contentType: string;
  body: Buffer;
}

export interface PdPair {
  prefill: UpstreamPool;
  decode: UpstreamPool;
  metrics: RouterMetrics;
}

const encoder = new GenerateResponseEncoder();

/** The client's form (docs/contract.md): msgpack when accepted, legacy when `"packed": false`. */
export function clientForm(accept: string | undefined, body: Body): ResponseForm {
  if (accept?.includes('application/msgpack')) return 'msgpack';
  return body.packed === false ? 'legacy' : 'packed';
}

/** The request id both instances and the answer use: the header's, the body's, or a new one. */
export function requestIdFor(header: string | undefined, body: Body): string {
  if (header !== undefined && header !== '') return header;
  return typeof body.request_id === 'string' ? body.request_id : randomUUID();
}

/**
 * The prefill request: one token, KV kept for the decode instance. Prompt logprobs are the prefill
 * instance's to compute; their candidates and ranks come only in the legacy form, so a client that
 * asked that form gets a prefill answer in it (JSON), and any other the packed one (msgpack).
 */
export function prefillBody(body: Body, requestId: string, form: ResponseForm = 'packed'): Body {
  const sp = (body.sampling_params ?? {}) as Body;
  return {
    ...body,
    request_id: requestId,
    stream: false,
    stream_options: null,
    packed: form !== 'legacy' || promptLogprobsK(body) < 0,
    kv_transfer_params: { do_remote_decode: true },
    sampling_params: { ...sp, n: 1, max_tokens: 1, min_tokens: 0 },
  };
}

/** The request's prompt_logprobs k, or -1 when it asked none (the instances check the value). */
export function promptLogprobsK(body: Body): number {
  const k = ((body.sampling_params ?? {}) as Body).prompt_logprobs;
  return typeof k === 'number' ? k : -1;
}

/**
 * The decode request: the client's, with the prefill answer's handle. A stream is asked for in the
 * packed form whatever the client wants (the router writes the client's form from typed arrays).
 */
export function decodeBody(body: Body, requestId: string, handle: unknown, stream: boolean): Body {
  const sp = (body.sampling_params ?? {}) as Body;
  return {
    ...body,
    request_id: requestId,
    stream,
    packed: true,
    kv_transfer_params: handle ?? null,
    // The prefill answer carries them: the decode instance does not compute them again.
    sampling_params: { ...sp, prompt_logprobs: null },
  };
}

/** POSTs a generate body to an instance of `pool` (least outstanding) for msgpack or SSE. */
export async function postGenerate(
  pool: UpstreamPool,
  body: Body,
  signal: AbortSignal,
): Promise<{ upstream: Upstream; res: Awaited<ReturnType<typeof request>> }> {
  const upstream = pool.acquire();
  try {
    const res = await request(`${upstream.url}${GENERATE_PATH}`, {
      method: 'POST',
      dispatcher: pool.dispatcher,
      signal,
      headers: {
        'content-type': 'application/msgpack',
        accept:
          body.stream === true
            ? 'text/event-stream'
            : body.packed === false
              ? 'application/json'
              : 'application/msgpack',
        'x-request-id': body.request_id as string,
        ...(pool.authorization === null ? {} : { authorization: pool.authorization }),
      },
      body: pack(body),
    });
    // The client passed the router's check; the instance refused the router's own key, which is
    // the operator's to mend, not the client's: a 502 that says so, not the instance's 401.
    if (res.statusCode === 401) {
      await res.body.dump();
      throw new Error(
        pool.authorization === null
          ? 'it asks for an API key: give the router --upstream-api-key'
          : "it refused the router's key: its --api-key is not the router's --upstream-api-key",
      );
    }
    return { upstream, res };
  } catch (error) {
    pool.release(upstream);
    throw new RS_ERR_ROUTER_UPSTREAM(pool.role, upstream.url, (error as Error).message);
  }
}

/** A non-streamed call: the decoded answer, or the instance's error answer. */
export async function callInstance(
  pool: UpstreamPool,
  body: Body,
  signal: AbortSignal,
): Promise<UpstreamAnswer> {
  const { upstream, res } = await postGenerate(pool, body, signal);
  try {
    const bytes = Buffer.from(await res.body.arrayBuffer());
    const contentType = String(res.headers['content-type'] ?? 'application/json');
    if (res.statusCode !== 200)
      return { ok: false, status: res.statusCode, contentType, body: bytes };
    try {
      return { ok: true, result: decodeGenerateBody(bytes, contentType) };
    } catch (error) {
      throw new RS_ERR_ROUTER_UPSTREAM(pool.role, upstream.url, toRingserveError(error).message);
    }
  } catch (error) {
    if ((error as { code?: string }).code === 'RS_ERR_ROUTER_UPSTREAM') throw error;
    throw new RS_ERR_ROUTER_UPSTREAM(pool.role, upstream.url, (error as Error).message);
  } finally {
    pool.release(upstream);
  }
}

/** Prefill then decode then merge, for a non-streamed request. */
export async function proxyGenerate(
  pair: PdPair,
  body: Body,
  requestId: string,
  form: ResponseForm,
  signal: AbortSignal,
): Promise<ProxyReply> {
  const prefill = await callInstance(pair.prefill, prefillBody(body, requestId, form), signal);
  if (!prefill.ok) return prefill;
  const handle = prefill.result.kvTransferParams;
  const decode = await callInstance(
    pair.decode,
    decodeBody(body, requestId, handle, false),
    signal,
  );
  if (!decode.ok) return decode;
  pair.metrics.noteDecode(prefill.result, decode.result);
  const merged = mergeAnswers(
    prefill.result,
    decode.result,
    requestId,
    body.kv_transfer_params ?? null,
  );
  const k = promptLogprobsK(body);
  if (k >= 0) {
    try {
      merged.promptLogprobs = decodePromptLogprobs(
        prefill.result.promptLogprobs,
        body.token_ids as number[],
        k,
      );
    } catch (error) {
      throw new RS_ERR_ROUTER_UPSTREAM('prefill', '', (error as Error).message);
    }
  }
  const contentType = form === 'msgpack' ? 'application/msgpack' : 'application/json';
  return { status: 200, contentType, body: encoder.encode(merged, form) };
}
