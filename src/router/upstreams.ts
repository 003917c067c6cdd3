/**
 * A role's instances (prefill or decode): each with its outstanding requests and its health. A
 * request goes to the healthy instance with the fewest outstanding requests (ties: the first
 * listed), as vLLM's P/D proxies and llm-d's load-aware scorer balance. Health is GET /health
 * every `intervalMs` with a bound; an instance that fails it takes no new requests until it
 * passes again.
 */
import { Agent, request } from 'undici';
import { RS_ERR_ROUTER_NO_INSTANCE } from '../errors.js';

export type Role = 'prefill' | 'decode';

export interface Upstream {
  readonly url: string;
  outstanding: number;
  healthy: boolean;
}

export class UpstreamPool {
  readonly role: Role;
  readonly instances: Upstream[];
  readonly dispatcher: Agent;
  /** The `authorization` header every generate call carries (`Bearer <key>`), or null. */
  readonly authorization: string | null;
  readonly #intervalMs: number;
  #timer: NodeJS.Timeout | null = null;

  /** `apiKey`: the instances' Bearer key (the router's --upstream-api-key), or null. */
  constructor(
    role: Role,
    urls: readonly string[],
    intervalMs: number,
    apiKey: string | null = null,
  ) {
    this.role = role;
    this.authorization = apiKey === null ? null : `Bearer ${apiKey}`;
    this.instances = urls.map((url) => ({
      url: url.replace(/\/+$/, ''),
      outstanding: 0,
      healthy: true,
    }));
    this.#intervalMs = intervalMs;
    // Long RL rollouts: no body or headers timeout of undici's own; the router's bound is the client's.
    this.dispatcher = new Agent({ headersTimeout: 0, bodyTimeout: 0, connections: 1024 });
  }

  /** The healthy instance with the fewest outstanding requests, counted as taken. */
  acquire(): Upstream {
    let best: Upstream | null = null;
    for (const u of this.instances) {
      if (u.healthy && (best === null || u.outstanding < best.outstanding)) best = u;
    }
    if (best === null) throw new RS_ERR_ROUTER_NO_INSTANCE(this.role);
    best.outstanding++;
    return best;
  }

  release(u: Upstream): void {
    u.outstanding--;
  }

  get anyHealthy(): boolean {
    return this.instances.some((u) => u.healthy);
  }

  startHealthChecks(): void {
    const tick = (): void => {
      void Promise.all(this.instances.map((u) => this.#check(u))).finally(() => {
        if (this.#timer !== null) this.#timer = setTimeout(tick, this.#intervalMs);
      });
    };
    this.#timer = setTimeout(tick, 0);
  }

  async close(): Promise<void> {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    await this.dispatcher.close();
  }

  async #check(u: Upstream): Promise<void> {
    try {
      const res = await request(`${u.url}/health`, {
        dispatcher: this.dispatcher,
        signal: AbortSignal.timeout(Math.max(1000, this.#intervalMs)),
      });
      await res.body.dump();
      u.healthy = res.statusCode === 200;
    } catch {
      u.healthy = false;
    }
  }
}
