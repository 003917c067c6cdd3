import { describe, expect, it } from 'vitest';
import { getPreset } from '../../src/sim/presets.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import { RejectReason, rejectReasonMessage } from '../../src/wire/reject.js';
import { MAX_TOP_LOGPROBS } from '../../src/wire/sampling-check.js';
import { FinishReason } from '../../src/wire/types.js';
import { type Collected, drain, key, prompt, request, runAll, tinyConfig } from './helpers.js';

const EOS = getPreset('tiny').eosTokenIds[0] as number;

function only(results: Map<string, Collected>, slot = 1, server = 0): Collected {
  const c = results.get(key(server, slot));
  expect(c).toBeDefined();
  return c as Collected;
}

describe('stop conditions', () => {
  it('stops at EOS with finish Stop and no stop token id (as vLLM reports EOS)', () => {
    const c = only(runAll(tinyConfig(), [request(1, { maxTokens: 2000 })]));
    expect(c.finish).toBe(FinishReason.Stop);
    expect(c.stopTokenId).toBe(-1);
    expect(c.tokens.at(-1)).toBe(EOS);
    expect(c.tokens.slice(0, -1)).not.toContain(EOS);
  });

  it('stops at the first stop_token_id, reporting it, with the same tokens up to there', () => {
    const free = only(runAll(tinyConfig(), [request(1, { maxTokens: 60, ignoreEos: true })]));
    // A token whose first occurrence is at index >= 5.
    const index = free.tokens.findIndex((t, i) => i >= 5 && free.tokens.indexOf(t) === i);
    const stopId = free.tokens[index] as number;
    const stopped = only(
      runAll(tinyConfig(), [
        request(1, { maxTokens: 60, ignoreEos: true, stopTokenIds: Int32Array.from([stopId, 3]) }),
      ]),
    );
    expect(stopped.finish).toBe(FinishReason.Stop);
    expect(stopped.stopTokenId).toBe(stopId);
    expect(stopped.tokens).toEqual(free.tokens.slice(0, index + 1));
  });

  it('ends with Length at max_tokens, and ignore_eos runs to it', () => {
    const c = only(runAll(tinyConfig(), [request(1, { maxTokens: 17, ignoreEos: true })]));
    expect(c.finish).toBe(FinishReason.Length);
    expect(c.tokens).toHaveLength(17);
    const long = only(runAll(tinyConfig(), [request(1, { maxTokens: 900, ignoreEos: true })]));
    expect(long.tokens).toHaveLength(900);
    expect(long.finish).toBe(FinishReason.Length);
  });

  it('ends with Length at max_model_len', () => {
    const c = only(
      runAll(tinyConfig({ maxModelLen: 64 }), [
        request(1, { maxTokens: 24, ignoreEos: true }, { promptTokenIds: prompt(40) }),
      ]),
    );
    expect(c.finish).toBe(FinishReason.Length);
    expect(c.tokens).toHaveLength(24);
  });

  it('suppresses EOS and stop ids before min_tokens', () => {
    const natural = only(runAll(tinyConfig(), [request(1, { maxTokens: 2000 })]));
    const min = natural.tokens.length + 10;
    const stopIds = Int32Array.from(natural.tokens.slice(0, 5));
    const c = only(
      runAll(tinyConfig(), [
        request(1, { maxTokens: 2000, minTokens: min, stopTokenIds: stopIds }),
      ]),
    );
    expect(c.tokens.length).toBeGreaterThan(min);
    const early = c.tokens.slice(0, min);
    expect(early).not.toContain(EOS);
    for (const s of stopIds) expect(early).not.toContain(s);
    expect(c.finish).toBe(FinishReason.Stop);
  });

  it('follows the length profile: rl responses are long, chat ones short', () => {
    const lengths = (profile: 'rl' | 'chat'): number[] => {
      const reqs = Array.from({ length: 40 }, (_, i) =>
        request(i, {
          seed: i,
          maxTokens: 3000,
          logprobs: false,
          returnSamplingMask: false,
          returnRoutedExperts: false,
        }),
      );
      const r = runAll(tinyConfig({ lengthProfile: profile, maxNumSeqs: 64 }), reqs);
      return reqs.map((q) => only(r, q.slot).tokens.length);
    };
    const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
    const chat = lengths('chat');
    expect(mean(chat)).toBeGreaterThan(150);
    expect(mean(chat)).toBeLessThan(700);
    // rl targets (mean 12.5k) exceed max_tokens 3000 for almost every request.
    const rl = lengths('rl');
    expect(rl.filter((n) => n === 3000).length).toBeGreaterThan(30);
  });
});

describe('requests the engine cannot run', () => {
  it('turns each malformed request into one Error output and keeps serving the others', () => {
    const engine = new SimEngine(tinyConfig({ maxModelLen: 200, numGpuBlocks: 20 }));
    const bad: [number, RejectReason, ReturnType<typeof request>][] = [
      [
        10,
        RejectReason.TokenOutOfRange,
        request(10, {}, { promptTokenIds: Int32Array.from([1, 2, 5000]) }),
      ],
      [11, RejectReason.PromptEmpty, request(11, {}, { promptTokenIds: new Int32Array(0) })],
      [
        12,
        RejectReason.PromptTooLong,
        request(12, { maxTokens: 190 }, { promptTokenIds: prompt(20) }),
      ],
      [13, RejectReason.BadParams, request(13, { temperature: Number.NaN })],
      [14, RejectReason.BadParams, request(14, { topP: 0 })],
      [15, RejectReason.BadParams, request(15, { minTokens: 100, maxTokens: 10 })],
      [17, RejectReason.BadParams, request(17, { topLogprobs: MAX_TOP_LOGPROBS + 1 })],
      [18, RejectReason.BadParams, request(18, { topLogprobs: 1.5 })],
      [19, RejectReason.BadParams, request(19, { topLogprobs: -1 })],
    ];
    engine.add(request(1, { maxTokens: 30 }));
    for (const [, , r] of bad) engine.add(r);
    engine.add({ ...request(16), slot: -1 });
    engine.add(request(2, { maxTokens: 30 }));
    const results = drain(engine);
    for (const [slot, reason] of bad) {
      const c = only(results, slot);
      expect(c.finish).toBe(FinishReason.Error);
      expect(c.rejectReason).toBe(reason);
      expect(c.tokens).toEqual([]);
      expect(c.rows).toBe(1);
      expect(rejectReasonMessage(reason)).not.toMatch(/unknown/);
    }
    expect(only(results, -1).rejectReason).toBe(RejectReason.BadRoute);
    for (const slot of [1, 2]) expect(only(results, slot).tokens.length).toBeGreaterThan(0);
    expect(engine.numFreeBlocks).toBe(20);
  });

  it('refuses a request that could never fit in the KV cache instead of preempting forever', () => {
    const engine = new SimEngine(tinyConfig({ numGpuBlocks: 4 }));
    engine.add(request(1, { maxTokens: 60 }, { promptTokenIds: prompt(10) }));
    const c = only(drain(engine));
    expect(c.rejectReason).toBe(RejectReason.KvCacheTooSmall);
  });

  it('ends both requests when a slot is reused while in flight, and reports malformed records', () => {
    const engine = new SimEngine(tinyConfig());
    engine.add(request(1, { maxTokens: 500, ignoreEos: true }));
    const out = engine.newStepOutputs();
    engine.step(out);
    engine.add(request(1, { maxTokens: 5 }));
    engine.add(request(2, { maxTokens: 500, ignoreEos: true }));
    engine.reject(0, 3);
    const results = drain(engine);
    expect(only(results, 1).finish).toBe(FinishReason.Error);
    expect(only(results, 1).rejectReason).toBe(RejectReason.DuplicateSlot);
    expect(only(results, 3).rejectReason).toBe(RejectReason.MalformedRecord);
    expect(only(results, 2).tokens).toHaveLength(500);
    expect(engine.numFreeBlocks).toBe(engine.config.numGpuBlocks);
  });
});

describe('weight versions', () => {
  it('changes tokens with the version and gives the original ones back on the original version', () => {
    const engine = new SimEngine(tinyConfig());
    const run = (slot: number): Collected => {
      engine.add(
        request(
          slot,
          { seed: 4, maxTokens: 40, ignoreEos: true },
          { promptTokenIds: prompt(20, 4) },
        ),
      );
      return only(drain(engine), slot);
    };
    const v0 = run(1);
    expect(engine.updateWeights()).toBe(1);
    const v1 = run(2);
    expect(engine.updateWeights(0)).toBe(0);
    const back = run(3);
    expect(v1.tokens).not.toEqual(v0.tokens);
    expect(v1.routing).not.toEqual(v0.routing);
    expect(back.tokens).toEqual(v0.tokens);
    expect(back.routing).toEqual(v0.routing);
    expect(new Set(v0.weightVersions)).toEqual(new Set([0]));
    expect(new Set(v1.weightVersions)).toEqual(new Set([1]));
    expect(engine.updateWeights(42)).toBe(42);
    expect(engine.stats().weightVersion).toBe(42);
    expect(() => engine.updateWeights(-1)).toThrow(/RS_ERR_CONFIG_INVALID|weight_version/);
  });
});
