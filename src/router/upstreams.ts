/**
 * A role's instances (prefill or decode): each with its outstanding requests and its health. A
 * request without a session goes to the healthy instance with the fewest outstanding requests
 * (ties: the first listed), as vLLM's P/D proxies and llm-d's load-aware scorer balance; one with
 * a session key to its rendezvous choice among the healthy ones (affinity.ts). Health is GET
 * /health every `intervalMs` with a bound; an instance that fails it takes no new requests until it
 * passes again.
 *
 * Membership changes while serving (membership.ts): an instance added takes traffic once its first
 * health check passes; one removed is drained (no new requests) and dropped when its last
 * outstanding request is released.
 */
import { Agent, request } from 'undici';
import { RS_ERR_ROUTER_NO_INSTANCE } from '../errors.js';
import { hashKey, rendezvousScore } from './affinity.js';

export type Role = 'prefill' | 'decode';

export interface Upstream {
  readonly url: string;
  outstanding: number;
  healthy: boolean;
  /** Being removed: takes no new request, and is dropped once `outstanding` reaches 0. */
  draining: boolean;
  /** hashKey(url), its weight for session affinity. */
  readonly hash: number;
}

/** A base URL as the pool keeps it: without trailing slashes. */
export function normalizeUrl(url: string): string {
  return url.replace(/\/+$/, '');
}

export class UpstreamPool {
  readonly role: Role;
  /** Members in the order they were listed or added; draining ones included until dropped. */
  readonly instances: Upstream[];
  readonly dispatcher: Agent;
  /** The `authorization` header every generate call carries (`Bearer <key>`), or null. */
  readonly authorization: string | null;
  readonly #intervalMs: number;
  #timer: NodeJS.Timeout | null = null;
  /** Who waits for a draining instance to be dropped: called with true then, false on close. */
  readonly #drainWaiters = new Map<Upstream, Set<(dropped: boolean) => void>>();

  /** `apiKey`: the instances' Bearer key (the router's --upstream-api-key), or null. */
  constructor(
    role: Role,
    urls: readonly string[],
    intervalMs: number,
    apiKey: string | null = null,
  ) {
    this.role = role;
    this.authorization = apiKey === null ? null : `Bearer ${apiKey}`;
    // Listed at startup: trusted to take traffic before their first check answers.
    this.instances = urls.map((url) => member(url, true));
    this.#intervalMs = intervalMs;
    // Long RL rollouts: no body or headers timeout of undici's own; the router's bound is the client's.
    this.dispatcher = new Agent({ headersTimeout: 0, bodyTimeout: 0, connections: 1024 });
  }

  /**
   * An instance for a new request, counted as taken: with `session` (a client's X-Session-ID), its
   * rendezvous choice among the instances that take requests; without, the least outstanding.
   */
  acquire(session?: string): Upstream {
    const best = session === undefined ? this.#leastOutstanding() : this.#sessionChoice(session);
    if (best === null) throw new RS_ERR_ROUTER_NO_INSTANCE(this.role);
    best.outstanding++;
    return best;
  }

  release(u: Upstream): void {
    u.outstanding--;
    if (u.draining && u.outstanding <= 0) this.#drop(u);
  }

  /** Whether some instance takes requests (healthy, not draining). */
  get anyHealthy(): boolean {
    return this.instances.some(takesRequests);
  }

  find(url: string): Upstream | undefined {
    const key = normalizeUrl(url);
    return this.instances.find((u) => u.url === key);
  }

  /**
   * Adds an instance that takes no traffic until its first health check (done here, at once)
   * passes; resolves with it after that check, healthy or not. Later checks follow the pool's.
   */
  async add(url: string): Promise<Upstream> {
    const u = member(url, false);
    this.instances.push(u);
    await this.#check(u);
    return u;
  }

  /**
   * Stops sending `u` new requests and drops it once its outstanding ones are released: resolves
   * true when it is dropped, false if it still has some after `timeoutMs` (it stays draining, and
   * is dropped when they finish) or when the pool closes.
   */
  drain(u: Upstream, timeoutMs: number): Promise<boolean> {
    u.draining = true;
    if (u.outstanding <= 0) {
      this.#drop(u);
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const waiters = this.#drainWaiters.get(u) ?? new Set();
      this.#drainWaiters.set(u, waiters);
      const done = (dropped: boolean): void => {
        clearTimeout(timer);
        waiters.delete(done);
        resolve(dropped);
      };
      const timer = setTimeout(() => done(false), timeoutMs);
      waiters.add(done);
    });
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
    for (const waiters of this.#drainWaiters.values()) for (const done of [...waiters]) done(false);
    this.#drainWaiters.clear();
    await this.dispatcher.close();
  }

  #leastOutstanding(): Upstream | null {
    let best: Upstream | null = null;
    for (const u of this.instances) {
      if (takesRequests(u) && (best === null || u.outstanding < best.outstanding)) best = u;
    }
    return best;
  }

  #sessionChoice(session: string): Upstream | null {
    const h = hashKey(session);
    let best: Upstream | null = null;
    let bestScore = -1;
    for (const u of this.instances) {
      if (!takesRequests(u)) continue;
      const score = rendezvousScore(h, u.hash);
      // Ties (1 in 2^32 a pair) go to the smaller URL, so every router agrees.
      if (score > bestScore || (score === bestScore && best !== null && u.url < best.url)) {
        best = u;
        bestScore = score;
      }
    }
    return best;
  }

  #drop(u: Upstream): void {
    const i = this.instances.indexOf(u);
    if (i >= 0) this.instances.splice(i, 1);
    const waiters = this.#drainWaiters.get(u);
    this.#drainWaiters.delete(u);
    if (waiters !== undefined) for (const done of [...waiters]) done(true);
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

function member(url: string, healthy: boolean): Upstream {
  const key = normalizeUrl(url);
  return { url: key, outstanding: 0, healthy, draining: false, hash: hashKey(key) };
}

function takesRequests(u: Upstream): boolean {
  return u.healthy && !u.draining;
}
