import { describe, expect, it } from 'vitest';
import { type AllocFigures, runAllocProbe } from '../helpers/spawn-alloc-probe.js';

/**
 * The engine's hot loop allocates nothing per token (the house rule for hot paths). Measured in a
 * child process running the compiled engine with a large fixed young generation, so the bytes
 * allocated in the window are exactly the growth of new space. The window (1000 steps of 96
 * sequences) sees no sequence-array growth, so the steady state measures ~0.02 bytes per token
 * (the measuring code itself). Budget: 2 bytes per token; one boxed double per token would be 16,
 * an object per token more. Up to three processes per mode, in case one lands in a JIT state that
 * is not the steady one. The engine is measured without an output budget (plain; full: logprobs,
 * masks, routing; full with the 5 best candidates' logprobs per token; and full with long prompts
 * prefilled beside the decodes, asking prompt logprobs with the 5 best candidates, where a token
 * is a generated token or a prompt position), and under one
 * (src/engine/output-room.ts) with one of two API servers held every step, so the charging,
 * skipping and holding paths run in the window too.
 */
const ENGINE = new URL('./fixtures/engine-alloc.mjs', import.meta.url);
const HELD = new URL('../engine/fixtures/room-alloc.mjs', import.meta.url);
const BYTES_PER_TOKEN_BUDGET = 2;

interface Measurement extends AllocFigures {
  tokens: number;
  /** Steps in which an API server was held (the held mode). */
  held?: number;
  /** Prompt positions emitted in the window (the prompt mode; counted in tokens). */
  promptPositions?: number;
}

const MODES = [
  { mode: 'plain', fixture: ENGINE, args: ['plain'] },
  { mode: 'full', fixture: ENGINE, args: ['full'] },
  { mode: 'full, top 5 logprobs', fixture: ENGINE, args: ['top'] },
  { mode: 'full, prompt logprobs 5', fixture: ENGINE, args: ['prompt'] },
  { mode: 'a server held', fixture: HELD, args: [] },
] as const;

describe('engine hot loop allocation', () => {
  for (const { mode, fixture, args } of MODES) {
    it(`allocates under ${BYTES_PER_TOKEN_BUDGET} bytes per token (${mode})`, () => {
      const seen: string[] = [];
      let best = Number.POSITIVE_INFINITY;
      for (let attempt = 0; attempt < 3 && best >= BYTES_PER_TOKEN_BUDGET; attempt++) {
        const m = runAllocProbe<Measurement>(fixture, [...args]);
        expect(m.tokens).toBeGreaterThan(50_000);
        if (m.held !== undefined) expect(m.held).toBe(1000);
        // 160 prompt positions a step, all of the window (see the fixture).
        if (m.promptPositions !== undefined) expect(m.promptPositions).toBeGreaterThan(150_000);
        if (m.gcsDuring > 0) continue; // a scavenge in the window makes the figure meaningless
        const perToken = m.newSpaceBytes / m.tokens;
        seen.push(perToken.toFixed(3));
        best = Math.min(best, perToken);
      }
      expect(best, `bytes per token over attempts: ${seen.join(', ')}`).toBeLessThan(
        BYTES_PER_TOKEN_BUDGET,
      );
    });
  }
});
