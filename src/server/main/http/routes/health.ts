/**
 * Routes a router or orchestrator polls: /health, /liveness, /v1/models, /load. They read only
 * in-process state and the engine's heartbeat word, so they answer at once under any load. /health
 * names the API server that answered (x-ringserve-api-server).
 */
import type { FastifyInstance } from 'fastify';
import type { RingserveConfig } from '../../../../config.js';
import { RS_ERR_ENGINE_UNAVAILABLE, toErrorBody } from '../../../../errors.js';
import { API_SERVER_HEADER } from '../../../../protocol/api-server-header.js';
import type { EngineClient } from '../../engine-client.js';
import type { RequestCoordinator } from '../../request-coordinator.js';
import type { ServedModels } from '../../served-models.js';

export interface HealthDeps {
  config: RingserveConfig;
  engine: EngineClient;
  coordinator: RequestCoordinator;
  startedAt: number;
  log?: (line: string) => void;
}

export interface HealthRouteDeps extends HealthDeps {
  models: ServedModels;
}

export function registerHealthRoutes(app: FastifyInstance, deps: HealthRouteDeps): void {
  const { engine, coordinator } = deps;
  // Which API server answered, as on /metrics: a probe through the shared port can tell a
  // restarted server's answers from its siblings' (the soak's recovery check does).
  const answeredBy = String(engine.server);
  app.get('/health', async (_request, reply) => {
    reply.header(API_SERVER_HEADER, answeredBy);
    if (engine.alive() && !coordinator.draining) return reply.code(200).send();
    // Why, when the engine said (a bridge refusing an engine no vLLM layout fits, say): the
    // contract's error body; a bare 503 otherwise, as vLLM's /health answers.
    const reason = coordinator.draining ? null : engine.note().reason;
    if (reason === null) return reply.code(503).send();
    return reply.code(503).send(toErrorBody(new RS_ERR_ENGINE_UNAVAILABLE(reason)));
  });
  app.get('/liveness', async (_request, reply) => {
    if (engine.alive()) return reply.send({ status: 'ok' });
    return reply.code(503).send({ status: 'engine_unresponsive' });
  });
  app.get('/v1/models', async () => deps.models.list());
  app.get('/load', async () => ({ server_load: coordinator.table.active }));
}
