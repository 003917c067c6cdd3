import { describe, expect, it } from 'vitest';
import { PositionShape, SimModel } from '../../src/sim/model.js';
import { getPreset } from '../../src/sim/presets.js';
import { Sampler } from '../../src/sim/sampler.js';
import { combine } from '../../src/wire/hash.js';
import { type Case, cases, denseKept, denseLogits } from './dense-reference.js';
import { type Collected, key, params, request, runAll, tinyConfig } from './helpers.js';

/**
 * The sampler works on a closed-form candidate stream; this test recomputes every case the slow,
 * obvious way over the whole (tiny) vocabulary, following vLLM v1's definitions, and demands the
 * same kept set (ids and order), the same sampled token and the same logprob (dense-reference.ts).
 */
const tiny = getPreset('tiny');

describe('sampler against a dense reference over the tiny vocabulary', () => {
  const model = new SimModel(tiny, 7, 0);
  const sampler = new Sampler(model);
  const shape = new PositionShape();
  const maskOut = new Int32Array(tiny.vocabSize);

  // Horizon 1000 sorts every event up front; 8 leaves most unsorted until a walk reaches them.
  it.each([1000, 8])('matches vLLM v1 semantics at many positions (sort horizon %i)', (horizon) => {
    const sampler = new Sampler(model, horizon);
    let checked = 0;
    let skippedBoundaries = 0;
    const allCases = cases();
    for (let position = 0; position < 120; position++) {
      model.shapeAt(combine(99, position), position, shape);
      const eosLogit = position % 10 === 0 ? 14 : -18;
      const c = allCases[position % allCases.length] as Case;
      for (const u of [0.001, 0.37, 0.9999]) {
        sampler.eosLogit = eosLogit;
        sampler.uniform = u;
        sampler.sample(shape, c.p, c.counts, c.suppress);
        const dense = denseKept(
          denseLogits(model, shape, eosLogit, c.p, c.counts, c.suppress),
          c.p,
        );
        const truncated = c.p.topK > 0 || c.p.topP < 1 || c.p.minP > 0;
        if (truncated) {
          expect(sampler.keptCount).toBe(dense.kept.length);
          sampler.writeKept(maskOut, 0);
          expect(Array.from(maskOut.subarray(0, sampler.keptCount))).toEqual(dense.kept);
        } else {
          expect(sampler.keptCount).toBe(0);
        }
        // The draw: first kept id whose cumulative probability exceeds u.
        let cum = 0;
        let expected = dense.kept[0] as number;
        let nearBoundary = false;
        for (let i = 0; i < dense.kept.length; i++) {
          const next = cum + (dense.keptProb[i] as number);
          if (Math.abs(next - u) < 1e-9) nearBoundary = true;
          if (u < next) {
            expected = dense.kept[i] as number;
            break;
          }
          cum = next;
        }
        if (nearBoundary) {
          skippedBoundaries++;
          continue;
        }
        expect(sampler.token).toBe(expected);
        const prob = dense.keptProb[dense.kept.indexOf(expected)] as number;
        expect(sampler.logprob).toBeCloseTo(Math.log(prob), 9);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(300);
    expect(skippedBoundaries).toBeLessThan(5);
  });

  it('keeps the sampled token, at most top_k tokens, and the smallest prefix reaching top_p', () => {
    const p = params({ temperature: 1, topK: 30, topP: 0.8 });
    for (let position = 0; position < 300; position++) {
      model.shapeAt(combine(5, position), position, shape);
      sampler.eosLogit = -18;
      sampler.uniform = (position * 0.618) % 1;
      sampler.sample(shape, p, null, false);
      const kept = sampler.keptCount;
      expect(kept).toBeGreaterThanOrEqual(1);
      expect(kept).toBeLessThanOrEqual(30);
      sampler.writeKept(maskOut, 0);
      const ids = Array.from(maskOut.subarray(0, kept));
      expect(ids).toContain(sampler.token);
      const dense = denseKept(
        denseLogits(model, shape, -18, p, null, false),
        params({ topK: 30, topP: 1 }),
      );
      const z = dense.keptProb.reduce((a, b) => a + b, 0);
      const massOf = (n: number): number =>
        dense.kept
          .slice(0, n)
          .reduce((s, id) => s + (dense.keptProb[dense.kept.indexOf(id)] as number), 0) / z;
      // top_p respected: the kept set reaches 0.8 of the top-k mass (or is all of top-k), and
      // dropping its last token would fall short of it.
      if (kept < 30) expect(massOf(kept)).toBeGreaterThanOrEqual(0.8 - 1e-12);
      expect(massOf(kept - 1)).toBeLessThan(0.8);
    }
  });

  it('is greedy below temperature 1e-5: the argmax, logprob 0, a one-token kept set', () => {
    const p = params({ temperature: 0, topK: 0, topP: 1 });
    for (let position = 0; position < 50; position++) {
      model.shapeAt(combine(11, position), position, shape);
      sampler.eosLogit = -18;
      sampler.uniform = 0.5;
      sampler.sample(shape, p, null, false);
      const logits = denseLogits(model, shape, -18, p, null, false);
      let best = 0;
      for (let id = 1; id < logits.length; id++)
        if ((logits[id] as number) > (logits[best] as number)) best = id;
      expect(sampler.token).toBe(best);
      expect(sampler.logprob).toBe(0);
      expect(sampler.keptCount).toBe(1);
    }
  });
});

describe('sampling masks in engine outputs', () => {
  it('contain the sampled token in every row, at most top_k ids, none when nothing truncates', () => {
    const reqs = [
      request(1, { topK: 5, topP: 1, maxTokens: 200, ignoreEos: true }),
      request(2, { topK: 0, topP: 0.8, maxTokens: 200, ignoreEos: true }),
      request(3, { topK: 0, topP: 1, minP: 0.1, maxTokens: 200, ignoreEos: true }),
      request(4, { topK: 0, topP: 1, maxTokens: 50, ignoreEos: true }),
    ];
    const results = runAll(tinyConfig(), reqs);
    for (const slot of [1, 2, 3]) {
      const c = results.get(key(0, slot)) as Collected;
      expect(c.tokens).toHaveLength(200);
      c.masks.forEach((mask, i) => {
        expect(mask).toContain(c.tokens[i]);
        expect(new Set(mask).size).toBe(mask.length);
        if (slot === 1) expect(mask.length).toBeLessThanOrEqual(5);
      });
    }
    expect((results.get(key(0, 4)) as Collected).masks.every((m) => m.length === 0)).toBe(true);
  });
});
