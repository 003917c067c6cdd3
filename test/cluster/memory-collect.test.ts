/**
 * SIGUSR2 makes every ringserve process collect its garbage in every thread and trim malloc
 * (src/obs/memory-collect.ts), as the soak asks before its readings at rest: each process logs
 * "memory collected" with every one of its other threads answering, and keeps serving. The router
 * and the headless vLLM engine do the same (without a handler the signal would end them).
 */
import { request } from 'undici';
import { expect, it } from 'vitest';
import { until } from '../until.js';
import { startCluster } from './harness.js';
import { startRouter } from './pd-helpers.js';
import { healthStatus, startBridgeCluster, startHeadlessEngine } from './vllm-engine-pair.js';

interface Collected {
  pid: number;
  name: string;
  threads: number;
  threads_answered: number;
  main_heap_total_mb: [number, number];
  rss_mb: [number, number];
  malloc_mb: [number, number];
  malloc_arenas_mb: [number, number][];
  main_array_buffers_mb: number;
  main_v8_malloced_mb: number;
  threads_array_buffers_mb: number;
  threads_v8_malloced_mb: number;
}

it('SIGUSR2: the primary, the engine and each API server collect in every thread, and serve on', async () => {
  const cluster = await startCluster([
    '--max-speed',
    '--api-server-count',
    '2',
    // Above info: the report answers the signal whatever the level.
    '--log-level',
    'warn',
  ]);
  try {
    const generate = () => generateOnce(cluster.url);
    // Every path has run (packers included), then the cluster is idle.
    for (let i = 0; i < 8; i++) expect(await generate()).toBe(200);
    await new Promise((r) => setTimeout(r, 300));

    const pids = await cluster.pids();
    const all = [cluster.process.pid!, ...pids.values()];
    expect(all).toHaveLength(4);
    const seen = await collectIn(cluster.log, all);
    expect(seen.map((c) => c.pid).sort()).toEqual([...all].sort());
    for (const c of seen) {
      // Nobody was waited for in vain: each thread answered.
      expect(c.threads_answered).toBe(c.threads);
      expect(c.rss_mb[1]).toBeGreaterThan(0);
      // glibc's heap after the trim: allocated within held, arena by arena.
      expect(c.malloc_mb[0]).toBeGreaterThan(0);
      expect(c.malloc_mb[0]).toBeLessThanOrEqual(c.malloc_mb[1]);
      expect(c.malloc_arenas_mb.length).toBeGreaterThan(0);
      for (const [inUse, held] of c.malloc_arenas_mb) expect(inUse).toBeLessThanOrEqual(held);
      // Of what glibc counts as allocated: the main isolate's array buffers and V8's own malloc.
      expect(c.main_array_buffers_mb).toBeGreaterThanOrEqual(0);
      expect(c.main_v8_malloced_mb).toBeGreaterThan(0);
      expect(c.main_array_buffers_mb + c.main_v8_malloced_mb).toBeLessThanOrEqual(c.malloc_mb[0]);
      // The other threads' isolates (pino's log thread at least): V8's malloc is never nothing.
      expect(c.threads_v8_malloced_mb).toBeGreaterThan(0);
      expect(c.threads_array_buffers_mb).toBeGreaterThanOrEqual(0);
    }
    // --malloc-arena-max (2): the children started with MALLOC_ARENA_MAX, and so did the primary
    // where Node can restart it with the variable set (process.execve; not Node 20). The next test
    // shows what the children have without it.
    const primaryCapped = typeof (process as { execve?: unknown }).execve === 'function';
    for (const c of seen.filter((s) => primaryCapped || s.pid !== cluster.process.pid)) {
      expect(c.malloc_arenas_mb.length).toBeLessThanOrEqual(2);
    }
    // An API server's threads: its output worker, pino's log thread, its packers.
    for (const c of seen.filter((s) => s.name === 'ringserve-api')) {
      expect(c.threads).toBeGreaterThanOrEqual(4);
    }
    // The others have pino's log thread at least.
    for (const c of seen.filter((s) => s.name !== 'ringserve-api')) {
      expect(c.threads).toBeGreaterThanOrEqual(1);
    }
    // Nobody died of the signal.
    expect((await cluster.pids()).size).toBe(3);
    for (let i = 0; i < 4; i++) expect(await generate()).toBe(200);
  } finally {
    await cluster.stop();
  }
}, 120_000);

it('SIGUSR2: the router and the headless vLLM engine collect too, and serve on', async () => {
  const { cluster, endpoint } = await startBridgeCluster(['--model', 'tiny', '--max-speed']);
  try {
    const engine = startHeadlessEngine(endpoint, ['--model', 'tiny', '--max-speed'], true);
    let engineLog = '';
    engine.stdout?.on('data', (chunk: Buffer) => {
      engineLog += chunk.toString();
    });
    await until(
      () => healthStatus(cluster),
      (status) => status === 200,
      { timeoutMs: 30_000 },
    );
    const router = await startRouter([cluster.url], [cluster.url]);
    await until(
      () => healthStatus(router),
      (status) => status === 200,
      { timeoutMs: 30_000 },
    );
    // Both log threads are up (they write the processes' first records), so both answer.
    await until(
      () => ({
        router: router.log().includes('"router ready"'),
        engine: engineLog.includes('"msg"'),
      }),
      (up) => up.router && up.engine,
      { timeoutMs: 30_000, what: 'the first log records of the router and the engine' },
    );

    process.kill(router.pid, 'SIGUSR2');
    process.kill(engine.pid!, 'SIGUSR2');
    const [routerSeen] = await until(
      () => collected(router.log()),
      (c) => c.length === 1,
      { timeoutMs: 20_000 },
    );
    const [engineSeen] = await until(
      () => collected(engineLog),
      (c) => c.length === 1,
      { timeoutMs: 20_000 },
    );
    expect(routerSeen).toMatchObject({ pid: router.pid, name: 'ringserve-router' });
    expect(engineSeen).toMatchObject({ pid: engine.pid, name: 'ringserve-vllm-engine' });
    for (const c of [routerSeen!, engineSeen!]) {
      // pino's log thread at least, and it answered.
      expect(c.threads).toBeGreaterThanOrEqual(1);
      expect(c.threads_answered).toBe(c.threads);
    }
    // Both live on: the engine serves the bridge, the router sees its instances.
    expect(router.crashed()).toBe(false);
    expect(engine.exitCode).toBeNull();
    expect(await healthStatus(router)).toBe(200);
    const res = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ token_ids: [1, 2, 3], sampling_params: { max_tokens: 20 } }),
    });
    await res.body.dump();
    expect(res.statusCode).toBe(200);
  } finally {
    await cluster.stop();
  }
}, 120_000);

it.skipIf(process.env.MALLOC_ARENA_MAX !== undefined)(
  "with --malloc-arena-max 0 the children keep glibc's own arena limit (more than 2 arenas)",
  async () => {
    const cluster = await startCluster([
      '--max-speed',
      '--malloc-arena-max',
      '0',
      '--log-level',
      'warn',
    ]);
    try {
      for (let i = 0; i < 8; i++) expect(await generateOnce(cluster.url)).toBe(200);
      const children = [...(await cluster.pids()).values()];
      const seen = await collectIn(cluster.log, children);
      expect(Math.max(...seen.map((c) => c.malloc_arenas_mb.length))).toBeGreaterThan(2);
    } finally {
      await cluster.stop();
    }
  },
  120_000,
);

/** A 200-token generate with logprobs (every output path runs); its status. */
async function generateOnce(url: string): Promise<number> {
  const res = await request(`${url}/inference/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      token_ids: [1, 2, 3],
      sampling_params: { max_tokens: 200, ignore_eos: true, logprobs: 1 },
    }),
  });
  await res.body.text();
  return res.statusCode;
}

/** Sends SIGUSR2 to `pids` and waits for each one's "memory collected" record. */
async function collectIn(log: () => string, pids: number[]): Promise<Collected[]> {
  for (const pid of pids) process.kill(pid, 'SIGUSR2');
  return until(
    () => collected(log()),
    (c) => c.length === pids.length,
    { timeoutMs: 20_000 },
  );
}

/** The "memory collected" records of a process's log (pino's JSON lines). */
function collected(log: string): Collected[] {
  return log
    .split('\n')
    .filter((line) => line.includes('"memory collected"'))
    .map((line) => JSON.parse(line) as Collected);
}
