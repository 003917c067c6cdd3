/**
 * The router's control routes fanned out to every instance (fan-out.ts) against fake instances:
 * body, query string and the upstream key reach each instance once; the answer waits for all and
 * shows each instance's own answer; a failure anywhere is a 502 naming the instance and its
 * status; one 4xx from all is passed through. /v1/models lists the models once, and the keys each
 * route class needs (route-keys.ts).
 */
import { describe, expect, it } from 'vitest';
import { FAN_OUT_ROUTES, fanOutTimeoutMs } from '../../src/router/fan-out.js';
import { until } from '../until.js';
import { deadUrl, fakeInstance, gate, testRouter } from './fake-instances.js';

const ok = { status: 'ok' };

describe('admin fan-out', () => {
  it('sends body, query string and the upstream key to every instance, answering with each', async () => {
    const instances = await Promise.all(
      [1, 2, 3, 4].map((v) =>
        fakeInstance({ '/update_weights': async () => ({ status: 'ok', weight_version: v }) }),
      ),
    );
    const [p1, p2, d1, d2] = instances.map((i) => i.url) as [string, string, string, string];
    const { app } = testRouter([p1, p2], [d1, d2], { upstreamApiKey: 'inst' });
    const res = await app.inject({
      method: 'POST',
      url: '/update_weights?mode=abort',
      payload: { weight_dir: '/ckpt/step-7' },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      status: 'ok',
      instances: [
        { url: p1, role: 'prefill', status: 200, body: { status: 'ok', weight_version: 1 } },
        { url: p2, role: 'prefill', status: 200, body: { status: 'ok', weight_version: 2 } },
        { url: d1, role: 'decode', status: 200, body: { status: 'ok', weight_version: 3 } },
        { url: d2, role: 'decode', status: 200, body: { status: 'ok', weight_version: 4 } },
      ],
    });
    for (const instance of instances) {
      expect(instance.seen).toEqual([
        expect.objectContaining({
          method: 'POST',
          url: '/update_weights?mode=abort',
          body: { weight_dir: '/ckpt/step-7' },
          authorization: 'Bearer inst',
        }),
      ]);
    }
  });

  it('answers only once every instance has answered', async () => {
    const slow = gate();
    const fast = await fakeInstance({ '/pause': async () => ok });
    const held = await fakeInstance({
      '/pause': async () => {
        await slow.wait;
        return { status: 'paused' };
      },
    });
    const { app } = testRouter([fast.url], [held.url]);
    let answered = false;
    const pending = app.inject({ method: 'POST', url: '/pause' }).then((r) => {
      answered = true;
      return r;
    });
    // Both instances were called (however long the calls take to arrive); 200 ms later, with the
    // fast one answered and the held one not, no answer yet.
    await until(
      () => [fast.calls('/pause').length, held.calls('/pause').length],
      (calls) => calls[0] === 1 && calls[1] === 1,
      { what: 'both instances to be called' },
    );
    await new Promise((r) => setTimeout(r, 200));
    expect(answered).toBe(false);
    slow.open();
    const res = await pending;
    expect(res.statusCode).toBe(200);
    expect(res.json().instances.map((i: { body: unknown }) => i.body)).toEqual([
      ok,
      { status: 'paused' },
    ]);
  });

  it('is a 502 naming each instance that failed, with every answer beside it', async () => {
    const good = await fakeInstance({ '/resume': async () => ok });
    const broken = await fakeInstance({
      '/resume': async (_q, reply) =>
        reply.code(503).send({ error: { message: 'engine is dead', code: 503 } }),
    });
    const gone = await deadUrl();
    const { app } = testRouter([good.url, gone], [broken.url]);
    const res = await app.inject({ method: 'POST', url: '/resume' });
    expect(res.statusCode).toBe(502);
    const body = res.json();
    expect(body.error).toMatchObject({ code: 502, type: 'BadGatewayError' });
    expect(body.error.message).toContain('/resume failed on 2 of 3 instances');
    expect(body.error.message).toContain(`decode ${broken.url}: answered 503: engine is dead`);
    expect(body.error.message).toContain(`prefill instance ${gone} failed: `);
    expect(body.instances.map((i: { status: unknown }) => i.status)).toEqual([200, null, 503]);
  });

  it("passes one 4xx that every instance answered through (the client's mistake)", async () => {
    const unknown = {
      error: { message: 'adapter x is not loaded', type: 'NotFoundError', param: null, code: 404 },
    };
    const refuse = async (_q: unknown, reply: { code(n: number): { send(b: unknown): unknown } }) =>
      reply.code(404).send(unknown);
    const a = await fakeInstance({ '/v1/unload_lora_adapter': refuse });
    const b = await fakeInstance({ '/v1/unload_lora_adapter': refuse });
    const { app } = testRouter([a.url], [b.url]);
    const res = await app.inject({
      method: 'POST',
      url: '/v1/unload_lora_adapter',
      payload: { lora_name: 'x' },
    });
    expect(res.statusCode).toBe(404);
    expect(res.json().error).toEqual(unknown.error);
    expect(res.json().instances).toHaveLength(2);
  });

  it('calls an instance listed under both roles once, and every fan-out route exists', async () => {
    const both = await fakeInstance(
      Object.fromEntries(FAN_OUT_ROUTES.map((r) => [r, async () => ok])),
    );
    const { app } = testRouter([both.url], [both.url]);
    for (const route of FAN_OUT_ROUTES) {
      const res = await app.inject({ method: 'POST', url: route, payload: {} });
      expect([route, res.statusCode]).toEqual([route, 200]);
      expect(res.json().instances).toEqual([
        { url: both.url, role: 'prefill+decode', status: 200, body: ok },
      ]);
    }
    expect(both.seen.map((c) => c.url)).toEqual(FAN_OUT_ROUTES);
  });

  it('puts no bound of its own on /update_weights and /init_broadcaster', () => {
    expect(fanOutTimeoutMs('/update_weights')).toBeNull();
    expect(fanOutTimeoutMs('/init_broadcaster')).toBeNull();
    expect(fanOutTimeoutMs('/pause')).toBeGreaterThanOrEqual(120_000);
  });
});

describe('/v1/models and keys', () => {
  it('lists the instances’ models once by id, from those that answer', async () => {
    const card = (id: string) => ({ id, object: 'model', root: id });
    const a = await fakeInstance({
      '/v1/models': async () => ({ object: 'list', data: [card('base'), card('lora-1')] }),
    });
    const b = await fakeInstance({
      '/v1/models': async () => ({ object: 'list', data: [card('base'), card('lora-2')] }),
    });
    const { app } = testRouter([a.url], [b.url, await deadUrl()]);
    const res = await app.inject({ method: 'GET', url: '/v1/models' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      object: 'list',
      data: [card('base'), card('lora-1'), card('lora-2')],
    });
  });

  it('asks the admin key on control routes, the client key on /v1, none on /liveness', async () => {
    const instance = await fakeInstance({
      '/pause': async () => ok,
      '/v1/models': async () => ({ object: 'list', data: [] }),
    });
    const { app } = testRouter([instance.url], [instance.url], {
      apiKey: 'client',
      adminApiKey: 'admin',
    });
    const call = (method: 'GET' | 'POST', url: string, key?: string) =>
      app.inject({
        method,
        url,
        headers: key === undefined ? {} : { authorization: `Bearer ${key}` },
      });
    expect((await call('POST', '/pause')).statusCode).toBe(401);
    expect((await call('POST', '/pause', 'client')).statusCode).toBe(401);
    expect((await call('POST', '/instances', 'client')).statusCode).toBe(401);
    expect((await call('POST', '/pause', 'admin')).statusCode).toBe(200);
    expect((await call('GET', '/v1/models', 'admin')).statusCode).toBe(401);
    expect((await call('POST', '/v1/completions', 'admin')).statusCode).toBe(401);
    expect((await call('GET', '/v1/models', 'client')).statusCode).toBe(200);
    expect((await call('GET', '/liveness')).statusCode).toBe(200);
    expect(instance.calls('/pause')).toHaveLength(1);
  });

  it('takes the client key on control routes without an admin key; open without keys', async () => {
    const instance = await fakeInstance({ '/resume': async () => ok });
    const keyed = testRouter([instance.url], [instance.url], { apiKey: 'client' }).app;
    const bearer = { authorization: 'Bearer client' };
    expect((await keyed.inject({ method: 'POST', url: '/resume' })).statusCode).toBe(401);
    const withKey = await keyed.inject({ method: 'POST', url: '/resume', headers: bearer });
    expect(withKey.statusCode).toBe(200);
    const openApp = testRouter([instance.url], [instance.url]).app;
    expect((await openApp.inject({ method: 'POST', url: '/resume' })).statusCode).toBe(200);
  });
});
