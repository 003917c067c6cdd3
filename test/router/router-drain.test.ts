/**
 * `ringserve router`'s drain (src/router/router-drain.ts) on a listening Router in front of fake
 * instances: requests in flight finish, a request on a connection still open gets the draining
 * 503, a new connection is refused, and at the timeout the requests still running are cut.
 */

import { Client, errors, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/obs/log.js';
import { Router } from '../../src/router/router.js';
import { parseRouterArgs } from '../../src/router/router-config.js';
import { until } from '../until.js';
import { gate } from './fake-instances.js';
import {
  decodeColumns,
  decodeEvents,
  type FakeInstance,
  fakeInstance,
  PROMPT,
  prefillColumns,
} from './pd-fakes.js';

const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

const CANNED = { tokens: 4 };
const BODY = JSON.stringify({ token_ids: PROMPT, sampling_params: { max_tokens: 4 } });
const STREAM = JSON.stringify({
  token_ids: PROMPT,
  stream: true,
  sampling_params: { max_tokens: 4 },
});

async function routed(): Promise<{ router: Router; url: string; decode: FakeInstance }> {
  const prefill = await fakeInstance(prefillColumns(CANNED));
  const decode = await fakeInstance(decodeColumns(CANNED), decodeEvents(CANNED, 1));
  closers.push(prefill.close, decode.close);
  const config = parseRouterArgs(
    ['--prefill', prefill.url, '--decode', decode.url, '--port', '0', '--log-level', 'silent'],
    {},
  );
  const router = new Router(config, silentLogger());
  const port = await router.start();
  closers.push(() => router.close());
  return { router, url: `http://127.0.0.1:${port}`, decode };
}

/** A client of its own connection (one at a time), closed after the test. */
function client(url: string): Client {
  const c = new Client(url, { pipelining: 1 });
  closers.push(() => c.destroy());
  return c;
}

function generate(c: Client, body = BODY) {
  return c.request({
    path: '/inference/v1/generate',
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
}

describe('ringserve router drain', () => {
  it('lets requests in flight finish and refuses new ones, then closes', async () => {
    const { router, url, decode } = await routed();
    // A stream held after its first event, and a plain request held before its answer.
    const streamGate = gate();
    decode.between = () => streamGate.wait;
    const stream = await generate(client(url), STREAM);
    expect(stream.statusCode).toBe(200);
    const events: string[] = [];
    const streamDone = (async () => {
      for await (const chunk of stream.body) events.push(String(chunk));
    })();
    await until(() => events.length > 0, Boolean, { what: 'the first event' });
    const answerGate = gate();
    decode.hold = answerGate.wait;
    const a = client(url);
    const plain = generate(a);
    await until(() => decode.bodies.length === 2, Boolean, { what: 'the held decode call' });

    let drained: number | null = null;
    const draining = router.drain(30_000).then((cut) => {
      drained = cut;
    });
    // New connections are refused: the listener is closed.
    await expect(request(`${url}/health`)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    answerGate.open();
    const answer = await plain;
    expect(answer.statusCode).toBe(200);
    expect(((await answer.body.json()) as { choices: unknown[] }).choices).toHaveLength(1);
    // The same keep-alive connection: the draining 503, /health too, and the connection closes.
    const refused = await a.request({ path: '/health', method: 'GET' });
    expect(refused.statusCode).toBe(503);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.headers.connection).toBe('close');
    expect(((await refused.body.json()) as { error: object }).error).toMatchObject({
      code: 503,
      message: 'the server is draining or shutting down',
    });
    // The stream is still in flight, so the drain goes on.
    await new Promise((r) => setTimeout(r, 50));
    expect(drained).toBeNull();
    streamGate.open();
    await streamDone;
    expect(events.join('')).toMatch(/data: \[DONE\]\n\n$/);
    await draining;
    expect(drained).toBe(0);
  });

  it('cuts the requests still in flight when the drain timeout ends', async () => {
    const { router, url, decode } = await routed();
    const never = gate();
    closers.push(async () => never.open());
    decode.hold = never.wait;
    // Settled into a value at once: it fails while the drain is awaited.
    const held = generate(client(url)).then(
      () => null,
      (error: unknown) => error,
    );
    await until(() => decode.bodies.length === 1, Boolean, { what: 'the held decode call' });
    const started = Date.now();
    expect(await router.drain(200)).toBe(1);
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    expect(await held).toBeInstanceOf(errors.SocketError);
  });
});
