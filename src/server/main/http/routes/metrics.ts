/**
 * GET /metrics: the cluster's Prometheus text from the shared region (exposition.ts). The handler is
 * synchronous and reads only shared memory, so it answers as soon as this API server's event loop
 * reaches it, whatever the other processes are doing. /metrics stays open under --api-key (auth.ts).
 */
import type { FastifyInstance } from 'fastify';
import type { ClusterMetrics } from '../../../../obs/exposition.js';
import { PROMETHEUS_CONTENT_TYPE } from '../../../../obs/text-format.js';
import { API_SERVER_HEADER } from '../../../../protocol/api-server-header.js';

export function registerMetricsRoute(
  app: FastifyInstance,
  metrics: ClusterMetrics,
  server: number,
): void {
  const renderedBy = String(server);
  app.get('/metrics', (_request, reply) => {
    reply
      .header('content-type', PROMETHEUS_CONTENT_TYPE)
      .header(API_SERVER_HEADER, renderedBy)
      .send(metrics.render());
  });
}
