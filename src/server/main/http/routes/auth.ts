/**
 * Optional Bearer keys.
 *
 * - `--api-key` (env VLLM_API_KEY) guards the inference routes: every `/v1/...` route (as vLLM's
 *   --api-key does, so /v1/models too) and `/inference/v1/generate`.
 * - `--admin-api-key` (env RINGSERVE_ADMIN_API_KEY) guards the control routes (pause, resume,
 *   update_weights, reset_prefix_cache, abort_requests, init_broadcaster and the LoRA adapter
 *   loads, /v1/ ones included). When only --api-key is set, the control routes take that key:
 *   vLLM leaves them open, but a pause, a weight swap or an adapter load from anyone who can reach
 *   the port is a worse default than asking the one key the operator did set.
 * - /health, /liveness, /metrics and /load stay open (routers and orchestrators poll them; vLLM
 *   keeps them outside its key check too), and so do unknown routes outside /v1 (a plain 404).
 *
 * A route is classified by the route fastify matched, not by the raw URL, so no spelling of a path
 * (a query string, an encoded character) reaches a guarded handler unguarded. Keys are compared in
 * constant time (protocol/bearer.ts).
 */
import type { FastifyInstance } from 'fastify';
import type { RingserveConfig } from '../../../../config.js';
import { RS_ERR_AUTH_UNAUTHORIZED, toErrorBody } from '../../../../errors.js';
import { bearerMatches, keyDigest } from '../../../../protocol/bearer.js';

export const CONTROL_ROUTES: ReadonlySet<string> = new Set([
  '/pause',
  '/resume',
  '/update_weights',
  '/reset_prefix_cache',
  '/abort_requests',
  '/init_broadcaster',
  '/load_lora_adapter',
  '/v1/load_lora_adapter',
  '/v1/unload_lora_adapter',
]);

/** Which key a route needs. */
export const RouteClass = { Open: 0, Inference: 1, Control: 2 } as const;
export type RouteClassCode = (typeof RouteClass)[keyof typeof RouteClass];

/** `route` is the matched route's path (or, for an unknown route, the request path). */
export function classifyRoute(route: string): RouteClassCode {
  if (CONTROL_ROUTES.has(route)) return RouteClass.Control;
  if (route.startsWith('/v1/') || route.startsWith('/inference/')) return RouteClass.Inference;
  return RouteClass.Open;
}

export function registerAuth(app: FastifyInstance, config: RingserveConfig): void {
  const apiKey = config.apiKey === null ? null : keyDigest(config.apiKey);
  const adminKey = config.adminApiKey === null ? apiKey : keyDigest(config.adminApiKey);
  if (apiKey === null && adminKey === null) return;
  const unauthorized = toErrorBody(new RS_ERR_AUTH_UNAUTHORIZED());
  app.addHook('onRequest', async (request, reply) => {
    const route = request.routeOptions.url ?? request.url.split('?', 1)[0]!;
    const kind = classifyRoute(route);
    const expected =
      kind === RouteClass.Control ? adminKey : kind === RouteClass.Inference ? apiKey : null;
    if (expected === null || bearerMatches(request.headers.authorization, expected)) return;
    return reply.code(401).header('www-authenticate', 'Bearer').send(unauthorized);
  });
}
