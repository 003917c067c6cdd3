import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

interface Probe {
  tokens: number;
  requestsPerRound: number;
  grownBytes: number;
  retainedBytes: number;
  gcsDuring: number;
  generationTokens: number;
  expectedTokens: number;
}

/** Runs the probe in its own process (--expose-gc, 64 MB semi-spaces: no scavenge hides garbage). */
function probe(...args: string[]): Probe {
  const out = execFileSync(
    process.execPath,
    [
      '--expose-gc',
      '--min-semi-space-size=64',
      '--max-semi-space-size=64',
      fileURLToPath(new URL('fixtures/recorder-alloc.mjs', import.meta.url)),
      ...args,
    ],
    { encoding: 'utf8', timeout: 60_000 },
  );
  return JSON.parse(out.trim().split('\n').pop()!) as Probe;
}

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
