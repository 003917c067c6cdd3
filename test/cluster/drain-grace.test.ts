/**
 * --drain-grace-s (issue 15): once a SIGTERMed node has drained (its API servers gone), the
 * primary's listener still answers for the grace, 503 with the contract's error body and
 * Retry-After, so a load balancer that has not yet noticed gets an answer it can retry elsewhere,
 * not a reset; then it closes. With a grace of 0 the listener closes at once, as before.
 */
import { request } from 'node:http';
import { describe, expect, it } from 'vitest';
import { until } from '../until.js';
import { startCluster } from './harness.js';

interface Answer {
  status: number;
  retryAfter: string | undefined;
  body: string;
}

/** One request on a fresh connection; rejects on a refused or reset connection. */
function post(port: number, path: string, body: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'POST', agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
      });
      res.on('end', () =>
        resolve({ status: res.statusCode!, retryAfter: res.headers['retry-after'], body: text }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setHeader('content-type', 'application/json');
    req.end(body);
  });
}

const exited = (child: { exitCode: number | null; signalCode: string | null }): boolean =>
  child.exitCode !== null || child.signalCode !== null;

describe('drain grace', () => {
  it('after the drain, a request during the grace gets 503 with Retry-After, then the listener closes', async () => {
    // A grace far longer than the probes below take, even on a loaded machine.
    const cluster = await startCluster(['--drain-grace-s', '8', '--api-server-count', '2']);
    const body = JSON.stringify({
      token_ids: [1, 2, 3],
      sampling_params: { max_tokens: 2 },
    });
    expect((await post(cluster.port, '/inference/v1/generate', body)).status).toBe(200);
    cluster.process.kill('SIGTERM');
    // Drained: no API server left.
    const servers = await until(
      async () => [...(await cluster.pids()).keys()].filter((t) => t.startsWith('ringserve-api')),
      (titles) => titles.length === 0,
    );
    expect(servers).toEqual([]);
    expect(exited(cluster.process)).toBe(false);
    const answer = await post(cluster.port, '/inference/v1/generate', body);
    expect(answer.status).toBe(503);
    expect(answer.retryAfter).toBe('8');
    expect(JSON.parse(answer.body)).toEqual({
      error: {
        message: 'the server is draining or shutting down',
        type: expect.any(String),
        param: null,
        code: 503,
      },
    });
    await until(
      () => exited(cluster.process),
      (done) => done,
      { timeoutMs: 20_000 },
    );
    expect(exited(cluster.process)).toBe(true);
    await expect(post(cluster.port, '/health', '')).rejects.toThrow(/ECONNREFUSED/);
  }, 60_000);

  it('with a grace of 0 the listener closes at once', async () => {
    const cluster = await startCluster(['--drain-grace-s', '0']);
    cluster.process.kill('SIGTERM');
    const refused = await until(
      () =>
        post(cluster.port, '/health', '').then(
          () => false,
          (e: Error) => /ECONNREFUSED/.test(e.message),
        ),
      (r) => r,
      { timeoutMs: 5_000 },
    );
    expect(refused).toBe(true);
  }, 60_000);
});
