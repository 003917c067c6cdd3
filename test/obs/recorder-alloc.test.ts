import { describe, expect, it } from 'vitest';
import { type AllocFigures, runAllocProbe } from '../helpers/spawn-alloc-probe.js';

interface Probe extends AllocFigures {
  tokens: number;
  requestsPerRound: number;
  generationTokens: number;
  expectedTokens: number;
}

const probe = (...args: string[]): Probe =>
  runAllocProbe<Probe>(new URL('fixtures/recorder-alloc.mjs', import.meta.url), args);

describe('request metrics allocation', () => {
  it('allocates nothing per token: ~100k tokens observed into TTFT, ITL and counters', () => {
    const control = probe('--control');
    expect(control.gcsDuring).toBe(0);
    expect(control.grownBytes).toBeGreaterThan(control.tokens * 16);
    const run = probe();
    expect(run.generationTokens).toBe(run.expectedTokens);
    expect(run.gcsDuring).toBe(0);
    expect(run.grownBytes).toBeLessThan(run.tokens / 2);
    expect(run.retainedBytes).toBeLessThan(run.tokens / 2);
  });

  it('allocates a few bytes per request at most when requests begin and finish', () => {
    // 40-token requests: 2560 begin and finish per round, slot meta rows written as the main
    // thread would. What remains is a handful of boxed doubles per finish, never per token.
    const run = probe('--tokens-per-request', '40');
    expect(run.generationTokens).toBe(run.expectedTokens);
    expect(run.gcsDuring).toBe(0);
    expect(run.grownBytes / run.requestsPerRound).toBeLessThan(512);
    expect(run.retainedBytes).toBeLessThan(run.tokens / 2);
  });
});
