/**
 * The failure injector's choices: none at rate 0, all at rate 1, about R of them in between, only
 * the kinds asked for, the same sequence for the same seed and server, another for another; the
 * header forces a kind only when allowed, takes no draw, and a bad value is a 400 naming it.
 */
import { describe, expect, it } from 'vitest';
import { buildConfig, type ConfigInput } from '../../../src/config.js';
import { RingserveError } from '../../../src/errors.js';
import { FailureInjector } from '../../../src/server/main/http/failure-injection.js';

const injector = (input: ConfigInput, server = 0) =>
  new FailureInjector(buildConfig(input), server);

const draws = (inj: FailureInjector, n: number) =>
  Array.from({ length: n }, () => inj.pick(undefined));

describe('FailureInjector', () => {
  it('injects nothing by default and is inactive', () => {
    const inj = injector({});
    expect(inj.active).toBe(false);
    expect(draws(inj, 1000).every((k) => k === null)).toBe(true);
  });

  it('fails every request at rate 1 and about R of them at rate R, with only the kinds asked for', () => {
    const all = draws(injector({ failureRate: 1, failureKinds: 'unavailable,abort' }), 2000);
    expect(all.every((k) => k === 'unavailable' || k === 'abort')).toBe(true);
    expect(all.filter((k) => k === 'abort').length).toBeGreaterThan(800);
    expect(all.filter((k) => k === 'unavailable').length).toBeGreaterThan(800);
    const some = draws(injector({ failureRate: 0.25 }), 4000).filter((k) => k !== null);
    expect(some.length).toBeGreaterThan(850);
    expect(some.length).toBeLessThan(1150);
    for (const kind of ['rate_limit', 'unavailable', 'context_length', 'abort']) {
      expect(some.filter((k) => k === kind).length).toBeGreaterThan(150);
    }
  });

  it('draws the same sequence for the same seed and server, another for another seed or server', () => {
    const seq = (seed: number, server: number) =>
      draws(injector({ failureRate: 0.5, seed }, server), 200).join();
    expect(seq(7, 0)).toBe(seq(7, 0));
    expect(seq(7, 0)).not.toBe(seq(8, 0));
    expect(seq(7, 0)).not.toBe(seq(7, 1));
  });

  it('ignores the header unless --allow-failure-header', () => {
    expect(injector({}).pick('rate_limit')).toBeNull();
    expect(injector({}).pick('nonsense')).toBeNull();
  });

  it('honours the header when allowed, without taking a draw', () => {
    const forced = injector({ allowFailureHeader: true, failureRate: 0.5, seed: 3 });
    const plain = injector({ allowFailureHeader: true, failureRate: 0.5, seed: 3 });
    expect(forced.active).toBe(true);
    expect(forced.pick('context_length')).toBe('context_length');
    expect(forced.pick(' abort ')).toBe('abort');
    expect(draws(forced, 50)).toEqual(draws(plain, 50));
  });

  it('answers a bad header value with a 400 naming the header', () => {
    try {
      injector({ allowFailureHeader: true }).pick('teapot');
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(RingserveError);
      expect((error as RingserveError).statusCode).toBe(400);
      expect((error as RingserveError).param).toBe('x-ringserve-fail');
    }
  });
});
