/**
 * `ringserve router`: a P/D proxy in front of prefill and decode instances (docs/operating.md,
 * "Prefill/decode and the router"). Starts the health checks and the HTTP server; close() stops both, and answers any
 * DELETE /instances still waiting for a drain.
 */
import type { FastifyInstance } from 'fastify';
import type { Logger } from '../obs/log.js';
import { buildRouterApp } from './router-app.js';
import type { RouterConfig } from './router-config.js';
import { RouterMetrics } from './router-metrics.js';
import { registerRouterRoutes } from './router-routes.js';
import { UpstreamPool } from './upstreams.js';

export class Router {
  readonly #app: FastifyInstance;
  readonly #pools: UpstreamPool[];
  readonly #config: RouterConfig;

  constructor(config: RouterConfig, log: Logger) {
    this.#config = config;
    const { healthIntervalMs: every, upstreamApiKey: key } = config;
    const prefill = new UpstreamPool('prefill', config.prefill, every, key);
    const decode = new UpstreamPool('decode', config.decode, every, key);
    this.#pools = [prefill, decode];
    const pair = { prefill, decode, metrics: new RouterMetrics() };
    this.#app = buildRouterApp(pair, {
      bodyLimitBytes: config.bodyLimitMb * 1024 * 1024,
      apiKey: config.apiKey,
      mergeThreads: config.mergeThreads,
      log,
    });
    // Fan-out control routes, the OpenAI routes, membership and /liveness (router-routes.ts).
    registerRouterRoutes(this.#app, pair, {
      apiKey: config.apiKey,
      adminApiKey: config.adminApiKey,
      instanceDrainTimeoutMs: config.instanceDrainTimeoutS * 1000,
      log,
    });
  }

  /** Listens; resolves with the port. */
  async start(): Promise<number> {
    for (const pool of this.#pools) pool.startHealthChecks();
    await this.#app.listen({ host: this.#config.host, port: this.#config.port });
    const address = this.#app.server.address();
    return typeof address === 'object' && address !== null ? address.port : this.#config.port;
  }

  async close(): Promise<void> {
    await this.#app.close();
    for (const pool of this.#pools) await pool.close();
  }
}
