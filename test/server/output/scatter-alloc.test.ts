import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { fixturePath } from '../../shm/helpers.js';

interface Probe {
  tokens: number;
  grownBytes: number;
  retainedBytes: number;
  gcsDuring: number;
  columnsOk: boolean;
}

/**
 * Runs the probe in its own process: it needs --expose-gc, and a young generation large enough
 * (64 MB semi-spaces) that no scavenge hides garbage during the measured loop.
 */
function probe(...args: string[]): Probe {
  const out = execFileSync(
    process.execPath,
    [
      '--expose-gc',
      '--min-semi-space-size=64',
      '--max-semi-space-size=64',
      fixturePath('output-scatter-alloc.mjs'),
      ...args,
    ],
    { encoding: 'utf8', timeout: 60_000 },
  );
  return JSON.parse(out.trim().split('\n').pop()!) as Probe;
}

describe('scatter path allocation', () => {
  it('allocates nothing per token: ~100k tokens with logprobs, masks, routing and stop strings', () => {
    const control = probe('--control');
    // The probe sees per-token garbage when there is some (one small object per token)...
    expect(control.gcsDuring).toBe(0);
    expect(control.grownBytes).toBeGreaterThan(control.tokens * 16);
    // ...and the scatter path itself leaves less than half a byte per token (one object would be 16+).
    const run = probe();
    expect(run.columnsOk).toBe(true);
    expect(run.gcsDuring).toBe(0);
    expect(run.grownBytes).toBeLessThan(run.tokens / 2);
    expect(run.retainedBytes).toBeLessThan(run.tokens / 2);
  });
});
