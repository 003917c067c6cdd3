/**
 * GET /metrics: the cluster's Prometheus text from the shared region (exposition.ts). The handler is
 * synchronous and reads only shared memory, so it answers as soon as this API server's event loop
 * reaches it, whatever the other processes are doing. /metrics stays open under --api-key (auth.ts).
 */
import type { FastifyInstance } from 'fastify';
import type { ClusterMetrics } from '../../../../obs/exposition.js';
import { PROMETHEUS_CONTENT_TYPE } from '../../../../obs/text-format.js';

/**
 * Names the API server that rendered the answer (any of them gives the same cluster figures); /health
 * carries it too.
 */
export const RENDERED_BY_HEADER = 'x-ringserve-api-server';

export function registerMetricsRoute(
  app: FastifyInstance,
  metrics: ClusterMetrics,
  server: number,
): void {
  const renderedBy = String(server);
  app.get('/metrics', (_request, reply) => {
    reply
      .header('content-type', PROMETHEUS_CONTENT_TYPE)
      .header(RENDERED_BY_HEADER, renderedBy)
      .send(metrics.render());
  });
}
