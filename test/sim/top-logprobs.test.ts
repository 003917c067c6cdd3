import { describe, expect, it } from 'vitest';
import { PositionShape, SimModel } from '../../src/sim/model.js';
import { LOGPROB_FLOOR } from '../../src/sim/model-runner.js';
import { getPreset } from '../../src/sim/presets.js';
import { GREEDY_TEMPERATURE, Sampler } from '../../src/sim/sampler.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import { combine } from '../../src/wire/hash.js';
import { FinishReason } from '../../src/wire/types.js';
import { type Case, cases, denseKept, denseLogits } from './dense-reference.js';
import { type Collected, key, params, prompt, request, runAll, tinyConfig } from './helpers.js';

/**
 * The sampled token's rank and the top-k candidates (vLLM's sampled_token_ranks and LogprobsLists
 * columns 1..k), checked against an exhaustive enumeration of the tiny vocabulary: every token's
 * processed logprob computed densely (dense-reference.ts), the rank counted over all 1000 of them.
 */
const tiny = getPreset('tiny');

/** Each token's processed logprob: renormalised over the kept set, -Infinity outside it. */
function processedLogprobs(c: Case, eosLogit: number, model: SimModel, shape: PositionShape) {
  const logits = denseLogits(model, shape, eosLogit, c.p, c.counts, c.suppress);
  const out = new Float64Array(logits.length).fill(Number.NEGATIVE_INFINITY);
  const greedy = c.p.temperature < GREEDY_TEMPERATURE;
  const dense = denseKept(logits, greedy ? params({ temperature: 1, topK: 1, topP: 1 }) : c.p);
  dense.kept.forEach((id, i) => {
    out[id] = greedy ? 0 : Math.log(dense.keptProb[i] as number);
  });
  // Every token with mass, in descending logit: the order the top area follows past the kept set.
  const order = Array.from(logits.keys()).filter((id) => (logits[id] as number) > -Infinity);
  order.sort((a, b) => (logits[b] as number) - (logits[a] as number));
  return { lp: out, order };
}

describe('rank and top candidates against a dense enumeration of the tiny vocabulary', () => {
  const model = new SimModel(tiny, 7, 0);
  const shape = new PositionShape();
  const ids = new Int32Array(40);
  const lps = new Float32Array(40);
  const allCases = [...cases(), { p: params({ temperature: 0 }), counts: null, suppress: false }];

  it.each([1000, 8])('agree at every position and case (sort horizon %i)', (horizon) => {
    const sampler = new Sampler(model, horizon);
    let inTop = 0;
    for (let position = 0; position < 150; position++) {
      model.shapeAt(combine(99, position), position, shape);
      const eosLogit = position % 10 === 0 ? 14 : -18;
      const c = allCases[position % allCases.length] as Case;
      const { lp, order } = processedLogprobs(c, eosLogit, model, shape);
      for (const u of [0.001, 0.37, 0.9999]) {
        sampler.eosLogit = eosLogit;
        sampler.uniform = u;
        sampler.sample(shape, c.p, c.counts, c.suppress);
        const token = sampler.token;
        const own = lp[token] as number;
        let higher = 0;
        for (let id = 0; id < lp.length; id++) if ((lp[id] as number) > own) higher++;
        expect(sampler.rank).toBe(1 + higher);
        if (c.p.temperature < GREEDY_TEMPERATURE) expect(sampler.rank).toBe(1);
        for (const k of [1, 5, 20]) {
          const n = sampler.writeTop(ids, lps, 3, k);
          expect(n).toBe(k);
          const top = Array.from(ids.subarray(3, 3 + n));
          const topLp = Array.from(lps.subarray(3, 3 + n));
          expect(top).toEqual(order.slice(0, k));
          topLp.forEach((v, j) => {
            const want = Math.max(lp[top[j] as number] as number, LOGPROB_FLOOR);
            expect(v).toBeCloseTo(want, 4);
            if (j > 0) expect(v).toBeLessThanOrEqual(topLp[j - 1] as number);
          });
          expect(topLp.reduce((s, v) => s + Math.exp(v), 0)).toBeLessThanOrEqual(1 + 1e-5);
          // The sampled token, when among the k best, sits at its rank with its very logprob.
          const at = top.indexOf(token);
          expect(at >= 0).toBe(sampler.rank <= k);
          if (at >= 0) {
            expect(at).toBe(sampler.rank - 1);
            expect(topLp[at]).toBe(Math.fround(Math.max(sampler.logprob, LOGPROB_FLOOR)));
            inTop++;
          }
        }
      }
    }
    expect(inTop).toBeGreaterThan(500);
  });

  it('leaves the draw and the kept set as they were', () => {
    const sampler = new Sampler(model);
    const before = new Int32Array(tiny.vocabSize);
    const after = new Int32Array(tiny.vocabSize);
    const p = params({ topK: 40, topP: 0.9, temperature: 0.7 });
    for (let position = 0; position < 40; position++) {
      model.shapeAt(combine(3, position), position, shape);
      sampler.eosLogit = -18;
      sampler.uniform = 0.61;
      sampler.sample(shape, p, null, false);
      const token = sampler.token;
      const logprob = sampler.logprob;
      const rank = sampler.rank;
      sampler.writeKept(before, 0);
      sampler.writeTop(ids, lps, 0, 20);
      sampler.writeKept(after, 0);
      expect([sampler.token, sampler.logprob, sampler.rank]).toEqual([token, logprob, rank]);
      expect(after.subarray(0, sampler.keptCount)).toEqual(before.subarray(0, sampler.keptCount));
    }
  });
});

/** Checks one request's rows: ranks, top areas and their agreement with the sampled tokens. */
function expectTopRows(c: Collected, k: number): void {
  expect(c.tokens.length).toBeGreaterThan(0);
  c.tokens.forEach((token, i) => {
    const rank = c.ranks[i] as number;
    const top = c.topIds[i] as number[];
    const topLp = c.topLogprobs[i] as number[];
    expect(rank).toBeGreaterThanOrEqual(1);
    expect(top).toHaveLength(k);
    expect(new Set(top).size).toBe(k);
    for (let j = 1; j < k; j++) expect(topLp[j]).toBeLessThanOrEqual(topLp[j - 1] as number);
    expect(topLp.reduce((s, v) => s + Math.exp(v), 0)).toBeLessThanOrEqual(1 + 1e-5);
    const at = top.indexOf(token);
    expect(at).toBe(rank <= k ? rank - 1 : -1);
    if (at >= 0) expect(topLp[at]).toBe(c.logprobs[i]);
    // The kept set's members all rank above the rest; a kept token's logprob is above the floor.
    const mask = c.masks[i] as number[];
    top.forEach((id, j) => {
      if (mask.length > 0) expect((topLp[j] as number) > LOGPROB_FLOOR).toBe(mask.includes(id));
    });
  });
}

describe('rank and top areas in engine outputs', () => {
  it('hold k candidates per token row, the sampled token at its rank when among them', () => {
    const results = runAll(tinyConfig(), [
      request(1, { topLogprobs: 5, maxTokens: 120, ignoreEos: true }),
      request(2, { topLogprobs: 20, topK: 3, topP: 1, maxTokens: 120, ignoreEos: true }),
      request(3, { topLogprobs: 1, topK: 0, topP: 1, maxTokens: 120, ignoreEos: true }),
      request(4, { topLogprobs: 7, topK: 0, topP: 0.8, minP: 0.05, presencePenalty: 0.8 }),
    ]);
    for (const [slot, k] of [
      [1, 5],
      [2, 20],
      [3, 1],
      [4, 7],
    ] as const) {
      expectTopRows(results.get(key(0, slot)) as Collected, k);
    }
    // top_k 3 keeps 3: the other 17 of the top area are outside the kept set.
    const c2 = results.get(key(0, 2)) as Collected;
    for (const lp of c2.topLogprobs)
      expect(lp.slice(3).every((v) => v === LOGPROB_FLOOR)).toBe(true);
  });

  it('give greedy rank 1 and a point mass: the token at 0, every other candidate at the floor', () => {
    const c = runAll(tinyConfig(), [request(1, { temperature: 0, topLogprobs: 4 })]).get(key(0, 1));
    expectTopRows(c as Collected, 4);
    for (const [i, lp] of (c as Collected).topLogprobs.entries()) {
      expect((c as Collected).ranks[i]).toBe(1);
      expect((c as Collected).topIds[i]?.[0]).toBe((c as Collected).tokens[i]);
      expect(lp).toEqual([0, LOGPROB_FLOOR, LOGPROB_FLOOR, LOGPROB_FLOOR]);
    }
  });

  it('are empty without topLogprobs or without logprobs; rows without a token carry neither', () => {
    const engine = new SimEngine(tinyConfig({ maxNumBatchedTokens: 16, maxModelLen: 200 }));
    engine.add(request(1, { topLogprobs: 0, maxTokens: 30 }, { promptTokenIds: prompt(40) }));
    engine.add(request(2, { logprobs: false, topLogprobs: 5, maxTokens: 30 }));
    engine.add(request(3, { topLogprobs: 5, maxTokens: 30 }, { promptTokenIds: prompt(50, 3) }));
    engine.add(request(4, { topLogprobs: 5 }, { promptTokenIds: Int32Array.from([5000]) }));
    const out = engine.newStepOutputs(2);
    let tokenless = 0;
    let topRows = 0;
    while (engine.hasWork()) {
      out.clear();
      engine.step(out);
      for (let j = 0; j < out.count; j++) {
        const slot = out.slot[j] as number;
        if ((out.token[j] as number) < 0) {
          tokenless++;
          expect([out.rank[j], out.topCount[j]]).toEqual([0, 0]);
          if (slot === 4) expect(out.finish[j]).toBe(FinishReason.Error);
          continue;
        }
        expect(out.rank[j]).toBeGreaterThanOrEqual(1);
        expect(out.topCount[j]).toBe(slot === 3 ? 5 : 0);
        if (slot === 3) topRows++;
      }
    }
    expect(tokenless).toBeGreaterThan(3); // prefill chunks with routing rows, and the error
    expect(topRows).toBe(30);
  });
});
