/**
 * Instances added and removed while the router serves (membership.ts) against fake instances: an
 * added instance is health-checked before it takes traffic; a removed one gets no new request, the
 * DELETE answers once its outstanding ones finish (or 503 after the bound, then it is dropped when
 * they do); the last instance of a role stays; /liveness and /metrics show the members.
 */
import { describe, expect, it } from 'vitest';
import { until } from '../until.js';
import { deadUrl, fakeInstance, gate, testRouter } from './fake-instances.js';

const COMPLETION = { prompt: 'x', max_tokens: 2 };

/** A decode fake whose completions wait for `hold` (when given) before answering. */
async function decodeInstance(hold?: Promise<void>) {
  return fakeInstance({
    '/v1/completions': async () => {
      if (hold !== undefined) await hold;
      return { id: 'cmpl-1', choices: [] };
    },
  });
}

async function prefillInstance() {
  return fakeInstance({ '/v1/completions': async () => ({ kv_transfer_params: null }) });
}

describe('instances added and removed while serving', () => {
  it('adds an instance once its health check passes; one that fails takes no traffic', async () => {
    const prefill = await prefillInstance();
    const first = await decodeInstance();
    const second = await decodeInstance();
    const { app, decode } = testRouter([prefill.url], [first.url]);
    const add = (url: string) =>
      app.inject({ method: 'POST', url: '/instances', payload: { role: 'decode', url } });
    const added = await add(`${second.url}/`);
    expect([added.statusCode, added.json()]).toEqual([
      200,
      { status: 'ok', role: 'decode', url: second.url, healthy: true, added: true },
    ]);
    expect((await add(second.url)).json()).toMatchObject({ status: 'ok', added: false });
    const dead = await deadUrl();
    const pending = await add(dead);
    expect([pending.statusCode, pending.json().status]).toEqual([202, 'pending']);
    for (let i = 0; i < 6; i++) {
      const res = await app.inject({ method: 'POST', url: '/v1/completions', payload: COMPLETION });
      expect(res.statusCode).toBe(200);
    }
    // Least outstanding over the two healthy ones (sequential calls: the first listed each time
    // it is free), never the unhealthy one.
    expect(first.calls('/v1/completions').length + second.calls('/v1/completions').length).toBe(6);
    expect(decode.instances.map((u) => [u.url, u.healthy])).toEqual([
      [first.url, true],
      [second.url, true],
      [dead, false],
    ]);
    const metrics = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toContain('ringserve_router_instances{role="decode"} 3\n');
    expect(metrics).toContain('ringserve_router_instances_serving{role="decode"} 2\n');
    expect(metrics).toContain('ringserve_router_instances{role="prefill"} 1\n');
  });

  it('drains a removed instance: no new requests, answered once its requests finish', async () => {
    const release = gate();
    const prefill = await prefillInstance();
    const slow = await decodeInstance(release.wait);
    const other = await decodeInstance();
    const { app, decode } = testRouter([prefill.url], [slow.url, other.url]);
    // Held on `slow` (least outstanding: the first listed of two idle instances).
    const held = [app.inject({ method: 'POST', url: '/v1/completions', payload: COMPLETION })];
    await until(
      () => decode.find(slow.url)?.outstanding,
      (n) => n === 1,
    );
    let removed = false;
    const removal = app
      .inject({ method: 'DELETE', url: '/instances', payload: { role: 'decode', url: slow.url } })
      .then((r) => {
        removed = true;
        return r;
      });
    await until(
      () => decode.find(slow.url)?.draining,
      (draining) => draining === true,
    );
    // Sessions too: those whose choice is `slow` go to `other` while it drains.
    for (let i = 0; i < 5; i++) {
      const res = await app.inject({
        method: 'POST',
        url: '/v1/completions',
        payload: COMPLETION,
        headers: { 'x-session-id': `s-${i}` },
      });
      expect(res.statusCode).toBe(200);
    }
    expect(slow.calls('/v1/completions')).toHaveLength(1);
    expect(other.calls('/v1/completions')).toHaveLength(5);
    const live = (await app.inject({ method: 'GET', url: '/liveness' })).json();
    expect(live.decode).toMatchObject({ healthy: 1, draining: 1 });
    expect(removed).toBe(false);
    release.open();
    expect((await held[0]!).statusCode).toBe(200);
    const res = await removal;
    expect([res.statusCode, res.json()]).toEqual([
      200,
      { status: 'ok', role: 'decode', url: slow.url, removed: true },
    ]);
    expect(decode.instances.map((u) => u.url)).toEqual([other.url]);
  });

  it('answers 503 naming an instance still busy after the bound, and drops it later', async () => {
    const release = gate();
    const prefill = await prefillInstance();
    const slow = await decodeInstance(release.wait);
    const other = await decodeInstance();
    const { app, decode } = testRouter([prefill.url], [slow.url, other.url], {
      drainTimeoutMs: 200,
    });
    const held = app.inject({ method: 'POST', url: '/v1/completions', payload: COMPLETION });
    await until(
      () => decode.find(slow.url)?.outstanding,
      (n) => n === 1,
    );
    const del = { method: 'DELETE' as const, url: `/instances?role=decode&url=${slow.url}` };
    const res = await app.inject(del);
    expect(res.statusCode).toBe(503);
    expect(res.json().error).toMatchObject({ code: 503, param: 'url' });
    expect(res.json().error.message).toBe(
      `decode instance ${slow.url} still has 1 requests in flight after 0.2 s: it takes no new ones and is dropped once they finish`,
    );
    expect(decode.find(slow.url)?.draining).toBe(true);
    release.open();
    expect((await held).statusCode).toBe(200);
    expect(decode.find(slow.url)).toBeUndefined();
    expect((await app.inject(del)).statusCode).toBe(404);
  });

  it('keeps the last instance of a role, and names bad or unknown members', async () => {
    const only = await decodeInstance();
    const { app } = testRouter([only.url], [only.url]);
    const del = (payload: object) => app.inject({ method: 'DELETE', url: '/instances', payload });
    const last = await del({ role: 'prefill', url: only.url });
    expect(last.statusCode).toBe(409);
    expect(last.json().error.message).toMatch(/is the last prefill instance/);
    const unknown = await del({ role: 'decode', url: 'http://127.0.0.1:1' });
    expect([unknown.statusCode, unknown.json().error.param]).toEqual([404, 'url']);
    const badRole = await del({ role: 'both', url: only.url });
    expect([badRole.statusCode, badRole.json().error.param]).toEqual([400, 'role']);
    const badUrl = await app.inject({
      method: 'POST',
      url: '/instances',
      payload: { role: 'decode', url: 'ftp://x' },
    });
    expect([badUrl.statusCode, badUrl.json().error.param]).toEqual([400, 'url']);
  });
});
