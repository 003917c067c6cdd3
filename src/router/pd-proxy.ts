/**
 * One request through the P/D pair, as vLLM's P/D proxies do it
 * (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py): the prefill instance gets the
 * request with max_tokens 1 and `kv_transfer_params: {"do_remote_decode": true}`, the decode
 * instance the same prompt with the handle the prefill answer returned; the answers are merged
 * (merge.ts) and written in the client's form with protocol/'s writers. The router asks both
 * instances for msgpack (raw bytes, no base64). Decoding, merging and encoding run in a merge
 * thread (merge-pool.ts, issue 32): this thread moves the answers' bytes there and the client's
 * back, and holds no per-token object.
 *
 * An instance's error answer (4xx, 503, ...) is the client's answer, status and body as sent; an
 * instance that cannot be reached or answers something that does not decode is a 502.
 */
import { pack } from 'msgpackr';
import { request } from 'undici';
import { RS_ERR_ROUTER_UPSTREAM } from '../errors.js';
import type { ResponseForm } from '../protocol/generate-response.js';
import type { ClientCall } from './client-call.js';
import { KvOutcome, type MergeSpec } from './merge-messages.js';
import type { MergeJob, MergePool } from './merge-pool.js';
import type { RouterMetrics } from './router-metrics.js';
import type { TurnGate } from './turn-gate.js';
import type { Upstream, UpstreamPool } from './upstreams.js';

export const GENERATE_PATH = '/inference/v1/generate';

type Body = Record<string, unknown>;

/** An instance's answer: its bytes when 200 (for a merge thread), else passed through as is. */
export type UpstreamAnswer =
  | { ok: true; url: string; contentType: string; bytes: Uint8Array }
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
  /** The merge threads; absent: buildRouterApp starts its own (RouterAppOptions.mergeThreads). */
  merge?: MergePool;
}

/** What the generate route works with beside the pair: merge threads, and turns of the loop. */
export interface PdWork {
  merge: MergePool;
  /** Each step (a call sent, an answer written) passes it first. */
  turns: TurnGate;
}

/** The client's form (docs/contract.md): msgpack when accepted, legacy when `"packed": false`. */
export function clientForm(accept: string | undefined, body: Body): ResponseForm {
  if (accept?.includes('application/msgpack')) return 'msgpack';
  return body.packed === false ? 'legacy' : 'packed';
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

/**
 * POSTs a generate body to an instance of `pool` for msgpack or SSE: the client's session's
 * instance when it has one, else the one with the fewest outstanding requests; with what is left
 * of the client's deadline (client-call.ts, which throws the 504 when nothing is).
 */
export async function postGenerate(
  pool: UpstreamPool,
  body: Body,
  signal: AbortSignal,
  call: ClientCall,
): Promise<{ upstream: Upstream; res: Awaited<ReturnType<typeof request>> }> {
  const callHeaders = call.headers();
  const upstream = pool.acquire(call.session);
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
        ...callHeaders,
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

/** A non-streamed call: the answer's bytes, or the instance's error answer. */
export async function callInstance(
  pool: UpstreamPool,
  body: Body,
  signal: AbortSignal,
  call: ClientCall,
): Promise<UpstreamAnswer> {
  const { upstream, res } = await postGenerate(pool, body, signal, call);
  try {
    // A fresh ArrayBuffer of the body's length (undici copies the chunks once): movable as is.
    const bytes = new Uint8Array(await res.body.arrayBuffer());
    const contentType = String(res.headers['content-type'] ?? 'application/json');
    if (res.statusCode !== 200)
      return { ok: false, status: res.statusCode, contentType, body: Buffer.from(bytes.buffer) };
    return { ok: true, url: upstream.url, contentType, bytes };
  } catch (error) {
    throw new RS_ERR_ROUTER_UPSTREAM(pool.role, upstream.url, (error as Error).message);
  } finally {
    pool.release(upstream);
  }
}

/** What the merge thread needs of the client's request, sent with the prefill answer. */
export function mergeSpec(
  body: Body,
  requestId: string,
  form: ResponseForm,
  stream: boolean,
): MergeSpec {
  const k = promptLogprobsK(body);
  return {
    requestId,
    form,
    stream,
    clientKv: body.kv_transfer_params ?? null,
    promptLogprobsK: k,
    promptTokenIds: k >= 0 ? (body.token_ids as number[]) : null,
  };
}

/** The decode instance's way to the prompt's KV, counted in the router's metrics. */
export function noteKv(metrics: RouterMetrics, kv: KvOutcome): void {
  if (kv === KvOutcome.Imported) metrics.imported++;
  else if (kv === KvOutcome.Recomputed) metrics.recomputed++;
}

/** Prefill then decode, merged in a merge thread, for a non-streamed request. */
export async function proxyGenerate(
  pair: PdPair,
  work: PdWork,
  body: Body,
  call: ClientCall,
  form: ResponseForm,
  signal: AbortSignal,
): Promise<ProxyReply> {
  const job = work.merge.open();
  try {
    return await mergedAnswer(pair, work.turns, job, body, call, form, signal);
  } finally {
    job.close();
  }
}

async function mergedAnswer(
  pair: PdPair,
  turns: TurnGate,
  job: MergeJob,
  body: Body,
  call: ClientCall,
  form: ResponseForm,
  signal: AbortSignal,
): Promise<ProxyReply> {
  const requestId = call.requestId;
  await turns.pass();
  const prefill = await callInstance(
    pair.prefill,
    prefillBody(body, requestId, form),
    signal,
    call,
  );
  if (!prefill.ok) return prefill;
  const spec = mergeSpec(body, requestId, form, false);
  const handle = await job.prefill(prefill.bytes, prefill.contentType, prefill.url, spec);
  await turns.pass();
  const decode = await callInstance(
    pair.decode,
    decodeBody(body, requestId, handle, false),
    signal,
    call,
  );
  if (!decode.ok) return decode;
  const { body: answer, kv } = await job.merge(decode.bytes, decode.contentType, decode.url);
  noteKv(pair.metrics, kv);
  // The caller sends it in this step.
  await turns.pass();
  const contentType = form === 'msgpack' ? 'application/msgpack' : 'application/json';
  return { status: 200, contentType, body: answer };
}
