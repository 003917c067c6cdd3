/**
 * Which key the router's own routes need, as a server's auth.ts classes its routes:
 *
 * - inference (`/v1/completions`, `/v1/chat/completions`, `/v1/models`): the client --api-key;
 * - admin (the fan-out control routes and `/instances`): --admin-api-key, else the --api-key, as a
 *   server's control routes take its only key: a pause, a weight swap or a membership change from
 *   anyone who reaches the port is a worse default than asking the one key the operator did set;
 * - /health, /liveness and /metrics stay open (load balancers and scrapers poll them).
 *
 * With no key at all the routes are open, which config's checkExposure allows only on loopback or
 * with --allow-unauthenticated. Each guard is a route-level onRequest hook, so it holds whatever
 * hooks or routes the app registers before or after it; keys compare in constant time.
 */
import type { onRequestHookHandler } from 'fastify';
import { RS_ERR_AUTH_UNAUTHORIZED, toErrorBody } from '../errors.js';
import { bearerMatches, keyDigest } from '../protocol/bearer.js';
import type { RouterMetrics } from './router-metrics.js';

export interface RouteKeys {
  /** The client key (--api-key); null: open. */
  apiKey: string | null;
  /** --admin-api-key; null: the client key. */
  adminApiKey: string | null;
}

export interface RouteGuards {
  /** Hooks for inference routes (empty: open). */
  inference: onRequestHookHandler[];
  /** Hooks for admin routes (empty: open). */
  admin: onRequestHookHandler[];
}

export function routeGuards(keys: RouteKeys, metrics: RouterMetrics): RouteGuards {
  const admin = keys.adminApiKey ?? keys.apiKey;
  return {
    inference: keys.apiKey === null ? [] : [guard(keys.apiKey, metrics)],
    admin: admin === null ? [] : [guard(admin, metrics)],
  };
}

function guard(key: string, metrics: RouterMetrics): onRequestHookHandler {
  const expected = keyDigest(key);
  const unauthorized = toErrorBody(new RS_ERR_AUTH_UNAUTHORIZED());
  return async (request, reply) => {
    if (bearerMatches(request.headers.authorization, expected)) return;
    metrics.noteAnswer(401);
    return reply.code(401).header('www-authenticate', 'Bearer').send(unauthorized);
  };
}
