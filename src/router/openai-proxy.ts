/**
 * POST /v1/completions and /v1/chat/completions through the P/D pair, as vLLM's toy proxy does it
 * (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py): the prefill instance gets the
 * client's body with `kv_transfer_params: {"do_remote_decode": true}`, one token (`max_tokens`, and
 * chat's `max_completion_tokens`), no stream and `n` 1; the decode instance gets the client's body
 * with the prefill answer's `kv_transfer_params`, and its answer (JSON, or the event stream as it
 * comes) is the client's as is: these routes carry no routing rows to merge. An instance's error
 * answer is the client's too; one that cannot be reached is a 502.
 *
 * A completion of several prompts goes to the decode instance alone, which computes its prompts: a
 * handle names one prompt's KV (kv-transfer-params.ts), and a decode instance applies the
 * request's handle to each of its sequences.
 */
import { finished } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import { RS_ERR_REQ_INVALID_BODY, RS_ERR_ROUTER_UPSTREAM } from '../errors.js';
import { isPlainObject } from '../protocol/fields.js';
import { ClientCall } from './client-call.js';
import { callJson, callRaw } from './instance-call.js';
import type { PdPair } from './pd-proxy.js';
import type { UpstreamPool } from './upstreams.js';

type Body = Record<string, unknown>;
type Kind = 'completion' | 'chat';

const ROUTES: ReadonlyArray<readonly [string, Kind]> = [
  ['/v1/completions', 'completion'],
  ['/v1/chat/completions', 'chat'],
];

export function registerOpenAiProxy(
  app: FastifyInstance,
  pair: PdPair,
  inference: onRequestHookHandler[],
): void {
  for (const [route, kind] of ROUTES) {
    app.post(route, { onRequest: inference }, (request, reply) =>
      proxyOpenAi(pair, route, kind, request, reply),
    );
  }
}

/** The prefill call's body: one token kept for a decode instance, whole, once. */
export function openAiPrefillBody(body: Body, kind: Kind): Body {
  const out: Body = {
    ...body,
    stream: false,
    stream_options: null,
    n: 1,
    best_of: null,
    max_tokens: 1,
    min_tokens: 0,
    kv_transfer_params: { do_remote_decode: true },
  };
  if (kind === 'chat') out.max_completion_tokens = 1;
  return out;
}

/** How many prompts a completion body sends (a list of ids is one; a list of lists, several). */
export function promptCount(body: Body): number {
  const p = body.prompt;
  if (!Array.isArray(p) || p.length === 0) return 1;
  return typeof p[0] === 'number' ? 1 : p.length;
}

async function proxyOpenAi(
  pair: PdPair,
  route: string,
  kind: Kind,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const body = request.body;
  if (!isPlainObject(body)) throw new RS_ERR_REQ_INVALID_BODY('expected an object');
  // One request id for both calls, the session's instances, what is left of the deadline.
  const call = new ClientCall(request.headers, body);
  const aborted = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) aborted.abort();
  });
  let handle: unknown = null;
  if (kind === 'chat' || promptCount(body) === 1) {
    const headers = call.headers();
    const u = pair.prefill.acquire(call.session);
    try {
      const p = await callJson(pair.prefill, u.url, {
        method: 'POST',
        path: route,
        body: openAiPrefillBody(body, kind),
        headers,
        signal: aborted.signal,
      });
      if (p.status !== 200) {
        pair.metrics.noteAnswer(p.status);
        return reply.code(p.status).type(p.contentType).send(p.bytes);
      }
      if (!isPlainObject(p.body))
        throw new RS_ERR_ROUTER_UPSTREAM('prefill', u.url, 'its answer is not a JSON object');
      handle = p.body.kv_transfer_params ?? null;
    } finally {
      pair.prefill.release(u);
    }
  }
  return sendDecode(pair.decode, route, { ...body, kv_transfer_params: handle }, call, {
    reply,
    signal: aborted.signal,
    note: (status) => pair.metrics.noteAnswer(status),
  });
}

/** The decode call, its answer handed to the client as it comes; the instance released at its end. */
async function sendDecode(
  pool: UpstreamPool,
  route: string,
  body: Body,
  call: ClientCall,
  to: { reply: FastifyReply; signal: AbortSignal; note: (status: number) => void },
): Promise<FastifyReply> {
  const headers = call.headers();
  const u = pool.acquire(call.session);
  let res: Awaited<ReturnType<typeof callRaw>>;
  try {
    res = await callRaw(pool, u.url, {
      method: 'POST',
      path: route,
      body,
      headers,
      signal: to.signal,
    });
  } catch (error) {
    pool.release(u);
    throw error;
  }
  // Ended, failed or cut by the client (the abort destroys it): released once either way.
  finished(res.body, () => pool.release(u));
  to.note(res.statusCode);
  const contentType = String(res.headers['content-type'] ?? 'application/json');
  to.reply.code(res.statusCode).type(contentType);
  if (contentType.startsWith('text/event-stream')) to.reply.header('cache-control', 'no-cache');
  return to.reply.send(res.body);
}
