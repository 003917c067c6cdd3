/**
 * Every ringserve metric ops/grafana/ringserve.json queries exists on a running node's /metrics
 * (HAProxy's names are checked against its exporter by test/ops/netns.test.ts), so a rename in
 * src/obs/families.ts breaks this test rather than the dashboard.
 */
import { request } from 'undici';
import { expect, it } from 'vitest';
import { startCluster } from '../cluster/harness.js';
import { dashboardMetricNames, exposedNames } from './dashboard-names.js';

it('every ringserve metric the dashboard queries is on /metrics', async () => {
  const cluster = await startCluster(['--model', 'tiny', '--max-speed']);
  // One answer, so that every histogram and counter has been written at least once.
  const answer = await request(`${cluster.url}/inference/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ token_ids: [1, 2, 3], sampling_params: { max_tokens: 4 } }),
  });
  expect(answer.statusCode).toBe(200);
  await answer.body.dump();
  const metrics = await request(`${cluster.url}/metrics`);
  const exposed = exposedNames(await metrics.body.text());
  const { ringserve } = dashboardMetricNames();
  expect(ringserve.length).toBeGreaterThan(10);
  expect(ringserve.filter((name) => !exposed.has(name))).toEqual([]);
  await cluster.stop();
});
