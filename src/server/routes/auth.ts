/**
 * Optional Bearer keys: --api-key guards the inference routes, --admin-api-key the control routes;
 * /health, /liveness and /metrics stay open. Keys are compared in constant time (over their SHA-256,
 * so unequal lengths take the same time too).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { RingserveConfig } from '../../config.js';
import { RS_ERR_AUTH_UNAUTHORIZED, toErrorBody } from '../../errors.js';

const OPEN_ROUTES = new Set(['/health', '/liveness', '/metrics']);
export const CONTROL_ROUTES = new Set([
  '/pause',
  '/resume',
  '/update_weights',
  '/reset_prefix_cache',
  '/abort_requests',
]);

const digest = (text: string): Buffer => createHash('sha256').update(text).digest();

function bearerMatches(request: FastifyRequest, expected: Buffer): boolean {
  const header = request.headers.authorization;
  if (typeof header !== 'string' || !header.startsWith('Bearer ')) return false;
  return timingSafeEqual(digest(header.slice(7)), expected);
}

export function registerAuth(app: FastifyInstance, config: RingserveConfig): void {
  const apiKey = config.apiKey === null ? null : digest(config.apiKey);
  const adminKey = config.adminApiKey === null ? null : digest(config.adminApiKey);
  if (apiKey === null && adminKey === null) return;
  app.addHook('onRequest', async (request, reply) => {
    const path = request.url.split('?', 1)[0]!;
    if (OPEN_ROUTES.has(path)) return;
    const expected = CONTROL_ROUTES.has(path) ? adminKey : apiKey;
    if (expected === null || bearerMatches(request, expected)) return;
    const body = toErrorBody(new RS_ERR_AUTH_UNAUTHORIZED());
    return reply.code(401).send(body);
  });
}
