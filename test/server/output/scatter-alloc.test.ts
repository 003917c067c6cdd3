import { describe, expect, it } from 'vitest';
import { type AllocFigures, runAllocProbe } from '../../helpers/spawn-alloc-probe.js';

interface Probe extends AllocFigures {
  tokens: number;
  columnsOk: boolean;
}

const probe = (...args: string[]): Probe =>
  runAllocProbe<Probe>(new URL('../../fixtures/output-scatter-alloc.mjs', import.meta.url), args);

describe('scatter path allocation', () => {
  it('allocates nothing per token: ~100k tokens with logprobs, masks, routing, stop strings and text', () => {
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
