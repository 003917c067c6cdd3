import { readFileSync, writeFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { listErrorCodes } from '../../src/errors.js';
import {
  addonLoadError,
  FUTEX_NOT_EQUAL,
  FUTEX_TIMED_OUT,
  FUTEX_WOKEN,
  shmAddon,
} from '../../src/shm/native.js';
import { until } from '../until.js';
import { type Fixture, startFixture, stopFixture, uniqueRegionName } from './helpers.js';

const addon = shmAddon();
const created: string[] = [];
let fixture: Fixture | undefined;

function create(bytes: number): { name: string; sab: SharedArrayBuffer } {
  const name = uniqueRegionName('native');
  created.push(name);
  return { name, sab: addon.create(name, bytes) };
}

afterEach(async () => {
  await stopFixture(fixture);
  fixture = undefined;
  for (const name of created.splice(0)) addon.unlink(name);
});

describe('native addon', () => {
  it('creates a zero-filled region as a real SharedArrayBuffer that a second mapping shares', () => {
    const { name, sab } = create(8192);
    expect(sab).toBeInstanceOf(SharedArrayBuffer);
    expect(sab.byteLength).toBe(8192);
    const first = new Int32Array(sab);
    expect(first.every((word) => word === 0)).toBe(true);
    const second = new Int32Array(addon.open(name));
    Atomics.store(first, 5, 42);
    expect(Atomics.load(second, 5)).toBe(42);
    expect(Atomics.add(second, 5, 1)).toBe(42);
    expect(Atomics.load(first, 5)).toBe(43);
  });

  it('answers coded errors: exists, not found, bad name, bad size', () => {
    const { name } = create(4096);
    expect(() => addon.create(name, 4096)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_EXISTS' }),
    );
    expect(() => addon.open(uniqueRegionName('absent'))).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_NOT_FOUND' }),
    );
    expect(() => addon.open('../etc')).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_BAD_NAME' }),
    );
    expect(() => addon.create(uniqueRegionName('zero'), 0)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_BAD_ARGUMENT' }),
    );
  });

  it('unlinks: true once, then false; a mapping outlives the name', () => {
    const { name, sab } = create(4096);
    expect(addon.unlink(name)).toBe(true);
    expect(addon.unlink(name)).toBe(false);
    const words = new Int32Array(sab);
    Atomics.store(words, 0, 7);
    expect(Atomics.load(words, 0)).toBe(7);
  });

  it('futexWait reports not-equal at once and times out after its bound', () => {
    const { sab } = create(4096);
    const words = new Int32Array(sab);
    expect(addon.futexWait(words, 0, 1, 10_000)).toBe(FUTEX_NOT_EQUAL);
    const started = performance.now();
    expect(addon.futexWait(words, 0, 0, 30)).toBe(FUTEX_TIMED_OUT);
    expect(performance.now() - started).toBeGreaterThanOrEqual(25);
    expect(addon.futexWake(words, 0, 1)).toBe(0);
    expect(() => addon.futexWait(words, 1024, 0, 1)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_BAD_ARGUMENT' }),
    );
    expect(() => addon.futexWait(words, 0, 0, Number.POSITIVE_INFINITY)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_BAD_ARGUMENT' }),
    );
  });

  it('refuses NaN and missing counts, sizes and timeouts before they reach a syscall', () => {
    const { sab } = create(4096);
    const words = new Int32Array(sab);
    const badArgument = expect.objectContaining({ code: 'RS_ERR_SHM_BAD_ARGUMENT' });
    expect(() => addon.futexWake(words, 0, Number.NaN)).toThrow(badArgument);
    expect(() => (addon.futexWake as (a: Int32Array, i: number) => number)(words, 0)).toThrow(
      badArgument,
    );
    expect(() => addon.futexWait(words, Number.NaN, 0, 1)).toThrow(badArgument);
    expect(() => addon.futexWait(words, 0, 0, Number.NaN)).toThrow(badArgument);
    expect(() => addon.create(uniqueRegionName('nan'), Number.NaN)).toThrow(badArgument);
    // Infinity and past INT_MAX mean "all waiters"; there are none.
    expect(addon.futexWake(words, 0, Number.POSITIVE_INFINITY)).toBe(0);
  });

  it('refuses an over-long name without converting it, and an empty region on open', () => {
    expect(() => addon.open('a'.repeat(1_000_000))).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_BAD_NAME' }),
    );
    // A zero-length object in /dev/shm (what shm_open + a crash before ftruncate leaves).
    const name = uniqueRegionName('empty');
    created.push(name);
    writeFileSync(`/dev/shm/${name}`, '');
    expect(() => addon.open(name)).toThrow(expect.objectContaining({ code: 'RS_ERR_SHM_OPEN' }));
  });

  it('puts the errno and its text (strerror_r) on a failed call', () => {
    let error: (Error & { code?: string; errno?: number }) | undefined;
    try {
      addon.open(uniqueRegionName('absent'));
    } catch (e) {
      error = e as typeof error;
    }
    expect(error).toBeInstanceOf(Error);
    expect(error?.code).toBe('RS_ERR_SHM_NOT_FOUND');
    expect(error?.errno).toBe(2); // ENOENT
    expect(error?.message).toMatch(/^RS_ERR_SHM_NOT_FOUND: .*\(No such file or directory\)$/);
  });

  it('throws only codes registered in src/errors.ts', () => {
    const cc = new URL('../../src/shm/native/ringserve_shm.cc', import.meta.url);
    const literals = readFileSync(cc, 'utf8').match(/"RS_ERR_[A-Z_]+"/g) ?? [];
    const thrown = new Set(literals.map((c) => c.slice(1, -1)));
    expect(thrown.size).toBeGreaterThan(5);
    const registered = listErrorCodes().map((info) => info.code);
    for (const code of thrown) expect(registered).toContain(code);
  });

  it('watchGc adds each GC pause of this thread into the given slots until unwatchGc', () => {
    const slots = new Float64Array(new SharedArrayBuffer(8 * 8));
    expect(() => addon.watchGc(slots, 0, 1, 8)).toThrow(/^RS_ERR_SHM_BAD_ARGUMENT: index outside/);
    expect(() => addon.watchGc(slots, -1, 1, 2)).toThrow(/^RS_ERR_SHM_BAD_ARGUMENT: expected/);
    expect(() =>
      (addon.watchGc as unknown as (...a: unknown[]) => void)(new Float32Array(8), 0, 1, 2),
    ).toThrow(/^RS_ERR_SHM_BAD_ARGUMENT/);
    const garbage = () => {
      let kept: object[] = [];
      for (let i = 0; i < 1_000_000; i++) {
        kept.push({ i });
        if (kept.length > 50_000) kept = [];
      }
      return kept.length;
    };
    slots[4] = 1; // a total carried over from a predecessor
    addon.watchGc(slots.subarray(4), 0, 1, 2);
    garbage();
    const [seconds, count, longest] = [slots[4]!, slots[5]!, slots[6]!];
    expect(count).toBeGreaterThan(0);
    expect(seconds).toBeGreaterThan(1);
    expect(longest).toBeGreaterThan(0);
    expect(longest).toBeLessThanOrEqual(seconds - 1);
    expect(slots.subarray(0, 4).every((v) => v === 0)).toBe(true);
    expect(addon.unwatchGc()).toBe(true);
    garbage();
    expect(slots[5]).toBe(count);
    expect(addon.unwatchGc()).toBe(false);
  });

  it('futexWake reaches a waiter in another process', async () => {
    const { name, sab } = create(4096);
    const words = new Int32Array(sab);
    fixture = startFixture('shm-futex-waiter.mjs', [name, '20000']);
    await fixture.waitFor('ready', 10_000);
    // The waiter announced itself just before entering the futex: wake until one is woken.
    await until(
      () => addon.futexWake(words, 0, 1),
      (woken) => woken === 1,
      { intervalMs: 5, what: 'the waiter to block on the futex' },
    );
    const done = await fixture.waitFor('done', 10_000);
    expect(done.result).toBe(FUTEX_WOKEN);
  });
});

describe('an addon built for another Node', () => {
  // Node 24.22.3's own words on loading the addon that npm ci had built for Node 20 (issue 17).
  const dlopenError = new Error(
    "The module '/srv/ringserve/build/Release/ringserve_shm.node'\n" +
      'was compiled against a different Node.js version using\n' +
      'NODE_MODULE_VERSION 115. This version of Node.js requires\n' +
      'NODE_MODULE_VERSION 137. Please try re-compiling or re-installing\n' +
      'the module (for instance, using `npm rebuild` or `npm install`).',
  );
  const running = { version: 'v24.22.3', modules: '137', execPath: '/opt/node24/bin/node' };

  it('names the Node it was built for, the one running, and the command that rebuilds it', () => {
    const builtFor = { node: 'v20.20.2', modules: '115', execPath: '/usr/bin/node' };
    const error = addonLoadError('/srv/ringserve', dlopenError, builtFor, running);
    expect(error.code).toBe('RS_ERR_ADDON_MISSING');
    expect(error.message).toContain('for the running Node v24.22.3 (NODE_MODULE_VERSION 137)');
    expect(error.message).toContain(
      'built for Node v20.20.2 (NODE_MODULE_VERSION 115, /usr/bin/node)',
    );
    expect(error.message).toContain(
      '`/opt/node24/bin/node /srv/ringserve/scripts/build-addon.mjs`',
    );
  });

  it('falls back to the ABI number when no build record matches, and keeps other causes', () => {
    const stale = { node: 'v22.1.0', modules: '127', execPath: '/usr/local/bin/node' };
    const error = addonLoadError('/srv/ringserve', dlopenError, stale, running);
    expect(error.message).toContain('built for NODE_MODULE_VERSION 115;');
    const other = addonLoadError('/srv/ringserve', new Error('invalid ELF header'), null, running);
    expect(other.code).toBe('RS_ERR_ADDON_MISSING');
    expect(other.message).toContain('(invalid ELF header)');
  });
});
