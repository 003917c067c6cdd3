/**
 * The router's merge threads (issue 32) against canned instances: every form of the answer is
 * byte for byte what the main-thread merge wrote before (packed, legacy, msgpack, uint8 and
 * uint16 rows, prompt logprobs packed and in vLLM's list, streams packed and legacy in chunks of
 * any size); a merge thread that dies fails the requests it held with a coded 500, and only those;
 * its replacement takes new requests.
 */
import { request as httpRequest } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/obs/log.js';
import { MergePool } from '../../src/router/merge-pool.js';
import { buildRouterApp } from '../../src/router/router-app.js';
import { RouterMetrics } from '../../src/router/router-metrics.js';
import { UpstreamPool } from '../../src/router/upstreams.js';
import { until } from '../until.js';
import {
  type Canned,
  decodeColumns,
  decodeEvents,
  type FakeInstance,
  fakeInstance,
  mainThreadAnswer,
  mainThreadStream,
  PROMPT,
  prefillColumns,
} from './pd-fakes.js';

const open: { close(): Promise<unknown> }[] = [];
/** The merge threads and fakes run in this process: polled every 5 ms. */
const SOON = { intervalMs: 5 };
afterEach(async () => {
  for (const s of open.splice(0).reverse()) await s.close();
});

interface Routed {
  url: string;
  prefill: FakeInstance;
  decode: FakeInstance;
  metrics: RouterMetrics;
}

/** A router (listening: streams need a socket) in front of canned instances. */
async function routed(c: Canned, per = 3, merge?: MergePool): Promise<Routed> {
  const prefill = await fakeInstance(prefillColumns(c));
  const decode = await fakeInstance(decodeColumns(c), decodeEvents(c, per));
  const pools = [prefill.url, decode.url].map(
    (url, i) => new UpstreamPool(i === 0 ? 'prefill' : 'decode', [url], 60_000),
  );
  const metrics = new RouterMetrics();
  const pair = { prefill: pools[0]!, decode: pools[1]!, metrics, ...(merge ? { merge } : {}) };
  const app = buildRouterApp(pair, { bodyLimitBytes: 1 << 20, apiKey: null, log: silentLogger() });
  open.push(prefill, decode, {
    close: async () => Promise.all([app.close(), ...pools.map((p) => p.close())]),
  });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return { url, prefill, decode, metrics };
}

function body(extra: Record<string, unknown> = {}, k = -1): Record<string, unknown> {
  const sp: Record<string, unknown> = { max_tokens: 64, logprobs: 1 };
  if (k >= 0) sp.prompt_logprobs = k;
  return { token_ids: PROMPT, sampling_params: sp, ...extra };
}

async function post(url: string, b: Record<string, unknown>, id: string, accept?: string) {
  const res = await httpRequest(`${url}/inference/v1/generate`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-request-id': id,
      ...(accept === undefined ? {} : { accept }),
    },
    body: JSON.stringify(b),
  });
  const bytes = Buffer.from(await res.body.arrayBuffer());
  return { status: res.statusCode, type: String(res.headers['content-type']), bytes };
}

describe('router merge threads', () => {
  const FORMS = [
    { form: 'packed', extra: {}, accept: undefined },
    { form: 'legacy', extra: { packed: false }, accept: undefined },
    { form: 'msgpack', extra: {}, accept: 'application/msgpack' },
  ] as const;

  for (const wide of [false, true]) {
    for (const { form, extra, accept } of FORMS) {
      it(`answers what the main-thread merge did: ${form}, ${wide ? 'uint16' : 'uint8'} rows`, async () => {
        const c = { tokens: 200, wide };
        const r = await routed(c);
        const b = body({ ...extra, kv_transfer_params: { client: 1 } });
        const res = await post(r.url, b, `id-${form}`, accept);
        expect(res.status).toBe(200);
        expect(res.bytes.equals(mainThreadAnswer(c, form, `id-${form}`, b))).toBe(true);
        expect(r.decode.bodies[0]?.kv_transfer_params).toEqual(prefillColumns(c).kvTransferParams);
        expect(r.metrics.imported).toBe(1);
      });
    }
  }

  for (const { form, extra, accept } of FORMS) {
    it(`carries prompt logprobs as the main-thread merge did: ${form}`, async () => {
      const c = { tokens: 20, promptK: 2 };
      const r = await routed(c);
      const b = body(extra, 2);
      const res = await post(r.url, b, 'id-plp', accept);
      expect(res.status).toBe(200);
      expect(res.bytes.equals(mainThreadAnswer(c, form, 'id-plp', b))).toBe(true);
      // The legacy list needs the candidates: only then is the prefill answer asked in it.
      expect(r.prefill.bodies[0]?.packed).toBe(form !== 'legacy');
      expect(r.decode.bodies[0]?.sampling_params).toMatchObject({ prompt_logprobs: null });
      if (form === 'packed')
        expect(JSON.parse(res.bytes.toString()).prompt_logprobs).not.toBe(null);
    });
  }

  for (const legacy of [false, true]) {
    for (const per of [1, 7, 500]) {
      it(`streams what the main-thread merger did: ${legacy ? 'legacy' : 'packed'}, ${per} token(s) an event`, async () => {
        const c = { tokens: 120, wide: per === 7 };
        const r = await routed(c, per);
        // Events apart in time: each comes back on its own, in order.
        r.decode.between = () => new Promise((resolve) => setImmediate(resolve));
        const res = await post(r.url, body({ stream: true, packed: !legacy }), 'id-s');
        expect([res.status, res.type]).toEqual([200, 'text/event-stream']);
        expect(res.bytes.toString()).toBe(mainThreadStream(c, per, 'id-s', legacy).toString());
      });
    }
  }

  it('answers 502 in the contract body when the rows do not meet', async () => {
    // Decode rows from 11, the prefill's end at 9: position 10 is missing.
    const c = { tokens: 10 };
    const r = await routed(c);
    const cols = decodeColumns(c);
    const ch = cols.choices[0]!;
    const routing = { ...ch.routing!, start: 11 };
    const gap = await fakeInstance({ ...cols, choices: [{ ...ch, routing }] });
    open.push(gap);
    const pools = [r.prefill.url, gap.url].map(
      (url, i) => new UpstreamPool(i === 0 ? 'prefill' : 'decode', [url], 60_000),
    );
    const pair = { prefill: pools[0]!, decode: pools[1]!, metrics: new RouterMetrics() };
    const app = buildRouterApp(pair, {
      bodyLimitBytes: 1 << 20,
      apiKey: null,
      log: silentLogger(),
    });
    open.push({ close: async () => Promise.all([app.close(), ...pools.map((p) => p.close())]) });
    const res = await app.inject({
      method: 'POST',
      url: '/inference/v1/generate',
      payload: body(),
    });
    expect(res.statusCode).toBe(502);
    expect(res.json().error).toMatchObject({ code: 502, type: 'BadGatewayError' });
    expect(res.json().error.message).toMatch(/lacks routing rows: positions 10\.\.10 are missing/);
  });

  it('a merge thread that dies fails the requests it held with a coded 500, and only those', async () => {
    const merge = new MergePool({ threads: 2 });
    open.push(merge);
    const c = { tokens: 50 };
    const r = await routed(c, 5, merge);
    await until(
      () => merge.threads.length,
      (n) => n === 2,
      SOON,
    );
    let release = (): void => {};
    r.decode.hold = new Promise<void>((resolve) => {
      release = resolve;
    });
    // Lane 0 then lane 1 (fewest open): both decoded their prefill answer, both wait for decode.
    const first = post(r.url, body(), 'on-lane-0');
    await until(
      () => r.decode.bodies.length,
      (n) => n === 1,
      SOON,
    );
    const second = post(r.url, body(), 'on-lane-1');
    await until(
      () => r.decode.bodies.length,
      (n) => n === 2,
      SOON,
    );
    const dead = merge.threads[0]!;
    await dead.terminate();
    await until(
      () => merge.threads,
      (threads) => threads.length === 2 && !threads.includes(dead),
      { ...SOON, what: 'a new thread in place of the dead one' },
    );
    r.decode.hold = null;
    release();
    const [lost, kept] = await Promise.all([first, second]);
    expect(lost.status).toBe(500);
    expect(JSON.parse(lost.bytes.toString()).error).toMatchObject({
      code: 500,
      type: 'InternalServerError',
    });
    expect(JSON.parse(lost.bytes.toString()).error.message).toMatch(
      /^the router merge thread failed: /,
    );
    expect(kept.status).toBe(200);
    expect(kept.bytes.equals(mainThreadAnswer(c, 'packed', 'on-lane-1', body()))).toBe(true);
    // The replacement takes new requests, on either lane.
    for (const id of ['after-0', 'after-1']) {
      const res = await post(r.url, body(), id);
      expect(res.bytes.equals(mainThreadAnswer(c, 'packed', id, body()))).toBe(true);
    }
    expect(merge.openRequests).toBe(0);
  });

  it('a merge thread that dies mid-stream ends that stream with a coded error event', async () => {
    const merge = new MergePool({ threads: 1 });
    open.push(merge);
    const c = { tokens: 30 };
    const r = await routed(c, 5, merge);
    await until(
      () => merge.threads.length,
      (n) => n === 1,
      SOON,
    );
    let sent = 0;
    let resume = (): void => {};
    r.decode.between = async () => {
      if (++sent !== 2) return;
      // After two events: end the thread that holds the stream's merger, then go on.
      await new Promise<void>((resolve) => {
        resume = resolve;
      });
    };
    const streamed = post(r.url, body({ stream: true }), 'id-cut');
    await until(
      () => sent,
      (n) => n === 2,
      SOON,
    );
    const dead = merge.threads[0]!;
    await dead.terminate();
    await until(
      () => merge.threads,
      (threads) => threads.length === 1 && !threads.includes(dead),
      { ...SOON, what: 'a new thread in place of the dead one' },
    );
    resume();
    const res = await streamed;
    const events = res.bytes
      .toString()
      .split('\n\n')
      .filter((e) => e !== '');
    expect(events.at(-1)).toBe('data: [DONE]');
    const error = JSON.parse((events.at(-2) as string).slice(6)).error;
    expect(error).toMatchObject({ code: 500, type: 'InternalServerError' });
    expect(error.message).toMatch(/^the router merge thread failed: /);
    // The events before it are the merger's, untouched.
    const whole = mainThreadStream(c, 5, 'id-cut', false).toString();
    for (const e of events.slice(0, -2)) expect(whole).toContain(e);
  });
});
