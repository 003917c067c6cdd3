/**
 * The router app in-process against canned upstream instances (fastify servers answering fixed
 * msgpack bodies): a decode answer short of rows is a 502 with the contract's error body naming the
 * shortfall, an instance's 400 is passed through, /health follows the instances' health, and with
 * keys the router asks clients for its own and sends the instances theirs.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/obs/log.js';
import { GenerateResponseEncoder } from '../../src/protocol/generate-response.js';
import type { GenerateResponseColumns } from '../../src/protocol/response-columns.js';
import { buildRouterApp } from '../../src/router/router-app.js';
import { RouterMetrics } from '../../src/router/router-metrics.js';
import { UpstreamPool } from '../../src/router/upstreams.js';
import { until } from '../until.js';

const encoder = new GenerateResponseEncoder();
const open: { close(): Promise<unknown> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

/** An answer of `tokens` tokens with routing rows [start, start + rows) for a 10-token prompt. */
function answer(tokens: number, start: number, rows: number, handle: unknown): Buffer {
  const res: GenerateResponseColumns = {
    requestId: 'x',
    model: 'sim-tiny',
    created: 1,
    choices: [
      {
        index: 0,
        tokenIds: new Int32Array(tokens).fill(5),
        logprobs: null,
        maskCounts: null,
        maskIds: null,
        routing: { data: new Uint8Array(rows * 4), rows, layers: 2, topk: 2, start },
        weightVersions: null,
        finishReason: 'length',
        stopReason: null,
      },
    ],
    usage: { promptTokens: 10, completionTokens: tokens, cachedTokens: null },
    kvTransferParams: handle,
  };
  return encoder.encode(res, 'msgpack');
}

/** The `authorization` header of each generate call a fake instance received (undefined: none). */
type SeenKeys = (string | undefined)[];

/** What a fake instance does beside answering: how long it takes, and the deadlines it was sent. */
interface FakeCalls {
  delayMs?: number;
  /** The `x-request-deadline-ms` of each generate call (undefined: none). */
  deadlines?: (string | undefined)[];
}

async function fakeInstance(
  status: number,
  reply: Buffer | object,
  seen: SeenKeys = [],
  calls: FakeCalls = {},
): Promise<string> {
  const app = Fastify();
  app.addContentTypeParser('application/msgpack', { parseAs: 'buffer' }, (_r, b, done) =>
    done(null, b),
  );
  app.get('/health', async () => '');
  app.post('/inference/v1/generate', async (req, res) => {
    seen.push(req.headers.authorization);
    const deadline = req.headers['x-request-deadline-ms'];
    calls.deadlines?.push(Array.isArray(deadline) ? deadline.join(',') : deadline);
    if (calls.delayMs !== undefined) await new Promise((r) => setTimeout(r, calls.delayMs));
    if (Buffer.isBuffer(reply)) return res.code(status).type('application/msgpack').send(reply);
    return res.code(status).send(reply);
  });
  open.push(app);
  return app.listen({ host: '127.0.0.1', port: 0 });
}

async function router(
  prefillUrl: string,
  decodeUrl: string,
  checks = false,
  keys: { apiKey: string | null; upstreamApiKey: string | null } = {
    apiKey: null,
    upstreamApiKey: null,
  },
): Promise<FastifyInstance> {
  const prefill = new UpstreamPool('prefill', [prefillUrl], 60_000, keys.upstreamApiKey);
  const decode = new UpstreamPool('decode', [decodeUrl], 60_000, keys.upstreamApiKey);
  if (checks) for (const pool of [prefill, decode]) pool.startHealthChecks();
  const app = buildRouterApp(
    { prefill, decode, metrics: new RouterMetrics() },
    { bodyLimitBytes: 1 << 20, apiKey: keys.apiKey, log: silentLogger() },
  );
  open.push({ close: async () => Promise.all([app.close(), prefill.close(), decode.close()]) });
  return app;
}

const request = { token_ids: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], sampling_params: { max_tokens: 4 } };

/** POSTs `request` (with `extra` fields) to the router's generate route. */
function generate(
  app: FastifyInstance,
  headers: Record<string, string> = {},
  extra: Record<string, unknown> = {},
) {
  return app.inject({
    method: 'POST',
    url: '/inference/v1/generate',
    payload: { ...request, ...extra },
    headers,
  });
}

describe('router app', () => {
  it('answers 502 naming the shortfall when the decode rows leave a gap', async () => {
    const prefill = await fakeInstance(200, answer(1, 0, 10, { do_remote_prefill: true }));
    // Rows from 11: position 10 is missing (the prefill ends at 9).
    const decode = await fakeInstance(200, answer(4, 11, 2, null));
    const app = await router(prefill, decode);
    const res = await generate(app);
    expect(res.statusCode).toBe(502);
    expect(res.json().error).toMatchObject({ code: 502, type: 'BadGatewayError' });
    expect(res.json().error.message).toMatch(/positions 10\.\.10 are missing/);
  });

  it('answers 502 when the decode rows end before P + C - 1', async () => {
    const prefill = await fakeInstance(200, answer(1, 0, 10, { do_remote_prefill: true }));
    const decode = await fakeInstance(200, answer(4, 9, 3, null));
    const app = await router(prefill, decode);
    const res = await generate(app);
    expect(res.statusCode).toBe(502);
    expect(res.json().error.message).toMatch(/1 short/);
  });

  it("passes an instance's 400 through, and refuses a body that is not an object", async () => {
    const bad = {
      error: {
        message: 'sampling_params.top_p: bad',
        type: 'BadRequestError',
        param: 'sampling_params.top_p',
        code: 400,
      },
    };
    const app = await router(await fakeInstance(400, bad), await fakeInstance(200, {}));
    const res = await generate(app);
    expect([res.statusCode, res.json()]).toEqual([400, bad]);
    const notObject = await app.inject({
      method: 'POST',
      url: '/inference/v1/generate',
      payload: [1],
    });
    expect(notObject.statusCode).toBe(400);
  });

  it('merges a well-formed pair into P + C - 1 rows from 0', async () => {
    const prefill = await fakeInstance(200, answer(1, 0, 10, { do_remote_prefill: true }));
    const decode = await fakeInstance(200, answer(4, 9, 4, null));
    const app = await router(prefill, decode);
    const res = await generate(app);
    expect(res.statusCode).toBe(200);
    expect(res.json().choices[0].routed_experts).toMatchObject({ shape: [13, 2, 2], start: 0 });
    expect(res.json().kv_transfer_params).toBeNull();
  });

  it('/health is 503 while every instance of a role fails its check', async () => {
    const closed = Fastify();
    const deadUrl = await closed.listen({ host: '127.0.0.1', port: 0 });
    await closed.close();
    const app = await router(deadUrl, await fakeInstance(200, {}), true);
    const status = await until(
      async () => (await app.inject({ method: 'GET', url: '/health' })).statusCode,
      (code) => code !== 200,
      { what: '/health to stop answering 200' },
    );
    expect(status).toBe(503);
    const res = await generate(app);
    expect(res.statusCode).toBe(503);
    expect(res.json().error.message).toMatch(/no healthy prefill instance/);
  });

  it('asks clients for its key on generate only, and sends the instances theirs', async () => {
    const seen: SeenKeys = [];
    const prefill = await fakeInstance(200, answer(1, 0, 10, { do_remote_prefill: true }), seen);
    const decode = await fakeInstance(200, answer(4, 9, 4, null), seen);
    const app = await router(prefill, decode, false, {
      apiKey: 'client-key',
      upstreamApiKey: 'instance-key',
    });
    const withKey = (authorization?: string) =>
      generate(app, authorization === undefined ? {} : { authorization });
    for (const wrong of [undefined, 'Bearer instance-key', 'Bearer client-key2', 'client-key']) {
      const res = await withKey(wrong);
      expect([wrong, res.statusCode]).toEqual([wrong, 401]);
      expect(res.headers['www-authenticate']).toBe('Bearer');
      expect(res.json().error).toMatchObject({ code: 401, type: 'AuthenticationError' });
    }
    expect(seen).toEqual([]);
    const ok = await withKey('bearer client-key');
    expect(ok.statusCode).toBe(200);
    expect(seen).toEqual(['Bearer instance-key', 'Bearer instance-key']);
    for (const url of ['/health', '/metrics']) {
      expect((await app.inject({ method: 'GET', url })).statusCode).toBe(200);
    }
    const metrics = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toContain('ringserve_router_requests_total{code="401"} 4\n');
  });

  it('sends no authorization header to the instances without an upstream key', async () => {
    const seen: SeenKeys = [];
    const prefill = await fakeInstance(200, answer(1, 0, 10, { do_remote_prefill: true }), seen);
    const decode = await fakeInstance(200, answer(4, 9, 4, null), seen);
    const app = await router(prefill, decode);
    const res = await generate(app);
    expect(res.statusCode).toBe(200);
    expect(seen).toEqual([undefined, undefined]);
  });

  it("answers 502 naming the upstream key when an instance refuses the router's", async () => {
    const refuse = { error: { message: 'missing or wrong API key', code: 401 } };
    const prefill = await fakeInstance(401, refuse);
    const decode = await fakeInstance(200, answer(4, 9, 4, null));
    for (const upstreamApiKey of [null, 'stale']) {
      const app = await router(prefill, decode, false, { apiKey: null, upstreamApiKey });
      const res = await generate(app);
      expect(res.statusCode).toBe(502);
      expect(res.json().error.message).toMatch(
        upstreamApiKey === null
          ? /^prefill instance http:\S+ failed: it asks for an API key: give the router --upstream-api-key$/
          : /failed: it refused the router's key: its --api-key is not the router's --upstream-api-key$/,
      );
    }
  });

  describe('x-request-deadline-ms', () => {
    const DEADLINE = 'x-request-deadline-ms';

    it('sends each instance what is left of the client deadline, counted from its arrival', async () => {
      const prefillDeadlines: (string | undefined)[] = [];
      const decodeDeadlines: (string | undefined)[] = [];
      const prefill = await fakeInstance(200, answer(1, 0, 10, { do_remote_prefill: true }), [], {
        delayMs: 250,
        deadlines: prefillDeadlines,
      });
      const decode = await fakeInstance(200, answer(4, 9, 4, null), [], {
        deadlines: decodeDeadlines,
      });
      const app = await router(prefill, decode);
      const res = await generate(app, { [DEADLINE]: '60000' });
      expect(res.statusCode).toBe(200);
      const sent = [Number(prefillDeadlines[0]), Number(decodeDeadlines[0])];
      expect(sent[0]).toBeLessThanOrEqual(60_000);
      expect(sent[0]).toBeGreaterThan(55_000);
      // The prefill call took at least its 250 ms delay; timers may fire a millisecond early.
      expect(sent[1]).toBeLessThanOrEqual(sent[0]! - 240);
      // Without the header the instances get none (their own --request-timeout holds).
      expect((await generate(app)).statusCode).toBe(200);
      expect([prefillDeadlines[1], decodeDeadlines[1]]).toEqual([undefined, undefined]);
    });

    it('answers 504 without calling the decode instance once the deadline is spent', async () => {
      for (const stream of [false, true]) {
        const decodeDeadlines: (string | undefined)[] = [];
        const prefill = await fakeInstance(200, answer(1, 0, 10, { do_remote_prefill: true }), [], {
          delayMs: 300,
        });
        const decode = await fakeInstance(200, answer(4, 9, 4, null), [], {
          deadlines: decodeDeadlines,
        });
        const app = await router(prefill, decode);
        const res = await generate(app, { [DEADLINE]: '100', 'x-request-id': 'late' }, { stream });
        expect([stream, res.statusCode]).toEqual([stream, 504]);
        expect(res.json().error).toMatchObject({ code: 504, type: 'TimeoutError' });
        expect(res.json().error.message).toMatch(
          /^request late was not answered within its deadline of 100 ms \(x-request-deadline-ms\)/,
        );
        expect(decodeDeadlines).toEqual([]);
      }
    });

    it('refuses a malformed deadline with a 400 naming the header before any instance works', async () => {
      const seen: SeenKeys = [];
      const prefill = await fakeInstance(200, answer(1, 0, 10, { do_remote_prefill: true }), seen);
      const decode = await fakeInstance(200, answer(4, 9, 4, null), seen);
      const app = await router(prefill, decode);
      for (const bad of ['0', '-5', '1.5', 'soon', '99999999999']) {
        const res = await generate(app, { [DEADLINE]: bad });
        expect([bad, res.statusCode]).toEqual([bad, 400]);
        expect(res.json().error).toMatchObject({ code: 400, param: DEADLINE });
      }
      expect(seen).toEqual([]);
    });
  });
});
