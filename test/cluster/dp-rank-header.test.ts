/**
 * vLLM's `X-data-parallel-rank` header on a real cluster (the simulator, --data-parallel-size 1):
 * rank 0 is served on /inference/v1/generate, /v1/completions and /v1/chat/completions; rank 1,
 * and what is not an integer, is the coded 400 naming the header on all three, before any engine
 * work; the header name is case-insensitive. `--data-parallel-size 2` without `--engine vllm` is
 * refused at startup with a coded error and the usage exit code.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExitCode } from '../../src/errors.js';
import { type Cluster, startCluster } from './harness.js';

const CLI = join(import.meta.dirname, '..', '..', 'dist', 'src', 'cli.js');

let cluster: Cluster;

beforeAll(async () => {
  cluster = await startCluster(['--model', 'tiny', '--max-speed']);
});

afterAll(async () => {
  await cluster?.stop();
});

/** One body per route, each a short seeded answer. */
const ROUTES: readonly { path: string; body: Record<string, unknown> }[] = [
  {
    path: '/inference/v1/generate',
    body: { token_ids: [3, 1, 4, 1, 5], sampling_params: { max_tokens: 4, seed: 1 } },
  },
  { path: '/v1/completions', body: { model: 'tiny', prompt: 'The answer is', max_tokens: 4 } },
  {
    path: '/v1/chat/completions',
    body: { model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 },
  },
];

async function post(
  path: string,
  body: unknown,
  headers: Record<string, string>,
): Promise<{ status: number; body: { error?: Record<string, unknown> } }> {
  const res = await request(`${cluster.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.statusCode, body: (await res.body.json()) as never };
}

describe('the X-data-parallel-rank header', () => {
  it('serves rank 0 and no header on all three routes', async () => {
    for (const { path, body } of ROUTES) {
      const variants: Record<string, string>[] = [
        {},
        { 'X-data-parallel-rank': '0' },
        { 'x-data-parallel-rank': '0' },
      ];
      for (const headers of variants) {
        const answer = await post(path, body, headers);
        expect(answer.status, `${path} ${JSON.stringify(headers)}`).toBe(200);
        expect(answer.body.error).toBeUndefined();
      }
    }
  });

  it('answers rank 1 of a one-rank cluster with the coded 400 naming the header', async () => {
    for (const { path, body } of ROUTES) {
      for (const name of ['X-data-parallel-rank', 'X-Data-Parallel-Rank']) {
        const answer = await post(path, body, { [name]: '1' });
        expect(answer.status, path).toBe(400);
        expect(answer.body.error).toMatchObject({
          type: 'BadRequestError',
          param: 'X-data-parallel-rank',
          code: 400,
        });
        expect(answer.body.error!.message).toContain(
          'data_parallel_rank 1 is out of range [0, 1) (--data-parallel-size 1)',
        );
      }
    }
  });

  it('answers a value that is not an integer with the coded 400 naming the header', async () => {
    for (const { path, body } of ROUTES) {
      for (const value of ['abc', '1.5', '-1']) {
        const answer = await post(path, body, { 'X-data-parallel-rank': value });
        expect(answer.status, `${path} ${value}`).toBe(400);
        expect(answer.body.error).toMatchObject({ param: 'X-data-parallel-rank', code: 400 });
      }
    }
  });
});

describe('--data-parallel-size', () => {
  it('refuses 2 without --engine vllm at startup, with the usage exit code', () => {
    const run = spawnSync(
      process.execPath,
      [CLI, 'serve', '--model', 'tiny', '--port', '0', '--data-parallel-size', '2'],
      { encoding: 'utf8', timeout: 30_000 },
    );
    expect(run.status).toBe(ExitCode.Usage);
    expect(run.stderr).toContain('RS_ERR_CONFIG_INVALID');
    expect(run.stderr).toContain('--data-parallel-size');
    expect(run.stderr).toContain('--engine vllm');
  });
});
