/**
 * `ringserve router`: a P/D proxy in front of prefill and decode instances (docs/operating.md,
 * "Prefill/decode and the router"). Starts the health checks and the HTTP server; drain() lets the
 * requests in flight finish first (router-drain.ts); close() stops both at once, and answers any
 * DELETE /instances still waiting for a drain.
 */
import type { FastifyInstance } from 'fastify';
import type { Logger } from '../obs/log.js';
import { buildRouterApp } from './router-app.js';
import type { RouterConfig } from './router-config.js';
import { RouterDrain } from './router-drain.js';
import { RouterMetrics } from './router-metrics.js';
import { registerRouterRoutes } from './router-routes.js';
import { UpstreamPool } from './upstreams.js';

export class Router {
  readonly #app: FastifyInstance;
  readonly #pools: UpstreamPool[];
  readonly #config: RouterConfig;
  readonly #drain = new RouterDrain();
  readonly #log: Logger;
  #closing: Promise<void> | null = null;

  constructor(config: RouterConfig, log: Logger) {
    this.#config = config;
    this.#log = log;
    const { healthIntervalMs: every, upstreamApiKey: key } = config;
    const prefill = new UpstreamPool('prefill', config.prefill, every, key);
    const decode = new UpstreamPool('decode', config.decode, every, key);
    this.#pools = [prefill, decode];
    const pair = { prefill, decode, metrics: new RouterMetrics() };
    this.#app = buildRouterApp(pair, {
      bodyLimitBytes: config.bodyLimitMb * 1024 * 1024,
      apiKey: config.apiKey,
      mergeThreads: config.mergeThreads,
      drain: this.#drain,
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

  /**
   * Stops listening and refuses new requests, waits up to `timeoutMs` for those in flight, then
   * closes; resolves with how many were cut at the timeout.
   */
  async drain(timeoutMs: number): Promise<number> {
    const inFlight = this.#drain.inFlight;
    this.#log.info({ in_flight: inFlight, drain_timeout_ms: timeoutMs }, 'draining');
    const cut = await this.#drain.drain(this.#app.server, timeoutMs);
    if (cut > 0)
      this.#log.warn(
        { in_flight: cut },
        'drain timeout: closing the connections of requests still in flight',
      );
    await this.close();
    return cut;
  }

  /** Closes at once (every connection with it); a second call gets the first one's promise. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await this.#app.close();
      for (const pool of this.#pools) await pool.close();
    })();
    return this.#closing;
  }
}
