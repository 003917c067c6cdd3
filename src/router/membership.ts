/**
 * Instances added and removed while the router serves, and what it knows of them:
 *
 * - `POST /instances {"role", "url"}`: the instance is health-checked at once and takes traffic
 *   once that check passes: 200 `{"status": "ok", ..., "healthy": true}` when it did, 202
 *   `{"status": "pending", ..., "healthy": false}` when not yet (the periodic checks bring it in).
 *   A member already serving is a 200 with `"added": false`.
 * - `DELETE /instances {"role", "url"}` (or `?role=&url=`): the instance takes no new requests and
 *   the answer waits for its outstanding ones (--instance-drain-timeout-s): 200 once it is dropped,
 *   else 503 naming it and its requests still in flight; it stays draining and is dropped when they
 *   finish, so the call can be repeated. The last instance of a role is not removed (409).
 * - `GET /liveness`: 200 while the router runs, with each role's members and their state.
 *
 * The admin key guards the first two (route-keys.ts); /liveness is open, as /health is.
 */
import type { FastifyInstance, FastifyReply, onRequestHookHandler } from 'fastify';
import {
  RS_ERR_ROUTER_DRAIN_TIMEOUT,
  RS_ERR_ROUTER_INSTANCE_CONFLICT,
  RS_ERR_ROUTER_INSTANCE_NOT_FOUND,
  toErrorBody,
} from '../errors.js';
import type { Logger } from '../obs/log.js';
import { fail, isPlainObject } from '../protocol/fields.js';
import type { PdPair } from './pd-proxy.js';
import { normalizeUrl, type Role, type UpstreamPool } from './upstreams.js';

export interface MembershipOptions {
  admin: onRequestHookHandler[];
  /** How long DELETE waits for a removed instance's outstanding requests. */
  drainTimeoutMs: number;
  log: Logger;
}

/** The role and URL a membership call names, from its body or its query string. */
function readMember(body: unknown, query: unknown): { role: Role; url: string } {
  const from = isPlainObject(body) ? body : isPlainObject(query) ? query : {};
  const { role, url } = from;
  if (role !== 'prefill' && role !== 'decode') fail('role', 'must be "prefill" or "decode"');
  if (typeof url !== 'string' || !/^https?:\/\/[^/\s]+/.test(url))
    fail('url', 'must be an http(s) base URL (http://host:port)');
  return { role, url: normalizeUrl(url) };
}

function poolOf(pair: PdPair, role: Role): UpstreamPool {
  return role === 'prefill' ? pair.prefill : pair.decode;
}

export function registerMembershipRoutes(
  app: FastifyInstance,
  pair: PdPair,
  options: MembershipOptions,
): void {
  const { log } = options;
  const answer = (reply: FastifyReply, status: number, body: unknown): FastifyReply => {
    pair.metrics.noteAnswer(status);
    return reply.code(status).send(body);
  };

  app.post('/instances', { onRequest: options.admin }, async (request, reply) => {
    const { role, url } = readMember(request.body, request.query);
    const pool = poolOf(pair, role);
    const member = pool.find(url);
    if (member?.draining === true) {
      const message = `${role} instance ${url} is being removed: add it again once its DELETE answered`;
      return answer(reply, 409, toErrorBody(new RS_ERR_ROUTER_INSTANCE_CONFLICT(message)));
    }
    if (member !== undefined) {
      return answer(reply, 200, { status: 'ok', role, url, healthy: member.healthy, added: false });
    }
    const u = await pool.add(url);
    log.info({ role, url, healthy: u.healthy }, 'instance added');
    const status = u.healthy ? 'ok' : 'pending';
    return answer(reply, u.healthy ? 200 : 202, {
      status,
      role,
      url,
      healthy: u.healthy,
      added: true,
    });
  });

  app.delete('/instances', { onRequest: options.admin }, async (request, reply) => {
    const { role, url } = readMember(request.body, request.query);
    const pool = poolOf(pair, role);
    const u = pool.find(url);
    if (u === undefined)
      return answer(reply, 404, toErrorBody(new RS_ERR_ROUTER_INSTANCE_NOT_FOUND(role, url)));
    if (!u.draining && !pool.instances.some((o) => o !== u && !o.draining)) {
      const message = `${url} is the last ${role} instance: add another before removing it`;
      return answer(reply, 409, toErrorBody(new RS_ERR_ROUTER_INSTANCE_CONFLICT(message)));
    }
    log.info({ role, url, outstanding: u.outstanding }, 'instance draining');
    if (await pool.drain(u, options.drainTimeoutMs)) {
      log.info({ role, url }, 'instance removed');
      return answer(reply, 200, { status: 'ok', role, url, removed: true });
    }
    const error = new RS_ERR_ROUTER_DRAIN_TIMEOUT(
      role,
      url,
      u.outstanding,
      options.drainTimeoutMs / 1000,
    );
    log.warn({ role, url, outstanding: u.outstanding, code: error.code }, error.message);
    return answer(reply, 503, toErrorBody(error));
  });

  app.get('/liveness', async () => {
    const roles = { prefill: roleState(pair.prefill), decode: roleState(pair.decode) };
    const serving = roles.prefill.healthy > 0 && roles.decode.healthy > 0;
    return { status: serving ? 'ok' : 'degraded', ...roles };
  });
}

/** A role's members for /liveness: counts, then each with its state. */
function roleState(pool: UpstreamPool) {
  const instances = pool.instances.map((u) => ({
    url: u.url,
    healthy: u.healthy,
    draining: u.draining,
    outstanding: u.outstanding,
  }));
  return {
    healthy: instances.filter((u) => u.healthy && !u.draining).length,
    draining: instances.filter((u) => u.draining).length,
    instances,
  };
}
