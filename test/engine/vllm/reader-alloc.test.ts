import { describe, expect, it } from 'vitest';
import { type AllocFigures, runAllocProbe } from '../../helpers/spawn-alloc-probe.js';

interface Probe extends AllocFigures {
  messages: number;
  tokens: number;
  ok: boolean;
}

const probe = (...args: string[]): Probe =>
  runAllocProbe<Probe>(new URL('fixtures/reader-alloc.mjs', import.meta.url), args);

describe('OutputsReader allocation', () => {
  it('allocates nothing per output: under 4 KB a message of 256 outputs', () => {
    const control = probe('--control');
    expect(control.gcsDuring).toBe(0);
    expect(control.grownBytes).toBeGreaterThan(control.tokens * 16);
    const run = probe('--outputs', '256');
    expect(run.ok).toBe(true);
    expect(run.gcsDuring).toBe(0);
    // What a message costs whatever its size (a DataView, scheduler_stats keys) is about 1.4 KB;
    // a single 16-byte object per output would add 4 KB to a message of 256.
    expect(run.grownBytes / run.messages).toBeLessThan(4096);
    expect(run.retainedBytes).toBeLessThan(run.tokens / 2);
  });
});
