/**
 * The control routes a trainer calls on "the server" (pause, resume, update_weights,
 * init_broadcaster, the LoRA loads, reset_prefix_cache), sent by the router to every instance of
 * both roles, with the body and query string as the client sent them and the router's upstream
 * key, and answered once every instance has answered:
 *
 * - all succeeded: 200 `{"status": "ok", "instances": [{url, role, status, body}, ...]}`, each
 *   instance's own answer (JSON or text) as its `body`;
 * - all refused it with one and the same 4xx (a 400 naming a field, an unknown adapter's 404): that
 *   status and the first instance's error, with `instances` beside it: the client's mistake, not an
 *   instance's fault;
 * - otherwise 502 naming each instance that failed and how, with `instances` beside the error.
 *
 * Every member is called, unhealthy and draining ones too: an instance that missed a weight swap
 * would serve the old weights, and the 502 says so. An instance listed under both roles is called
 * once. GET /v1/models asks the instances that take requests and lists their models once by id.
 */
import type { FastifyInstance, onRequestHookHandler } from 'fastify';
import { RS_ERR_ROUTER_FAN_OUT, toErrorBody } from '../errors.js';
import type { Logger } from '../obs/log.js';
import { callJson, errorBody } from './instance-call.js';
import type { PdPair } from './pd-proxy.js';
import type { UpstreamPool } from './upstreams.js';

export const FAN_OUT_ROUTES: readonly string[] = [
  '/pause',
  '/resume',
  '/update_weights',
  '/init_broadcaster',
  '/load_lora_adapter',
  '/v1/load_lora_adapter',
  '/v1/unload_lora_adapter',
  '/reset_prefix_cache',
];

/**
 * No bound of the router's own on these: a weight swap or a broadcaster rendezvous can take long
 * (prime-rl's client waits 720 s, large runs 7,200 s); the instances bound them
 * (--update-weights-timeout-s, the body's `timeout`) and the client bounds its call.
 */
const UNBOUNDED: ReadonlySet<string> = new Set(['/update_weights', '/init_broadcaster']);
/** The others answer within a step (pause, resume, reset) or an adapter's load (120 s bound). */
const CONTROL_TIMEOUT_MS = 300_000;

/** The router's bound on a fan-out route's calls; null: none (the client's). */
export function fanOutTimeoutMs(route: string): number | null {
  return UNBOUNDED.has(route) ? null : CONTROL_TIMEOUT_MS;
}
const MODELS_TIMEOUT_MS = 10_000;

export interface InstanceResult {
  url: string;
  role: string;
  /** The instance's HTTP status; null when it could not be reached. */
  status: number | null;
  /** Its answer (parsed JSON or text), or why it could not be reached. */
  body: unknown;
}

interface Target {
  url: string;
  role: string;
  pool: UpstreamPool;
}

/** Every member of both roles, once per URL (an instance listed as both is `prefill+decode`). */
function targets(pair: PdPair, onlyServing: boolean): Target[] {
  const byUrl = new Map<string, Target>();
  for (const pool of [pair.prefill, pair.decode]) {
    for (const u of pool.instances) {
      if (onlyServing && (!u.healthy || u.draining)) continue;
      const seen = byUrl.get(u.url);
      if (seen === undefined) byUrl.set(u.url, { url: u.url, role: pool.role, pool });
      else seen.role = `${seen.role}+${pool.role}`;
    }
  }
  return [...byUrl.values()];
}

async function callEach(
  list: readonly Target[],
  method: 'GET' | 'POST',
  path: string,
  body: unknown,
  timeoutMs: number | null,
): Promise<InstanceResult[]> {
  return Promise.all(
    list.map(async ({ url, role, pool }) => {
      try {
        const signal = timeoutMs === null ? undefined : AbortSignal.timeout(timeoutMs);
        const a = await callJson(pool, url, { method, path, body, signal });
        return { url, role, status: a.status, body: a.body };
      } catch (error) {
        return { url, role, status: null, body: (error as Error).message };
      }
    }),
  );
}

const ok = (r: InstanceResult): boolean => r.status !== null && r.status >= 200 && r.status < 300;

function describeFailure(r: InstanceResult): string {
  // Unreachable: the error's message names the role and URL already.
  if (r.status === null) return String(r.body);
  const b = r.body as { error?: { message?: unknown } } | string;
  const why = typeof b === 'string' ? b : b?.error?.message;
  const text = typeof why === 'string' && why !== '' ? `: ${why.slice(0, 200)}` : '';
  return `${r.role} ${r.url}: answered ${r.status}${text}`;
}

/** The answer to a fan-out: status and body (docs at the top of this file). */
export function fanOutAnswer(route: string, results: InstanceResult[]): [number, unknown] {
  const failed = results.filter((r) => !ok(r));
  if (failed.length === 0) return [200, { status: 'ok', instances: results }];
  const first = failed[0]!;
  const status = first.status;
  const sameClientError =
    failed.length === results.length &&
    status !== null &&
    status >= 400 &&
    status < 500 &&
    failed.every((r) => r.status === status);
  if (sameClientError) {
    const b = first.body as { error?: unknown };
    const error =
      typeof b === 'object' && b !== null && b.error !== undefined
        ? b.error
        : errorBody(status, String(first.body)).error;
    return [status, { error, instances: results }];
  }
  const error = new RS_ERR_ROUTER_FAN_OUT(
    route,
    failed.length,
    results.length,
    failed.map(describeFailure).join('; '),
  );
  return [502, { ...toErrorBody(error), instances: results }];
}

export function registerFanOutRoutes(
  app: FastifyInstance,
  pair: PdPair,
  guards: { admin: onRequestHookHandler[]; inference: onRequestHookHandler[] },
  log: Logger,
): void {
  for (const route of FAN_OUT_ROUTES) {
    app.post(route, { onRequest: guards.admin }, async (request, reply) => {
      const q = request.url.indexOf('?');
      const path = q < 0 ? route : `${route}${request.url.slice(q)}`;
      const timeout = fanOutTimeoutMs(route);
      const results = await callEach(targets(pair, false), 'POST', path, request.body, timeout);
      const [status, body] = fanOutAnswer(route, results);
      pair.metrics.noteAnswer(status);
      if (status >= 500) {
        const { message } = (body as { error: { message: string } }).error;
        log.warn({ status, route, code: RS_ERR_ROUTER_FAN_OUT.code }, message);
      }
      return reply.code(status).send(body);
    });
  }
  app.get('/v1/models', { onRequest: guards.inference }, async (_request, reply) => {
    const serving = targets(pair, true);
    const results = await callEach(
      serving.length > 0 ? serving : targets(pair, false),
      'GET',
      '/v1/models',
      undefined,
      MODELS_TIMEOUT_MS,
    );
    const answered = results.filter(ok);
    if (answered.length === 0) {
      const [status, body] = fanOutAnswer('/v1/models', results);
      pair.metrics.noteAnswer(status);
      return reply.code(status).send(body);
    }
    pair.metrics.noteAnswer(200);
    return reply.send({ object: 'list', data: uniqueModels(answered) });
  });
}

/** The model cards of every answer, the first of each id kept. */
function uniqueModels(answers: readonly InstanceResult[]): unknown[] {
  const byId = new Map<unknown, unknown>();
  for (const a of answers) {
    const data = (a.body as { data?: unknown })?.data;
    if (!Array.isArray(data)) continue;
    for (const card of data) {
      const id = (card as { id?: unknown })?.id;
      if (!byId.has(id)) byId.set(id, card);
    }
  }
  return [...byId.values()];
}
