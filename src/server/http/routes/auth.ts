/**
 * Optional Bearer keys.
 *
 * - `--api-key` (env VLLM_API_KEY) guards the inference routes: every `/v1/...` route (as vLLM's
 *   --api-key does, so /v1/models too) and `/inference/v1/generate`.
 * - `--admin-api-key` (env RINGSERVE_ADMIN_API_KEY) guards the control routes (pause, resume,
 *   update_weights, reset_prefix_cache, abort_requests). When only --api-key is set, the control
 *   routes take that key: vLLM leaves them open, but a pause or a weight swap from anyone who can
 *   reach the port is a worse default than asking the one key the operator did set.
 * - /health, /liveness, /metrics and /load stay open (routers and orchestrators poll them; vLLM
 *   keeps them outside its key check too), and so do unknown routes outside /v1 (a plain 404).
 *
 * A route is classified by the route fastify matched, not by the raw URL, so no spelling of a path
 * (a query string, an encoded character) reaches a guarded handler unguarded. Keys are compared in
 * constant time, over their SHA-256 so that unequal lengths take the same time too.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { RingserveConfig } from '../../../config.js';
import { RS_ERR_AUTH_UNAUTHORIZED, toErrorBody } from '../../../errors.js';

export const CONTROL_ROUTES: ReadonlySet<string> = new Set([
  '/pause',
  '/resume',
  '/update_weights',
  '/reset_prefix_cache',
  '/abort_requests',
]);

const digest = (text: string): Buffer => createHash('sha256').update(text).digest();

/** Which key a route needs. */
export const RouteClass = { Open: 0, Inference: 1, Control: 2 } as const;
export type RouteClassCode = (typeof RouteClass)[keyof typeof RouteClass];

/** `route` is the matched route's path (or, for an unknown route, the request path). */
export function classifyRoute(route: string): RouteClassCode {
  if (CONTROL_ROUTES.has(route)) return RouteClass.Control;
  if (route.startsWith('/v1/') || route.startsWith('/inference/')) return RouteClass.Inference;
  return RouteClass.Open;
}

/** The key in an `Authorization: Bearer <key>` header (scheme case-insensitive, RFC 7235), or null. */
function bearerKey(request: FastifyRequest): string | null {
  const header = request.headers.authorization;
  if (typeof header !== 'string' || header.length < 7) return null;
  if (header.slice(0, 7).toLowerCase() !== 'bearer ') return null;
  return header.slice(7).trim();
}

function keyMatches(request: FastifyRequest, expected: Buffer): boolean {
  const key = bearerKey(request);
  return key !== null && timingSafeEqual(digest(key), expected);
}

export function registerAuth(app: FastifyInstance, config: RingserveConfig): void {
  const apiKey = config.apiKey === null ? null : digest(config.apiKey);
  const adminKey = config.adminApiKey === null ? apiKey : digest(config.adminApiKey);
  if (apiKey === null && adminKey === null) return;
  const unauthorized = toErrorBody(new RS_ERR_AUTH_UNAUTHORIZED());
  app.addHook('onRequest', async (request, reply) => {
    const route = request.routeOptions.url ?? request.url.split('?', 1)[0]!;
    const kind = classifyRoute(route);
    const expected =
      kind === RouteClass.Control ? adminKey : kind === RouteClass.Inference ? apiKey : null;
    if (expected === null || keyMatches(request, expected)) return;
    return reply.code(401).header('www-authenticate', 'Bearer').send(unauthorized);
  });
}
