/**
 * Failure injection on a real cluster: each kind forced by `x-ringserve-fail` answers as the real
 * failure it imitates (the contract's error body, Retry-After on 429; `abort` cuts the connection
 * mid-answer and frees the request in the engine); the header is ignored unless allowed; and
 * `--failure-rate` fails exactly the requests the seeded injector predicts.
 */
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildConfig } from '../../src/config.js';
import { FailureInjector } from '../../src/server/main/http/failure-injection.js';
import { STAT_RUNNING } from '../../src/shm/layout.js';
import { until } from '../until.js';
import { type Cluster, startCluster } from './harness.js';

const body = (maxTokens: number, stream = false) =>
  JSON.stringify({
    token_ids: [1, 2, 3, 4],
    sampling_params: { max_tokens: maxTokens, ignore_eos: true, seed: 5, logprobs: 1 },
    stream,
  });

interface Outcome {
  status: number;
  headers: Record<string, unknown>;
  /** The body, or 'cut' when the connection closed before its end. */
  text: string;
}

async function generateWith(
  url: string,
  payload: string,
  headers: Record<string, string> = {},
): Promise<Outcome> {
  const res = await request(`${url}/inference/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: payload,
  });
  const text = await res.body.text().catch(() => 'cut');
  return { status: res.statusCode, headers: res.headers, text };
}

const kindOf = (o: Outcome): string | null =>
  o.text === 'cut'
    ? 'abort'
    : o.status === 429
      ? 'rate_limit'
      : o.status === 503
        ? 'unavailable'
        : o.status === 400
          ? 'context_length'
          : null;

describe('failure injection, forced by the header', () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster(['--allow-failure-header']);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('answers rate_limit, unavailable and context_length with the contract error body', async () => {
    const cases = [
      ['rate_limit', 429, 'RateLimitError', null],
      ['unavailable', 503, 'ServiceUnavailableError', null],
      ['context_length', 400, 'BadRequestError', 'token_ids'],
    ] as const;
    for (const [kind, status, type, param] of cases) {
      const o = await generateWith(cluster.url, body(4), { 'x-ringserve-fail': kind });
      expect(o.status).toBe(status);
      const error = (JSON.parse(o.text) as { error: Record<string, unknown> }).error;
      expect(error).toMatchObject({ type, param, code: status });
      expect(error.message).toContain(`injected failure (${kind})`);
      if (kind === 'rate_limit') expect(o.headers['retry-after']).toBe('1');
    }
    // The server serves normally right after.
    expect((await generateWith(cluster.url, body(4))).status).toBe(200);
  });

  it('injects on the OpenAI routes too, after their own validation', async () => {
    const post = async (path: string, payload: unknown, kind: string) => {
      const res = await request(`${cluster.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-ringserve-fail': kind },
        body: JSON.stringify(payload),
      });
      return { status: res.statusCode, body: (await res.body.json()) as { error?: unknown } };
    };
    const completion = { prompt: 'Hello', max_tokens: 4 };
    const chat = { messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4 };
    const limited = await post('/v1/completions', completion, 'rate_limit');
    expect(limited.status).toBe(429);
    expect(limited.body.error).toMatchObject({ type: 'RateLimitError', code: 429 });
    expect((await post('/v1/chat/completions', chat, 'unavailable')).status).toBe(503);
    // Bad input is its own 400 first.
    const bad = await post('/v1/completions', { ...completion, max_tokens: 'x' }, 'unavailable');
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ param: 'max_tokens' });
    expect((await post('/v1/completions', completion, 'none-such')).status).toBe(400);
  });

  it('cuts a finished answer half-way (abort)', async () => {
    const o = await generateWith(cluster.url, body(8), { 'x-ringserve-fail': 'abort' });
    expect(o.status).toBe(200);
    expect(o.text).toBe('cut');
  });

  it('cuts a stream after its first event, and the engine drops the request', async () => {
    // 400 tokens in real time (~10 ms a step) run for seconds: the cut comes long before the end.
    const res = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-ringserve-fail': 'abort' },
      body: body(400, true),
    });
    expect(res.statusCode).toBe(200);
    let received = '';
    const ended = await (async () => {
      try {
        for await (const chunk of res.body) received += String(chunk);
        return 'ended';
      } catch {
        return 'cut';
      }
    })();
    expect(ended).toBe('cut');
    expect(received.startsWith('data: {')).toBe(true);
    expect(received).not.toContain('[DONE]');
    const running = await until(
      () => cluster.engineStat(STAT_RUNNING),
      (n) => n === 0,
    );
    expect(running).toBe(0);
  });

  it('answers an unknown kind with a 400 naming the header', async () => {
    const o = await generateWith(cluster.url, body(4), { 'x-ringserve-fail': 'teapot' });
    expect(o.status).toBe(400);
    expect(JSON.parse(o.text).error.param).toBe('x-ringserve-fail');
  });

  it('still answers bad input with its own 400, not an injected failure', async () => {
    const o = await generateWith(cluster.url, '{"token_ids": []}', {
      'x-ringserve-fail': 'unavailable',
    });
    expect(o.status).toBe(400);
    expect(o.text).not.toContain('injected');
  });
});

describe('failure injection at a seeded rate', () => {
  const SEED = 11;
  const RATE = 0.4;
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster([
      '--failure-rate',
      String(RATE),
      '--seed',
      String(SEED),
      '--max-speed',
    ]);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('fails exactly the requests the seeded injector predicts, and ignores the header', async () => {
    const predicted = new FailureInjector(buildConfig({ failureRate: RATE, seed: SEED }), 0);
    const seen: (string | null)[] = [];
    const expected: (string | null)[] = [];
    for (let i = 0; i < 30; i++) {
      // The header is not allowed on this cluster: it changes nothing.
      const o = await generateWith(cluster.url, body(4), { 'x-ringserve-fail': 'rate_limit' });
      seen.push(kindOf(o));
      expected.push(predicted.pick(undefined));
    }
    expect(seen).toEqual(expected);
    expect(seen.filter((k) => k !== null).length).toBeGreaterThan(3);
    expect(seen.filter((k) => k === null).length).toBeGreaterThan(3);
  });
});
