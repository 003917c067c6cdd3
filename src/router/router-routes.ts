/**
 * The router's routes beside generate (router-app.ts): the control routes fanned out to every
 * instance and /v1/models (fan-out.ts), the OpenAI routes through the P/D pair (openai-proxy.ts),
 * membership and /liveness (membership.ts), each behind the key its class needs (route-keys.ts).
 * Registered on the app buildRouterApp made, before it listens.
 */
import type { FastifyInstance } from 'fastify';
import type { Logger } from '../obs/log.js';
import { registerFanOutRoutes } from './fan-out.js';
import { registerMembershipRoutes } from './membership.js';
import { registerOpenAiProxy } from './openai-proxy.js';
import type { PdPair } from './pd-proxy.js';
import { routeGuards } from './route-keys.js';

export interface RouterRoutesOptions {
  /** The client key (--api-key); null: open. */
  apiKey: string | null;
  /** --admin-api-key; null or absent: the client key. */
  adminApiKey?: string | null;
  /** --instance-drain-timeout-s in ms; default 300 s. */
  instanceDrainTimeoutMs?: number;
  log: Logger;
}

export function registerRouterRoutes(
  app: FastifyInstance,
  pair: PdPair,
  options: RouterRoutesOptions,
): void {
  const guards = routeGuards(
    { apiKey: options.apiKey, adminApiKey: options.adminApiKey ?? null },
    pair.metrics,
  );
  registerFanOutRoutes(app, pair, guards, options.log);
  registerOpenAiProxy(app, pair, guards.inference);
  registerMembershipRoutes(app, pair, {
    admin: guards.admin,
    drainTimeoutMs: options.instanceDrainTimeoutMs ?? 300_000,
    log: options.log,
  });
}
