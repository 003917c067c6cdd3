/**
 * What the router-route tests share: fake instances (fastify servers that record each call and
 * answer what the test says), a router app built as `ringserve router` builds it (buildRouterApp,
 * then registerRouterRoutes), and the cleanup of both after each test, also when it fails.
 */
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { afterEach } from 'vitest';
import { silentLogger } from '../../src/obs/log.js';
import { buildRouterApp } from '../../src/router/router-app.js';
import { RouterMetrics } from '../../src/router/router-metrics.js';
import { registerRouterRoutes } from '../../src/router/router-routes.js';
import { UpstreamPool } from '../../src/router/upstreams.js';

const open: { close(): Promise<unknown> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

export interface SeenCall {
  method: string;
  url: string;
  body: unknown;
  authorization: string | undefined;
  headers: FastifyRequest['headers'];
}

/** Answers a call: anything fastify can send; the reply for status and headers. */
export type Handler = (request: FastifyRequest, reply: FastifyReply) => unknown;

export interface FakeInstance {
  url: string;
  seen: SeenCall[];
  /** Calls to `path` (without query string). */
  calls(path: string): SeenCall[];
}

/** A fake instance: `/health` 200 unless overridden, `routes` by path, anything else 404. */
export async function fakeInstance(routes: Record<string, Handler> = {}): Promise<FakeInstance> {
  const app = Fastify();
  const seen: SeenCall[] = [];
  app.all('/*', async (request, reply) => {
    const path = request.url.split('?', 1)[0]!;
    if (path !== '/health') {
      seen.push({
        method: request.method,
        url: request.url,
        body: request.body,
        authorization: request.headers.authorization,
        headers: request.headers,
      });
    }
    const handler = routes[path];
    if (handler !== undefined) return handler(request, reply);
    if (path === '/health') return '';
    return reply.code(404).send({ error: { message: `no ${path}`, code: 404 } });
  });
  open.push(app);
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return { url, seen, calls: (path) => seen.filter((c) => c.url.split('?', 1)[0] === path) };
}

/** A URL nothing listens on. */
export async function deadUrl(): Promise<string> {
  const closed = Fastify();
  const url = await closed.listen({ host: '127.0.0.1', port: 0 });
  await closed.close();
  return url;
}

export interface RouterOptions {
  apiKey?: string | null;
  adminApiKey?: string | null;
  upstreamApiKey?: string | null;
  drainTimeoutMs?: number;
  /** Run the pools' periodic health checks (every 100 ms). */
  checks?: boolean;
}

export interface TestRouter {
  app: FastifyInstance;
  prefill: UpstreamPool;
  decode: UpstreamPool;
}

/** The router app in front of the given instances, closed after the test. */
export function testRouter(
  prefillUrls: string[],
  decodeUrls: string[],
  options: RouterOptions = {},
): TestRouter {
  const every = options.checks === true ? 100 : 60_000;
  const key = options.upstreamApiKey ?? null;
  const prefill = new UpstreamPool('prefill', prefillUrls, every, key);
  const decode = new UpstreamPool('decode', decodeUrls, every, key);
  if (options.checks === true) for (const pool of [prefill, decode]) pool.startHealthChecks();
  const pair = { prefill, decode, metrics: new RouterMetrics() };
  const log = silentLogger();
  const apiKey = options.apiKey ?? null;
  const app = buildRouterApp(pair, { bodyLimitBytes: 1 << 20, apiKey, log });
  registerRouterRoutes(app, pair, {
    apiKey,
    adminApiKey: options.adminApiKey ?? null,
    instanceDrainTimeoutMs: options.drainTimeoutMs ?? 5_000,
    log,
  });
  open.push({ close: async () => Promise.all([app.close(), prefill.close(), decode.close()]) });
  return { app, prefill, decode };
}

/** A promise and the function that settles it, for holding a fake's answer until the test says. */
export function gate(): { wait: Promise<void>; open: () => void } {
  let open = (): void => {};
  const wait = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { wait, open };
}
