import { describe, expect, it } from 'vitest';
import { type AllocFigures, runAllocProbe } from '../helpers/spawn-alloc-probe.js';

/**
 * The router's main thread holds no per-token object (issue 32): it proxies 16 requests of 8,000
 * merged tokens and 16 of 8 (test/router/fixtures/router-alloc.mjs), and the young generation's
 * growth per request differs by under 2 bytes per merged token (one small object per token would
 * be 16 or more; the control mode makes one, and the probe sees it). What a request costs whatever
 * its length (fastify, undici, the tasks of its merge) is the same in both and cancels out.
 */
interface Probe extends AllocFigures {
  longBytes: number;
  shortBytes: number;
  longTokens: number;
  shortTokens: number;
  ok: boolean;
}

const FIXTURE = new URL('./fixtures/router-alloc.mjs', import.meta.url);
const BYTES_PER_TOKEN_BUDGET = 2;

const perToken = (m: Probe): number =>
  (m.longBytes - m.shortBytes) / (m.longTokens - m.shortTokens);

describe('router main thread allocation', () => {
  it(`allocates under ${BYTES_PER_TOKEN_BUDGET} bytes per merged token while it proxies long answers`, () => {
    // The control allocates a young object per token, so a scavenge may land inside its window
    // (seen on Node 24 in CI) and hide its growth: up to three processes for one without.
    let control = runAllocProbe<Probe>(FIXTURE, ['--control']);
    for (let attempt = 1; attempt < 3 && control.gcsDuring > 0; attempt++) {
      control = runAllocProbe<Probe>(FIXTURE, ['--control']);
    }
    expect(control.ok).toBe(true);
    expect(control.gcsDuring).toBe(0);
    expect(perToken(control)).toBeGreaterThan(16);
    const seen: string[] = [];
    let best = Number.POSITIVE_INFINITY;
    // Up to three processes, in case one lands in a JIT state that is not the steady one.
    for (let attempt = 0; attempt < 3 && best >= BYTES_PER_TOKEN_BUDGET; attempt++) {
      const m = runAllocProbe<Probe>(FIXTURE);
      expect(m.ok).toBe(true);
      if (m.gcsDuring > 0) continue;
      seen.push(perToken(m).toFixed(3));
      best = Math.min(best, perToken(m));
    }
    expect(best, `bytes per merged token over attempts: ${seen.join(', ')}`).toBeLessThan(
      BYTES_PER_TOKEN_BUDGET,
    );
  });
});
