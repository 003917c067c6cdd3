/**
 * The router's drain (SIGTERM): it stops listening, so new connections go to the balancer's other
 * routers; a request that still comes on an open keep-alive connection gets a 503
 * (`RS_ERR_SERVER_DRAINING`, `Retry-After`, `Connection: close`) that the client can retry
 * elsewhere, `/health` included, so a balancer checking on such a connection takes the router out;
 * `/metrics` and `/liveness` still answer. Requests in flight run on, each with its prefill and
 * decode calls, for up to `--drain-timeout-s`; once they are answered, or at the timeout, every
 * connection still open is closed (those of requests still running are cut, their instance calls
 * aborted with them).
 */
import type { Server } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { RS_ERR_SERVER_DRAINING, toErrorBody } from '../errors.js';

/** Routes a draining router still answers: what is watching it, not what it serves. */
const OPEN_WHILE_DRAINING = new Set(['/metrics', '/liveness']);
/** The Retry-After of a draining router's 503, in seconds. */
const RETRY_AFTER_S = 1;

export class RouterDrain {
  #draining = false;
  #inFlight = 0;
  #settled: (() => void) | null = null;
  readonly #refusal = toErrorBody(new RS_ERR_SERVER_DRAINING());

  /** Counts the app's requests and refuses new ones once draining: before the app's other hooks. */
  attach(app: FastifyInstance): void {
    app.addHook('onRequest', async (request, reply) => {
      if (this.#draining && !OPEN_WHILE_DRAINING.has(request.url.split('?', 1)[0]!)) {
        reply.header('retry-after', String(RETRY_AFTER_S)).header('connection', 'close');
        return reply.code(503).send(this.#refusal);
      }
      this.#inFlight++;
      // 'close' comes once the answer is sent or the client is gone, hijacked streams included.
      reply.raw.once('close', () => {
        this.#inFlight--;
        if (this.#inFlight === 0) this.#settled?.();
      });
    });
  }

  /** Requests being answered now. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /**
   * Stops `server` listening and refuses new requests; resolves once the requests in flight are
   * answered, or when `timeoutMs` ends, with how many were still running then.
   */
  async drain(server: Server, timeoutMs: number): Promise<number> {
    this.#draining = true;
    // Also closes the connections idle now (Node >= 19); a busy one stays open, and the request
    // it carries next gets the 503.
    server.close();
    if (this.#inFlight > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        this.#settled = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.#settled = null;
    }
    return this.#inFlight;
  }
}
