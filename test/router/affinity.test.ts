/**
 * Session affinity in UpstreamPool.acquire(): a session sticks to one instance, sessions spread
 * evenly, and a membership change (an instance added, removed or failing its health check) moves
 * only the sessions it must. A mod-N placement fails the same movement check (negative control).
 * Without a session key, acquire() balances by outstanding requests as before.
 */
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { hashKey, SESSION_HEADER, sessionKey } from '../../src/router/affinity.js';
import { UpstreamPool } from '../../src/router/upstreams.js';

const open: { close(): Promise<unknown> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

const SESSIONS = Array.from({ length: 10_000 }, (_, i) => `session-${i}`);

function pool(urls: string[]): UpstreamPool {
  const p = new UpstreamPool('decode', urls, 60_000);
  open.push(p);
  return p;
}

const urls = (n: number, from = 0) =>
  Array.from({ length: n }, (_, i) => `http://10.0.0.${from + i + 1}:8200`);

/** Where each session goes (acquired and released at once). */
function placement(p: UpstreamPool): string[] {
  return SESSIONS.map((s) => {
    const u = p.acquire(s);
    p.release(u);
    return u.url;
  });
}

/** A /health that answers 200 for every path, so each `http://host:port/<name>` is an instance. */
async function healthyHost(): Promise<string> {
  const app = Fastify();
  app.get('/*', async () => '');
  open.push(app);
  return app.listen({ host: '127.0.0.1', port: 0 });
}

describe('session affinity', () => {
  it('sends a session to the same instance every time, whatever the load', () => {
    const p = pool(urls(4));
    const first = p.acquire('abc');
    // Load on the chosen instance does not move the session (least-outstanding would).
    for (let i = 0; i < 20; i++) expect(p.acquire('abc')).toBe(first);
    const other = p.acquire();
    expect(other).not.toBe(first);
  });

  it('spreads sessions evenly over the instances', () => {
    const counts = new Map<string, number>();
    for (const url of placement(pool(urls(4)))) counts.set(url, (counts.get(url) ?? 0) + 1);
    expect(counts.size).toBe(4);
    for (const n of counts.values()) {
      expect(n / SESSIONS.length).toBeGreaterThan(0.22);
      expect(n / SESSIONS.length).toBeLessThan(0.28);
    }
  });

  it('moves only the sessions of an instance that fails its check, and brings them back', () => {
    const p = pool(urls(4));
    const before = placement(p);
    const down = p.instances[1]!;
    down.healthy = false;
    const during = placement(p);
    for (let i = 0; i < SESSIONS.length; i++) {
      if (before[i] === down.url) expect(during[i]).not.toBe(down.url);
      else expect(during[i]).toBe(before[i]);
    }
    // Its sessions spread over the other three rather than piling onto one.
    const movedTo = new Set(during.filter((_, i) => before[i] === down.url));
    expect(movedTo.size).toBe(3);
    down.healthy = true;
    expect(placement(p)).toEqual(before);
  });

  it('moves about 1/(n+1) of the sessions to an added instance, and none elsewhere', async () => {
    const host = await healthyHost();
    const members = Array.from({ length: 4 }, (_, i) => `${host}/i${i}`);
    const p = pool(members);
    const before = placement(p);
    const added = await p.add(`${host}/i4/`);
    expect([added.url, added.healthy]).toEqual([`${host}/i4`, true]);
    const after = placement(p);
    let moved = 0;
    for (let i = 0; i < SESSIONS.length; i++) {
      if (after[i] === before[i]) continue;
      moved++;
      expect(after[i]).toBe(added.url);
    }
    expect(moved / SESSIONS.length).toBeGreaterThan(0.15);
    expect(moved / SESSIONS.length).toBeLessThan(0.25);
  });

  it('moves only the sessions of a removed instance', async () => {
    const p = pool(urls(5));
    const before = placement(p);
    const gone = p.instances[3]!;
    expect(await p.drain(gone, 1000)).toBe(true);
    expect(p.instances.map((u) => u.url)).not.toContain(gone.url);
    const after = placement(p);
    for (let i = 0; i < SESSIONS.length; i++) {
      if (before[i] !== gone.url) expect(after[i]).toBe(before[i]);
    }
  });

  it('negative control: a mod-N placement moves most sessions when one instance is added', () => {
    const modN = (n: number) => SESSIONS.map((s) => hashKey(s) % n);
    const four = modN(4);
    const five = modN(5);
    const moved = four.filter((x, i) => x !== five[i]).length / SESSIONS.length;
    // What the check above bounds by 0.25, mod-N fails by far (it moves ~4/5).
    expect(moved).toBeGreaterThan(0.6);
  });

  it('takes the least outstanding instance without a session, the first listed on ties', () => {
    const p = pool(urls(3));
    const [a, b, c] = p.instances;
    expect(p.acquire()).toBe(a);
    expect(p.acquire()).toBe(b);
    expect(p.acquire()).toBe(c);
    p.release(b!);
    expect(p.acquire()).toBe(b);
    a!.healthy = false;
    p.release(b!);
    p.release(c!);
    expect(p.acquire()).toBe(b);
  });

  it('reads X-Session-ID, ignoring an empty or oversized one', () => {
    expect(sessionKey({ [SESSION_HEADER]: 'u-1' })).toBe('u-1');
    expect(sessionKey({})).toBeUndefined();
    expect(sessionKey({ [SESSION_HEADER]: '' })).toBeUndefined();
    expect(sessionKey({ [SESSION_HEADER]: 'x'.repeat(1025) })).toBeUndefined();
  });

  it('sends no session to an instance that drains, and refuses when none takes requests', async () => {
    const p = pool(urls(2));
    const held = p.acquire('s');
    const other = p.instances.find((u) => u !== held)!;
    const drained = p.drain(held, 5_000);
    expect(p.acquire('s')).toBe(other);
    other.healthy = false;
    expect(() => p.acquire('s')).toThrow(/no healthy decode instance/);
    expect(p.anyHealthy).toBe(false);
    p.release(held);
    expect(await drained).toBe(true);
  });
});
