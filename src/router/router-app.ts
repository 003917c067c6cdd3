/**
 * The router's fastify instance: POST /inference/v1/generate through a prefill and a decode
 * instance (pd-proxy.ts, stream-merge.ts), its own GET /health (200 while at least one instance of
 * each role passes its health check) and GET /metrics. Bodies are JSON or msgpack; errors are the
 * contract's error body. With an API key, generate needs it as a Bearer key (401 otherwise), as a
 * server's inference routes do; /health and /metrics stay open for load balancers and scrapers.
 * An answer of 5xx the router makes itself (an instance unreachable, a merge that cannot be done) is
 * logged at warn; what instances answer is theirs to log.
 */
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import { unpack } from 'msgpackr';
import {
  RS_ERR_AUTH_UNAUTHORIZED,
  RS_ERR_HTTP_ROUTE_NOT_FOUND,
  RS_ERR_REQ_INVALID_BODY,
  RS_ERR_ROUTER_UPSTREAM,
  toErrorBody,
} from '../errors.js';
import type { Logger } from '../obs/log.js';
import { PROMETHEUS_CONTENT_TYPE } from '../obs/text-format.js';
import { bearerMatches, keyDigest } from '../protocol/bearer.js';
import { fail, isPlainObject } from '../protocol/fields.js';
import {
  callInstance,
  clientForm,
  decodeBody,
  GENERATE_PATH,
  type PdPair,
  postGenerate,
  prefillBody,
  proxyGenerate,
  requestIdFor,
} from './pd-proxy.js';
import { StreamMerger } from './stream-merge.js';

export interface RouterAppOptions {
  bodyLimitBytes: number;
  /** The Bearer key clients must send on the generate route; null: open. */
  apiKey: string | null;
  log: Logger;
}

export function buildRouterApp(pair: PdPair, options: RouterAppOptions): FastifyInstance {
  const { log } = options;
  const app = Fastify({
    logger: false,
    bodyLimit: options.bodyLimitBytes,
    keepAliveTimeout: 75_000,
    forceCloseConnections: true,
  });
  app.addContentTypeParser(
    ['application/msgpack', 'application/x-msgpack'],
    { parseAs: 'buffer' },
    (_r, body, done) => {
      try {
        done(null, unpack(body as Buffer));
      } catch (error) {
        done(new RS_ERR_REQ_INVALID_BODY(`msgpack: ${(error as Error).message}`), undefined);
      }
    },
  );
  if (options.apiKey !== null) {
    const expected = keyDigest(options.apiKey);
    const unauthorized = toErrorBody(new RS_ERR_AUTH_UNAUTHORIZED());
    app.addHook('onRequest', async (request, reply) => {
      if (request.routeOptions.url !== GENERATE_PATH) return;
      if (bearerMatches(request.headers.authorization, expected)) return;
      pair.metrics.noteAnswer(401);
      return reply.code(401).header('www-authenticate', 'Bearer').send(unauthorized);
    });
  }
  app.setErrorHandler((error, request, reply) => {
    const body = toErrorBody(error);
    pair.metrics.noteAnswer(body.error.code);
    if (body.error.code >= 500) {
      log.warn(
        {
          status: body.error.code,
          type: body.error.type,
          request_id: request.headers['x-request-id'],
        },
        body.error.message,
      );
    }
    reply.code(body.error.code).send(body);
  });
  app.setNotFoundHandler((request, reply) => {
    reply.code(404).send(toErrorBody(new RS_ERR_HTTP_ROUTE_NOT_FOUND(request.method, request.url)));
  });
  app.get('/health', async (_request, reply) => {
    const ok = pair.prefill.anyHealthy && pair.decode.anyHealthy;
    return reply.code(ok ? 200 : 503).send();
  });
  app.get('/metrics', async (_request, reply) =>
    reply.type(PROMETHEUS_CONTENT_TYPE).send(pair.metrics.text([pair.prefill, pair.decode])),
  );
  app.post(GENERATE_PATH, async (request, reply) => {
    const body = request.body;
    if (!isPlainObject(body)) throw new RS_ERR_REQ_INVALID_BODY('expected an object');
    const sp = body.sampling_params;
    if (sp !== undefined && sp !== null && !isPlainObject(sp))
      fail('sampling_params', 'must be an object');
    // As an instance answers it (generate-request.ts), before any instance does work for it.
    if (body.stream === true && isPlainObject(sp) && sp.prompt_logprobs != null)
      fail('sampling_params.prompt_logprobs', 'prompt logprobs are answered without stream only');
    const header = request.headers['x-request-id'];
    const requestId = requestIdFor(typeof header === 'string' ? header : undefined, body);
    const aborted = new AbortController();
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) aborted.abort();
    });
    if (body.stream === true) return streamGenerate(pair, body, requestId, reply, aborted.signal);
    const form = clientForm(request.headers.accept, body);
    const answer = await proxyGenerate(pair, body, requestId, form, aborted.signal);
    pair.metrics.noteAnswer(answer.status);
    return reply.code(answer.status).type(answer.contentType).send(answer.body);
  });
  return app;
}

/** Prefill (not streamed), then the decode stream re-written event by event. */
async function streamGenerate(
  pair: PdPair,
  body: Record<string, unknown>,
  requestId: string,
  reply: FastifyReply,
  signal: AbortSignal,
): Promise<FastifyReply> {
  const prefill = await callInstance(pair.prefill, prefillBody(body, requestId), signal);
  if (!prefill.ok) {
    pair.metrics.noteAnswer(prefill.status);
    return reply.code(prefill.status).type(prefill.contentType).send(prefill.body);
  }
  const p = prefill.result;
  const handle = p.kvTransferParams;
  const { upstream, res } = await postGenerate(
    pair.decode,
    decodeBody(body, requestId, handle, true),
    signal,
  );
  try {
    if (res.statusCode !== 200) {
      const bytes = Buffer.from(await res.body.arrayBuffer());
      pair.metrics.noteAnswer(res.statusCode);
      return reply.code(res.statusCode).type(String(res.headers['content-type'])).send(bytes);
    }
    const promptTokens = p.usage?.promptTokens ?? 0;
    const merger = new StreamMerger(
      requestId,
      body.packed === false,
      p.choices[0]?.routedExperts ?? null,
      promptTokens,
      p.usage?.cachedTokens ?? null,
    );
    reply.hijack();
    const raw = reply.raw;
    raw.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    pair.metrics.noteAnswer(200);
    for await (const chunk of res.body) {
      const out = merger.push(chunk as Buffer);
      if (out.length > 0 && !raw.write(out)) await onceDrained(raw, signal);
      if (merger.done) break;
    }
    if (!merger.done && !signal.aborted) {
      const cut = new RS_ERR_ROUTER_UPSTREAM(
        'decode',
        upstream.url,
        'its stream ended before [DONE]',
      );
      raw.write(merger.fail(cut));
    }
    raw.end();
    return reply;
  } catch (error) {
    if (reply.sent) {
      reply.raw.destroy();
      return reply;
    }
    throw error;
  } finally {
    pair.decode.release(upstream);
  }
}

function onceDrained(raw: NodeJS.WritableStream, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      raw.off('drain', done);
      signal.removeEventListener('abort', done);
      resolve();
    };
    raw.on('drain', done);
    signal.addEventListener('abort', done);
  });
}
