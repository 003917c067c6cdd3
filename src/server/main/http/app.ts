/**
 * The fastify instance of one API server: body parsers (JSON and msgpack), the contract's error body
 * for every failure (never a 500 for bad input), 404 for unknown routes, and the routes (/metrics
 * renders the whole cluster's figures from the shared region: src/obs/exposition.ts).
 */
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import { unpack } from 'msgpackr';
import type { RingserveConfig } from '../../../config.js';
import {
  RS_ERR_HTTP_ROUTE_NOT_FOUND,
  RS_ERR_REQ_INVALID_BODY,
  toErrorBody,
} from '../../../errors.js';
import { ClusterMetrics } from '../../../obs/exposition.js';
import type { GenerateRequestOptions } from '../../../protocol/generate-request.js';
import { parseWithTokenIds } from '../../../protocol/json-token-ids.js';
import type { TokenizerPool } from '../../../tokenizer/pool.js';
import { MAX_TOP_LOGPROBS } from '../../../wire/sampling-check.js';
import { poolPromptTokenizer } from '../openai/pool-tokenizer.js';
import type { RequestCoordinator } from '../request-coordinator.js';
import { ServedModels } from '../served-models.js';
import { answerClientError } from './client-error.js';
import { FailureInjector } from './failure-injection.js';
import { registerAuth } from './routes/auth.js';
import { type ControlDeps, registerControlRoutes } from './routes/control.js';
import { GENERATE_PATH, registerGenerateRoute } from './routes/generate.js';
import { type HealthDeps, registerHealthRoutes } from './routes/health.js';
import { registerMetricsRoute } from './routes/metrics.js';
import { registerOpenAiRoutes } from './routes/openai.js';
import { registerTokenizeRoutes } from './routes/tokenize.js';

/** Seconds a client told 429 waits: long rollouts free slots every few seconds at worst. */
const RETRY_AFTER_S = '1';

export interface AppDeps extends HealthDeps, ControlDeps {
  config: RingserveConfig;
  coordinator: RequestCoordinator;
  requestOptions: GenerateRequestOptions;
  /** The served tokenizer (and its threads): /tokenize, /detokenize and the OpenAI routes. */
  tokenizers: TokenizerPool;
}

export function buildApp(deps: AppDeps): FastifyInstance {
  const app = Fastify({
    logger: false,
    bodyLimit: Math.floor(deps.config.bodyLimitMb * 1024 * 1024),
    // Keep-alive connections of a router outlive any one request; HTTP/1.1 pipelining is not used.
    keepAliveTimeout: 75_000,
    forceCloseConnections: true,
    return503OnClosing: true,
    clientErrorHandler: answerClientError,
    // A URL fastify cannot decode (`/%`) is refused before routing: the contract's body too.
    frameworkErrors: (error, _request, reply) => {
      const body = toErrorBody(error);
      (reply as FastifyReply).code(body.error.code).send(body);
    },
  });
  app.addContentTypeParser(
    ['application/msgpack', 'application/x-msgpack'],
    { parseAs: 'buffer' },
    (_request, body, done) => {
      try {
        done(null, unpack(body as Buffer));
      } catch (error) {
        done(new RS_ERR_REQ_INVALID_BODY(`msgpack: ${(error as Error).message}`), undefined);
      }
    },
  );
  // A control call (POST /pause ...) often comes with `Content-Type: application/json` and no body;
  // fastify's JSON parser would refuse it. An empty JSON body is "no body"; anything else is parsed by
  // fastify's own parser (prototype-poisoning protection included), unless the text cannot hold a
  // `__proto__` or `constructor` key (neither word, and no \u escape that could spell one): then
  // JSON.parse alone gives the same object without the parser's two regular-expression scans of
  // the whole body, and the generate route's prompt is read from the bytes straight into an
  // Int32Array (json-token-ids.ts). Invalid JSON goes to fastify's parser, for its coded 400.
  const json = app.getDefaultJsonParser('error', 'error');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    const bytes = body as Buffer;
    const value = bytes.length === 0 ? undefined : quickParse(bytes, request.url === GENERATE_PATH);
    if (bytes.length === 0 || value !== undefined) done(null, value);
    else json(request, bytes.toString('utf8'), done);
  });
  app.setErrorHandler((error, _request, reply) => {
    const body = toErrorBody(error);
    // 4xx and 503 are answers, counted in the metrics; only a 500 is a bug worth a stack trace.
    if (body.error.code === 500) {
      deps.log?.(`ringserve-api: ${(error as Error).stack ?? String(error)}`);
    }
    // A full queue is a moment, not a state: say when to come back (RFC 9110, Retry-After).
    if (body.error.code === 429) reply.header('retry-after', RETRY_AFTER_S);
    reply.code(body.error.code).send(body);
  });
  app.setNotFoundHandler((request, reply) => {
    const body = toErrorBody(new RS_ERR_HTTP_ROUTE_NOT_FOUND(request.method, request.url));
    reply.code(404).send(body);
  });
  registerAuth(app, deps.config);
  // The base model and the LoRA adapters the engine has loaded: what `model` may name.
  const models = new ServedModels(deps.config, () => deps.engine.note(), deps.startedAt);
  registerHealthRoutes(app, { ...deps, models });
  // One seeded draw sequence per API server, whichever inference route a request takes.
  const failures = new FailureInjector(deps.config, deps.engine.server);
  registerGenerateRoute(app, { ...deps, failures, models });
  registerControlRoutes(app, deps);
  registerTokenizeRoutes(app, { ...deps, models });
  registerOpenAiRoutes(app, {
    ...deps,
    failures,
    models,
    tokenizer: poolPromptTokenizer(deps.tokenizers),
    openaiOptions: {
      vocabSize: deps.requestOptions.vocabSize,
      maxModelLen: deps.requestOptions.maxModelLen,
      maxLogprobs: MAX_TOP_LOGPROBS,
    },
  });
  const { engine, config } = deps;
  registerMetricsRoute(
    app,
    new ClusterMetrics({
      region: engine.region,
      config,
      engineStats: () => engine.stats(),
      engineNote: () => engine.note(),
    }),
    engine.server,
  );
  return app;
}

/**
 * The body's value without fastify's parser, or undefined when that parser must answer: a key could
 * be `__proto__` or `constructor` (literally, or through a \u escape), or the text is not JSON.
 * JSON.parse never gives undefined, so undefined means only that.
 */
function quickParse(bytes: Buffer, generate: boolean): unknown {
  if (bytes.includes('__proto__') || bytes.includes('constructor') || bytes.includes('\\u')) {
    return undefined;
  }
  const body = generate ? parseWithTokenIds(bytes) : undefined;
  if (body !== undefined) return body;
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    return undefined;
  }
}
