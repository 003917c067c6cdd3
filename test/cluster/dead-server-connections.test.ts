/**
 * No new connection is ever left with a dead API server. node:cluster's round-robin primary keeps
 * a connection it handed to a worker until the worker accepts it; a worker SIGKILLed before that
 * never does: the connection hung, unanswered, for ever, or (when the worker had not even read the
 * handover) was closed on the client unanswered. The test makes the window wide: it stops API
 * server 0 (SIGSTOP), so the connection handed to it waits there, opens new connections, then
 * kills the stopped server. Every one of them must be answered (by the living server).
 */
import { Agent, request } from 'undici';
import { describe, expect, it } from 'vitest';
import { generate } from '../../src/client/index.js';
import { genBody } from './control-helpers.js';
import { startCluster, waitFor } from './harness.js';

/**
 * A generate call on a connection of its own; the status, or the error's name when it failed. A
 * POST: undici retries an idempotent GET on a reset connection, which would hide a reset here.
 */
async function generateOnNewConnection(url: string, timeoutMs: number): Promise<number | string> {
  const agent = new Agent({ pipelining: 0, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
  try {
    const res = await request(`${url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(genBody(4, 1)),
      dispatcher: agent,
    });
    await res.body.dump();
    return res.statusCode;
  } catch (error) {
    return (error as Error).name;
  } finally {
    await agent.destroy();
  }
}

describe('connections and dead API servers', () => {
  it('answers every new connection, also those handed out while an API server died', async () => {
    const cluster = await startCluster(['--api-server-count', '2', '--max-speed']);
    const victim = (await cluster.pids()).get('ringserve-api-0')!;
    process.kill(victim, 'SIGSTOP');
    try {
      // Answers within 15 s or a headers timeout: a hang is a failure, not a stuck test.
      const answers = Array.from({ length: 6 }, () => generateOnNewConnection(cluster.url, 15_000));
      // Long enough for the primary to have accepted all six and handed one to the stopped server.
      await new Promise((r) => setTimeout(r, 1_000));
      process.kill(victim, 'SIGKILL');
      expect(await Promise.all(answers)).toEqual([200, 200, 200, 200, 200, 200]);
    } finally {
      try {
        process.kill(victim, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    // The dead server is replaced and the cluster serves as before.
    await waitFor(
      async () => (await cluster.pids()).get('ringserve-api-0'),
      (p) => p !== undefined && p !== victim,
      30_000,
    );
    for (let i = 0; i < 4; i++) {
      expect(await generateOnNewConnection(cluster.url, 15_000)).toBe(200);
      expect((await generate(cluster.url, genBody(4, i))).choices[0]!.tokenIds.length).toBe(4);
    }
  }, 90_000);
});
