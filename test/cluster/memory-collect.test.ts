/**
 * SIGUSR2 makes every ringserve process collect its garbage in every thread and trim malloc
 * (src/obs/memory-collect.ts), as the soak asks before its readings at rest: each process logs
 * "memory collected" with every one of its other threads answering, and keeps serving.
 */
import { request } from 'undici';
import { expect, it } from 'vitest';
import { startCluster, waitFor } from './harness.js';

interface Collected {
  pid: number;
  name: string;
  threads: number;
  threads_answered: number;
  main_heap_total_mb: [number, number];
  rss_mb: [number, number];
}

it('SIGUSR2: the primary, the engine and each API server collect in every thread, and serve on', async () => {
  const cluster = await startCluster([
    '--max-speed',
    '--api-server-count',
    '2',
    '--log-level',
    'info',
  ]);
  try {
    const generate = async () => {
      const res = await request(`${cluster.url}/inference/v1/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          token_ids: [1, 2, 3],
          sampling_params: { max_tokens: 200, ignore_eos: true, logprobs: 1 },
        }),
      });
      await res.body.text();
      return res.statusCode;
    };
    // Every path has run (packers included), then the cluster is idle.
    for (let i = 0; i < 8; i++) expect(await generate()).toBe(200);
    await new Promise((r) => setTimeout(r, 300));

    const pids = await cluster.pids();
    const all = [cluster.process.pid!, ...pids.values()];
    expect(all).toHaveLength(4);
    for (const pid of all) process.kill(pid, 'SIGUSR2');
    const collected = (): Collected[] =>
      cluster
        .log()
        .split('\n')
        .filter((line) => line.includes('"memory collected"'))
        .map((line) => JSON.parse(line) as Collected);
    const seen = await waitFor(collected, (c) => c.length === all.length, 20_000);
    expect(seen.map((c) => c.pid).sort()).toEqual([...all].sort());
    for (const c of seen) {
      // Nobody was waited for in vain: each thread answered.
      expect(c.threads_answered).toBe(c.threads);
      expect(c.rss_mb[1]).toBeGreaterThan(0);
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
