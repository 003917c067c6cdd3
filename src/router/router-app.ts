/**
 * The router's fastify instance: POST /inference/v1/generate through a prefill and a decode
 * instance (pd-proxy.ts, stream-merge.ts), its own GET /health (200 while at least one instance of
 * each role passes its health check) and GET /metrics. Bodies are JSON or msgpack; errors are the
 * contract's error body. With an API key, generate needs it as a Bearer key (401 otherwise), as a
 * server's inference routes do; /health and /metrics stay open for load balancers and scrapers.
 * An answer of 5xx the router makes itself (an instance unreachable, a merge that cannot be done) is
 * logged at warn; what instances answer is theirs to log. Merges run in merge threads
 * (merge-pool.ts): this thread only moves bytes between sockets and threads.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { unpack } from 'msgpackr';
import {
  RS_ERR_AUTH_UNAUTHORIZED,
  RS_ERR_HTTP_ROUTE_NOT_FOUND,
  RS_ERR_REQ_INVALID_BODY,
  toErrorBody,
} from '../errors.js';
import type { Logger } from '../obs/log.js';
import { PROMETHEUS_CONTENT_TYPE } from '../obs/text-format.js';
import { bearerMatches, keyDigest } from '../protocol/bearer.js';
import { fail, isPlainObject } from '../protocol/fields.js';
import { ClientCall } from './client-call.js';
import { DEFAULT_MERGE_NICE, DEFAULT_MERGE_THREADS, MergePool } from './merge-pool.js';
import { clientForm, GENERATE_PATH, type PdPair, type PdWork, proxyGenerate } from './pd-proxy.js';
import type { RouterDrain } from './router-drain.js';
import { streamGenerate } from './stream-proxy.js';
import { TurnGate } from './turn-gate.js';

export interface RouterAppOptions {
  bodyLimitBytes: number;
  /** Counts requests and refuses them once the router drains (`ringserve router`'s SIGTERM). */
  drain?: RouterDrain;
  /** The Bearer key clients must send on the generate route; null: open. */
  apiKey: string | null;
  log: Logger;
  /** Merge threads, when `pair.merge` is not given (default DEFAULT_MERGE_THREADS, 1..64). */
  mergeThreads?: number;
  /** Their nice above the main thread's (default DEFAULT_MERGE_NICE, 0..19; 0: the same). */
  mergeNice?: number;
  /** Generate steps per turn of the event loop (turn-gate.ts; default STEPS_PER_TURN). */
  stepsPerTurn?: number;
}

/**
 * One step a turn: a step costs ~0.3-1 ms of this thread, mostly syscalls (a connect, the write of
 * an answer). With it and the accept hold, bench/router.ts's /health p99 stayed within 1.04x the
 * floor process's in 4 runs out of 4; without the gate, it ran past 500 ms in most runs.
 */
export const STEPS_PER_TURN = 1;

export function buildRouterApp(pair: PdPair, options: RouterAppOptions): FastifyInstance {
  const { log } = options;
  const app = Fastify({
    logger: false,
    bodyLimit: options.bodyLimitBytes,
    keepAliveTimeout: 75_000,
    forceCloseConnections: true,
  });
  options.drain?.attach(app);
  const work: PdWork = {
    merge: pair.merge ?? ownMergePool(app, options),
    turns: new TurnGate(options.stepsPerTurn ?? STEPS_PER_TURN),
  };
  app.server.on('connection', () => work.turns.noteAccept());
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
    // The request id, X-Session-ID and deadline both calls carry (a bad deadline: 400 here).
    const call = new ClientCall(request.headers, body);
    const aborted = new AbortController();
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) aborted.abort();
    });
    if (body.stream === true)
      return streamGenerate(pair, work, body, call, reply, aborted.signal, log);
    const form = clientForm(request.headers.accept, body);
    const answer = await proxyGenerate(pair, work, body, call, form, aborted.signal);
    pair.metrics.noteAnswer(answer.status);
    return reply.code(answer.status).type(answer.contentType).send(answer.body);
  });
  return app;
}

/** The app's own merge threads, closed with it. */
function ownMergePool(app: FastifyInstance, options: RouterAppOptions): MergePool {
  const merge = new MergePool({
    threads: options.mergeThreads ?? DEFAULT_MERGE_THREADS,
    priority: { nice: options.mergeNice ?? DEFAULT_MERGE_NICE, policy: 'other' },
  });
  app.addHook('onClose', () => merge.close());
  return merge;
}
