/**
 * The supervisor's restart paths: a crash loop backs off (200 ms doubling, in /metrics and the
 * log); a restarted engine comes back paused with the same weight version when the trainer had
 * paused it; SIGTERM while paused ends at once (requests on a paused engine can never finish), not
 * after --drain-timeout-s.
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { generate } from '../../src/client/index.js';
import { STAT_PAUSED, STAT_RUNNING, STAT_WEIGHT_VERSION } from '../../src/shm/layout.js';
import { until } from '../until.js';
import { genBody, post } from './control-helpers.js';
import { type Cluster, startCluster } from './harness.js';

async function status(url: string): Promise<number> {
  const res = await request(url);
  await res.body.dump();
  return res.statusCode;
}

async function metric(cluster: Cluster, series: string): Promise<number> {
  const res = await request(`${cluster.url}/metrics`);
  const text = await res.body.text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? Number.NaN : Number(line.slice(series.length + 1));
}

/** SIGKILLs the engine and resolves with the pid of the one that replaces it. */
async function killEngine(cluster: Cluster): Promise<number> {
  const pid = (await cluster.pids()).get('ringserve-engine')!;
  process.kill(pid, 'SIGKILL');
  const next = await until(
    async () => (await cluster.pids()).get('ringserve-engine'),
    (p) => p !== undefined && p !== pid,
    { timeoutMs: 30_000 },
  );
  expect(next).not.toBe(pid);
  return next!;
}

describe('restarts', () => {
  it('backs off a crash loop: 0.2 s, 0.4 s, 0.8 s, in /metrics and the log', async () => {
    const cluster = await startCluster(['--max-speed']);
    expect(await metric(cluster, 'ringserve_restarts_total{role="engine"}')).toBe(0);
    for (let i = 0; i < 3; i++) await killEngine(cluster);
    expect(await metric(cluster, 'ringserve_restarts_total{role="engine"}')).toBe(3);
    expect(await metric(cluster, 'ringserve_restart_backoff_seconds{role="engine"}')).toBe(0.8);
    expect(await metric(cluster, 'ringserve_restarts_total{role="api"}')).toBe(0);
    const delays = [...cluster.log().matchAll(/"backoff_ms":(\d+)/g)].map((m) => Number(m[1]));
    expect(delays).toEqual([200, 400, 800]);
    // And it serves again once the last one is up.
    await until(
      () => status(`${cluster.url}/health`),
      (s) => s === 200,
      { timeoutMs: 15_000 },
    );
    expect((await generate(cluster.url, genBody(5, 1))).choices[0]!.tokenIds.length).toBe(5);
  }, 90_000);

  it('counts an API server restart under role="api"', async () => {
    const cluster = await startCluster(['--max-speed', '--api-server-count', '2']);
    const victim = (await cluster.pids()).get('ringserve-api-1')!;
    process.kill(victim, 'SIGKILL');
    await until(
      async () => (await cluster.pids()).get('ringserve-api-1'),
      (p) => p !== undefined && p !== victim,
      { timeoutMs: 30_000 },
    );
    const restarts = await until(
      () => metric(cluster, 'ringserve_restarts_total{role="api"}'),
      (n) => n === 1,
    );
    expect(restarts).toBe(1);
    expect(await metric(cluster, 'ringserve_restart_backoff_seconds{role="api"}')).toBe(0.2);
  }, 90_000);

  it('brings a restarted engine back paused, with the weight version it had', async () => {
    const cluster = await startCluster(['--max-speed']);
    expect((await post(cluster, '/update_weights', { weight_dir: null })).status).toBe(200);
    expect((await post(cluster, '/update_weights', { weight_dir: null })).status).toBe(200);
    const version = cluster.engineStat(STAT_WEIGHT_VERSION);
    expect(version).toBeGreaterThanOrEqual(2);
    expect((await post(cluster, '/pause')).status).toBe(200);
    await killEngine(cluster);
    await until(
      () => status(`${cluster.url}/health`),
      (s) => s === 200,
      { timeoutMs: 15_000 },
    );
    expect(cluster.engineStat(STAT_PAUSED)).toBe(1);
    expect(cluster.engineStat(STAT_WEIGHT_VERSION)).toBe(version);
    // Paused: a request is admitted but makes no progress until the trainer resumes.
    const pending = generate(cluster.url, genBody(20, 3));
    await new Promise((r) => setTimeout(r, 500));
    expect(cluster.engineStat(STAT_RUNNING)).toBe(0);
    expect((await post(cluster, '/resume')).status).toBe(200);
    const r = await pending;
    expect(r.choices[0]!.tokenIds.length).toBe(20);
    expect(cluster.log()).toContain('"paused":true');
  }, 90_000);

  it('ends at once on SIGTERM while paused, answering in-flight requests 503', async () => {
    // A drain timeout far beyond the harness's 20 s SIGKILL bound: only the fix ends it cleanly.
    const cluster = await startCluster(['--drain-timeout-s', '600']);
    const pending = generate(cluster.url, genBody(3000, 4)).then(
      () => 0,
      (e: { status?: number }) => e.status ?? -1,
    );
    await until(
      () => cluster.engineStat(STAT_RUNNING),
      (n) => n === 1,
    );
    expect((await post(cluster, '/pause')).status).toBe(200);
    const exited = new Promise<[number | null, string | null]>((resolve) =>
      cluster.process.once('exit', (code, signal) => resolve([code, signal])),
    );
    await cluster.stop();
    expect(await pending).toBe(503);
    // Exit 0 by itself: the harness SIGKILLs a primary that has not ended 20 s after SIGTERM.
    expect(await exited).toEqual([0, null]);
  }, 90_000);
});
