import { describe, expect, it } from 'vitest';
import { StepOutputs } from '../../src/engine/step-outputs.js';
import { resolveEngineConfig } from '../../src/sim/engine-config.js';
import { KvBlockPool } from '../../src/sim/kv-block-pool.js';
import { PositionShape, SimModel } from '../../src/sim/model.js';
import { ModelRunner } from '../../src/sim/model-runner.js';
import { getPreset } from '../../src/sim/presets.js';
import { ExpertRouter } from '../../src/sim/routing.js';
import { LOGPROB_FLOOR, Sampler } from '../../src/sim/sampler.js';
import type { Scheduler } from '../../src/sim/scheduler.js';
import { Sequence } from '../../src/sim/sequence.js';
import { FinishReason, type StepTiming } from '../../src/wire/types.js';
import { type Collected, key, prompt, request, runAll, tinyConfig } from './helpers.js';
import { contextHashOf, densePromptPosition, type PromptPosition } from './prompt-reference.js';

/**
 * Prompt logprobs (vLLM's prompt_logprobs k) against a dense enumeration of the tiny vocabulary,
 * and the runner's cursor: every position 1..P-1 once, in order, whatever the chunks and
 * recomputes.
 */
const tiny = getPreset('tiny');
const model = new SimModel(tiny, 0, 0);

/**
 * A prompt that visits the whole range of ranks: the model's own top choices (ranks 1-4) every
 * third position, the EOS ids (the primary one has mass, 998 none) and a non-text special (997),
 * and arbitrary ids between.
 */
function probingPrompt(length: number): Int32Array {
  const tokens = prompt(length, 5);
  tokens.set([999, 998, 997], 10);
  tokens[40] = 999;
  const shape = new PositionShape();
  for (let p = 15; p < length; p += 3) {
    if (p === 40) continue;
    model.shapeAt(contextHashOf(tokens, p), p, shape);
    tokens[p] = model.tokenAtRank(p % 4, shape);
  }
  return tokens;
}

/** Checks the engine's positions against the dense reference, position by position. */
function expectDense(c: Collected, tokens: Int32Array, k: number, adapterKey = 0): void {
  const P = tokens.length;
  expect(c.promptPositions).toEqual(Array.from({ length: P - 1 }, (_, i) => i + 1));
  c.promptPositions.forEach((p, i) => {
    const want: PromptPosition = densePromptPosition(model, tokens, p, k, adapterKey);
    expect(c.promptIds[i], `ids at ${p}`).toEqual(want.ids);
    expect(c.promptRanks[i], `ranks at ${p}`).toEqual(want.ranks);
    (c.promptLogprobs[i] as number[]).forEach((v, j) => {
      const w = want.logprobs[j] as number;
      expect(Math.abs(v - w), `logprob ${j} at ${p}`).toBeLessThanOrEqual(1e-4 * Math.max(1, -w));
    });
  });
}

describe('prompt logprobs against a dense log_softmax over the tiny vocabulary', () => {
  const tokens = probingPrompt(90);

  it.each([0, 1, 5, 20])('agree at every position with k = %i', (k) => {
    const c = runAll(tinyConfig(), [
      request(1, { promptLogprobs: k, maxTokens: 3 }, { promptTokenIds: tokens }),
    ]).get(key(0, 1)) as Collected;
    expectDense(c, tokens, k);
    expect(c.tokens).toHaveLength(3);
    // The probes landed: small ranks, the primary EOS with mass, 998 and 997 without.
    const ranks = c.promptRanks.map((r) => r[0] as number);
    for (const r of [1, 2, 3, 4]) expect(ranks).toContain(r);
    expect(c.promptLogprobs[9]?.[0]).toBeGreaterThan(LOGPROB_FLOOR); // 999 at position 10
    expect([c.promptLogprobs[10]?.[0], c.promptRanks[10]?.[0]]).toEqual([LOGPROB_FLOOR, 1000]);
    expect([c.promptLogprobs[11]?.[0], c.promptRanks[11]?.[0]]).toEqual([LOGPROB_FLOOR, 1000]);
  });

  it('do not depend on the sampling parameters: penalties, temperature and truncation are not applied', () => {
    const c = runAll(tinyConfig(), [
      request(
        2,
        {
          promptLogprobs: 5,
          temperature: 0.3,
          topK: 3,
          topP: 0.5,
          minP: 0.1,
          repetitionPenalty: 1.7,
          presencePenalty: 1,
          frequencyPenalty: 0.5,
          minTokens: 2,
          maxTokens: 4,
          stopTokenIds: Int32Array.from([tokens[5] as number]),
        },
        { promptTokenIds: tokens },
      ),
    ]).get(key(0, 2)) as Collected;
    expectDense(c, tokens, 5);
  });
});

/** A ModelRunner driven chunk by chunk, with no scheduler: the cursor's rules in isolation. */
function bareRunner() {
  const cfg = resolveEngineConfig(tinyConfig({ enablePrefixCaching: false }));
  const runnerModel = new SimModel(cfg.preset, cfg.seed, cfg.weightVersion);
  const router = new ExpertRouter(cfg.preset);
  router.setWeightKey(runnerModel.weightKey);
  const counters = { promptTokens: 0, generationTokens: 0 };
  const runner = new ModelRunner(
    cfg,
    runnerModel,
    router,
    new Sampler(runnerModel),
    new KvBlockPool(cfg.numGpuBlocks),
    counters,
  );
  const batch = { batch: [] as Sequence[], batchTokens: new Int32Array(1), batchSize: 1 };
  const timing: StepTiming = {
    ms: 0,
    sampledSeqs: 0,
    decodeSeqs: 0,
    prefillTokens: 0,
    totalContext: 0,
    generatedTokens: 0,
  };
  const out = new StepOutputs(4);
  const got = { positions: [] as number[], rows: [] as number[][] };
  const forward = (seq: Sequence, n: number): void => {
    batch.batch[0] = seq;
    batch.batchTokens[0] = n;
    out.clear();
    runner.run(batch as unknown as Scheduler, out, timing);
    for (let j = 0; j < out.count; j++) {
      const width = out.promptWidth[j] as number;
      for (let q = 0; q < (out.promptPositions[j] as number); q++) {
        got.positions.push((out.promptFirstPos[j] as number) + q);
        const at = (out.promptStart[j] as number) + q * width;
        got.rows.push([
          ...out.promptIds.subarray(at, at + width),
          ...out.promptLogprobs.subarray(at, at + width),
          ...out.promptRanks.subarray(at, at + width),
        ]);
      }
    }
  };
  return { forward, out, got };
}

describe('the prompt-logprob cursor', () => {
  const tokens = prompt(70, 9);
  const seqOf = () =>
    new Sequence(
      0,
      request(0, { promptLogprobs: 2, maxTokens: 5, ignoreEos: true }, { promptTokenIds: tokens }),
      1,
    );
  const P = tokens.length;
  const all = Array.from({ length: P - 1 }, (_, i) => i + 1);

  it('emits the positions one past each forwarded token, the last chunk up to P - 1', () => {
    const { forward, out } = bareRunner();
    const seq = seqOf();
    forward(seq, 1); // token 0 forwarded: position 1 is scored
    expect(out.promptFirstPos[0]).toBe(1);
    expect(out.promptPositions[0]).toBe(1);
    expect(out.token[0]).toBe(-1); // a prefill chunk: positions, no token
    forward(seq, 20);
    expect([out.promptFirstPos[0], out.promptPositions[0]]).toEqual([2, 20]);
    forward(seq, P - 21); // the last chunk: up to P - 1, with the first token
    expect([out.promptFirstPos[0], out.promptPositions[0]]).toEqual([22, P - 22]);
    expect(out.token[0]).toBeGreaterThanOrEqual(0);
    forward(seq, 1); // a decode: nothing more
    expect([out.count, out.promptPositions[0]]).toEqual([1, 0]);
  });

  it('never re-emits a position on recompute and never skips one', () => {
    const whole = bareRunner();
    whole.forward(seqOf(), P);
    expect(whole.out.finish[0]).toBe(FinishReason.None);
    const chunked = bareRunner();
    const seq = seqOf();
    chunked.forward(seq, 13);
    chunked.forward(seq, 17);
    seq.numComputed = 0; // preempted by recompute: the KV is gone, the cursor stays
    chunked.forward(seq, 9); // below the cursor: nothing
    chunked.forward(seq, 25); // past it by 4
    seq.numComputed = 0; // and again
    chunked.forward(seq, 50);
    chunked.forward(seq, P - 50);
    expect(chunked.got.positions).toEqual(all);
    expect(whole.got.positions).toEqual(all);
    expect(chunked.got.rows).toEqual(whole.got.rows);
  });
});
