/**
 * No new connection is ever left with a dead API server. With node:cluster's round-robin primary
 * (Node 20), a connection handed to a worker that is stopped, then SIGKILLed, stays open in the
 * primary unanswered for ever: on the code before connection-distributor.ts this test saw
 * `[200, 'timeout', 200, 200, 200, 200]`. The test makes the window wide: it stops API server 0
 * (SIGSTOP), so the connection handed to it waits there, opens new connections, then kills the
 * stopped server. Every one of them must be answered (by the living server).
 */
import { describe, expect, it } from 'vitest';
import { generate } from '../../src/client/index.js';
import { until } from '../until.js';
import { genBody, generateOnNewConnection } from './control-helpers.js';
import { startCluster } from './harness.js';

describe('connections and dead API servers', () => {
  it('answers every new connection, also those handed out while an API server died', async () => {
    // The primary's hand-off is what is tested: with --listener reuseport the kernel queues new
    // connections with a stopped server, and its SIGKILL resets them (docs/operating.md).
    const cluster = await startCluster([
      '--api-server-count',
      '2',
      '--max-speed',
      '--listener',
      'primary',
    ]);
    const victim = (await cluster.pids()).get('ringserve-api-0')!;
    process.kill(victim, 'SIGSTOP');
    let killed = false;
    try {
      // Answers within 15 s or a headers timeout: a hang is a failure, not a stuck test.
      const answers = Array.from({ length: 6 }, () =>
        generateOnNewConnection(cluster.port, 1, 15_000),
      );
      // Long enough for the primary to have accepted all six and handed one to the stopped server.
      await new Promise((r) => setTimeout(r, 1_000));
      process.kill(victim, 'SIGKILL');
      killed = true;
      expect(await Promise.all(answers)).toEqual([200, 200, 200, 200, 200, 200]);
    } finally {
      // Once killed, its pid is free and may be another process's: it is not signalled again.
      if (!killed) process.kill(victim, 'SIGKILL');
    }
    // The dead server is replaced and the cluster serves as before.
    await until(
      async () => (await cluster.pids()).get('ringserve-api-0'),
      (p) => p !== undefined && p !== victim,
      { timeoutMs: 30_000 },
    );
    for (let i = 0; i < 4; i++) {
      expect(await generateOnNewConnection(cluster.port, 1, 15_000)).toBe(200);
      expect((await generate(cluster.url, genBody(4, i))).choices[0]!.tokenIds.length).toBe(4);
    }
  }, 90_000);
});
