/**
 * The limits a real cluster answers with (issue 15, item 3): --body-limit-mb (413),
 * --max-queue-len (429 with Retry-After), a prompt that fills max_model_len (400 naming the
 * field), --request-timeout and x-request-deadline-ms (504, and the request gone from the engine),
 * --max-unread-bytes (a stream nobody reads is cut and its slot freed), and requests Node's HTTP
 * parser refuses (the contract's body, not fastify's). Every refusal carries the contract's body.
 */
import { connect } from 'node:net';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { STAT_PROMPT_TOKENS, STAT_RUNNING } from '../../src/shm/layout.js';
import { until } from '../until.js';
import { startCluster } from './harness.js';

const GENERATE = '/inference/v1/generate';

const body = (maxTokens: number, extra: Record<string, unknown> = {}) => ({
  token_ids: [1, 2, 3, 4, 5, 6, 7, 8],
  sampling_params: { max_tokens: maxTokens, ignore_eos: true, logprobs: 1, ...extra },
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  json: { error: { message: string; type: string; param: string | null; code: number } };
}

async function post(
  url: string,
  payload: unknown,
  headers: Record<string, string> = {},
  signal?: AbortSignal,
): Promise<Answer> {
  const res = await request(`${url}${GENERATE}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof payload === 'string' ? payload : JSON.stringify(payload),
    signal,
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, json: JSON.parse(text) };
}

function expectContractError(answer: Answer, status: number, param: string | null = null): void {
  expect(answer.status).toBe(status);
  expect(answer.json.error.code).toBe(status);
  expect(typeof answer.json.error.message).toBe('string');
  expect(typeof answer.json.error.type).toBe('string');
  expect(answer.json.error.param).toBe(param);
}

/** Writes raw bytes on a new connection and resolves with everything the server sent back. */
function rawExchange(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      got += chunk;
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(got));
    socket.write(bytes);
    setTimeout(() => socket.destroy(), 5_000).unref();
  });
}

function jsonBodyOf(raw: string): Answer['json'] {
  return JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4));
}

describe('limits', () => {
  it('body limit 413, queue 429 with Retry-After, max_model_len 400, all with the contract body', async () => {
    const cluster = await startCluster([
      '--max-queue-len',
      '2',
      '--body-limit-mb',
      '0.01',
      '--max-model-len',
      '4096',
    ]);
    const tooLarge = await post(cluster.url, body(4, { pad: 'x'.repeat(20_000) }));
    expectContractError(tooLarge, 413);

    // max_tokens past the context is cut to it (prime-rl's vLLM); a prompt that fills it is a 400.
    const overLength = await post(cluster.url, {
      token_ids: new Array(4096).fill(1),
      sampling_params: { max_tokens: 4 },
    });
    expectContractError(overLength, 400, 'token_ids');
    expect(overLength.json.error.message).toMatch(/max_model_len 4096/);

    // Two long requests fill the queue; the third is refused with a hint when to come back.
    const controller = new AbortController();
    const running = [1, 2].map(() =>
      post(cluster.url, body(3000), {}, controller.signal).catch((e: Error) => e),
    );
    await until(
      () => cluster.serverInFlight(0),
      (n) => n === 2,
    );
    const refused = await post(cluster.url, body(4));
    expectContractError(refused, 429);
    expect(refused.headers['retry-after']).toBe('1');
    controller.abort();
    await Promise.all(running);
  });

  it('x-request-deadline-ms and --request-timeout answer 504 and abort the request in the engine', async () => {
    const cluster = await startCluster(['--request-timeout', '2']);
    const badHeader = await post(cluster.url, body(4), { 'x-request-deadline-ms': 'soon' });
    expectContractError(badHeader, 400, 'x-request-deadline-ms');

    // qwen3's modelled steps take ~10 ms: 3000 tokens would take ~30 s.
    const t0 = performance.now();
    const byHeader = await post(cluster.url, body(3000), { 'x-request-deadline-ms': '300' });
    expectContractError(byHeader, 504);
    expect(byHeader.json.error.message).toMatch(/x-request-deadline-ms/);
    // Cut by the deadline, not run out: far under the ~30 s the request would take.
    expect(performance.now() - t0).toBeLessThan(15_000);
    expect(
      await until(
        () => cluster.engineStat(STAT_RUNNING),
        (n) => n === 0,
      ),
    ).toBe(0);

    const byFlag = await post(cluster.url, body(3000));
    expectContractError(byFlag, 504);
    expect(byFlag.json.error.message).toMatch(/--request-timeout/);

    // A stream past its deadline ends with the error event and [DONE].
    const res = await request(`${cluster.url}${GENERATE}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-deadline-ms': '300' },
      body: JSON.stringify({ ...body(3000), stream: true }),
    });
    const text = await res.body.text();
    expect(res.statusCode).toBe(200);
    expect(text).toMatch(/data: \{"error":\{[^\n]*"code":504\}\}\n\ndata: \[DONE\]\n\n$/);
    expect(
      await until(
        () => cluster.engineStat(STAT_RUNNING) + cluster.serverInFlight(0),
        (n) => n === 0,
      ),
    ).toBe(0);
  });

  it('a stream whose client stops reading is cut after --max-unread-bytes and its slot freed', async () => {
    const cluster = await startCluster(['--max-speed', '--max-unread-bytes', '65536']);
    const payload = JSON.stringify({
      ...body(30_000, { return_sampling_mask: true, return_routed_experts: true, top_k: 512 }),
      stream: true,
    });
    const socket = connect(cluster.port, '127.0.0.1');
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.on('error', () => {});
    socket.write(
      `POST ${GENERATE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
    );
    // Never read: the kernel's buffers fill, then the server's own queue passes the bound.
    socket.pause();
    // Started: its prompt reached the engine (at --max-speed it may be cut before a poll sees it
    // in flight).
    await until(
      () => cluster.engineStat(STAT_PROMPT_TOKENS),
      (n) => n > 0,
    );
    expect(
      await until(
        () => cluster.serverInFlight(0) + cluster.engineStat(STAT_RUNNING),
        (n) => n === 0,
        { timeoutMs: 30_000 },
      ),
    ).toBe(0);
    // What was buffered arrives, then the cut: no end of stream (a finished answer would keep the
    // connection alive and end with [DONE]).
    let tail = '';
    socket.on('data', (chunk: Buffer) => {
      tail = (tail + chunk.toString('latin1')).slice(-64);
    });
    socket.resume();
    await closed;
    expect(tail).not.toContain('[DONE]');
  });

  it('requests the HTTP parser refuses get the contract body', async () => {
    const cluster = await startCluster(['--body-limit-mb', '1']);
    const badLength = await rawExchange(
      cluster.port,
      `POST ${GENERATE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: abc\r\n\r\n{}`,
    );
    expect(badLength).toMatch(/^HTTP\/1\.1 400 /);
    expect(jsonBodyOf(badLength).error).toMatchObject({ code: 400, type: 'BadRequestError' });

    const absurdLength = await rawExchange(
      cluster.port,
      `POST ${GENERATE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 99999999999999\r\n\r\n{}`,
    );
    expect(absurdLength).toMatch(/^HTTP\/1\.1 413 /);
    expect(jsonBodyOf(absurdLength).error.code).toBe(413);

    const garbage = await rawExchange(cluster.port, 'NOT HTTP AT ALL\r\n\r\n');
    expect(garbage).toMatch(/^HTTP\/1\.1 400 /);
    expect(jsonBodyOf(garbage).error.code).toBe(400);

    const health = await request(`${cluster.url}/health`);
    await health.body.dump();
    expect(health.statusCode).toBe(200);
  });

  it('JSON bodies: invalid JSON and prototype-poisoning keys, literal or escaped, are a 400; escapes elsewhere parse', async () => {
    const cluster = await startCluster(['--max-speed']);
    expectContractError(await post(cluster.url, '{"token_ids": [1, 2'), 400);
    const prompt = '"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2}';
    for (const key of ['"__proto__"', '"\\u005f_proto__"', '"constructor"']) {
      const poisoned = `{${prompt}, ${key}: {"prototype": {"x": 1}}}`;
      const answer = await post(cluster.url, poisoned);
      expect(answer.status, poisoned).toBe(400);
      expect(answer.json.error.code).toBe(400);
    }
    // A \u escape in a string value takes fastify's parser, and parses: the request is served.
    const escaped = await post(cluster.url, `{${prompt}, "request_id": "caf\\u00e9-1"}`);
    expect(escaped.status).toBe(200);
    const plain = await post(cluster.url, `{${prompt}}`);
    expect(plain.status).toBe(200);
  });
});
