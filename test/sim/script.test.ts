import { describe, expect, it } from 'vitest';
import { PositionShape, SimModel } from '../../src/sim/model.js';
import { LOGPROB_FLOOR } from '../../src/sim/model-runner.js';
import { getPreset } from '../../src/sim/presets.js';
import { Sampler } from '../../src/sim/sampler.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import { TokenCounts } from '../../src/sim/token-counts.js';
import { combine } from '../../src/wire/hash.js';
import { MAX_SCRIPT_TOKENS } from '../../src/wire/messages.js';
import { RejectReason } from '../../src/wire/reject.js';
import { FinishReason, type SamplingParams } from '../../src/wire/types.js';
import {
  type Collected,
  drain,
  key,
  observable,
  params,
  prompt,
  request,
  runAll,
  tinyConfig,
} from './helpers.js';

/**
 * A scripted answer (EngineRequest.script): the simulator emits the script's ids first, as if
 * sampled (logprobs, masks, top candidates, routing rows, stop rules, penalties as for any token),
 * then EOS when the script ends the answer, else it samples on.
 */
const tiny = getPreset('tiny');
const EOS = tiny.eosTokenIds[0] as number; // 999, the one the model ends with
const OTHER_EOS = tiny.eosTokenIds[1] as number; // 998
const NON_TEXT = 997; // <|im_start|>: past textVocabSize, no mass of its own

/** A script of distinct text ids in [0, 990), unlike the prompt's. */
function script(length: number, salt = 0): Int32Array {
  const s = new Int32Array(length);
  for (let i = 0; i < length; i++) s[i] = (i * 53 + salt * 17 + 5) % 990;
  return s;
}

function only(results: Map<string, Collected>, slot = 1, server = 0): Collected {
  const c = results.get(key(server, slot));
  expect(c).toBeDefined();
  return c as Collected;
}

function run(p: Partial<SamplingParams>, s: Int32Array | null, ends = false, slot = 1): Collected {
  return only(runAll(tinyConfig(), [request(slot, p, { script: s, scriptEnds: ends })]), slot);
}

/** Every row's logprob, rank, mask and top candidates are those of a well-formed sampled token. */
function expectWellFormed(c: Collected, p: SamplingParams, scripted: number): void {
  for (let i = 0; i < c.tokens.length; i++) {
    const token = c.tokens[i] as number;
    const lp = c.logprobs[i] as number;
    expect(lp).toBeLessThanOrEqual(0);
    expect(lp).toBeGreaterThanOrEqual(LOGPROB_FLOOR);
    const mask = c.masks[i] as number[];
    if (mask.length > 0) expect(mask).toContain(token);
    if (p.topK > 0) expect(mask.length).toBeLessThanOrEqual(p.topK);
    const top = c.topLogprobs[i] as number[];
    const ids = c.topIds[i] as number[];
    expect(ids).toHaveLength(p.topLogprobs);
    for (let j = 1; j < top.length; j++) {
      expect(top[j] as number).toBeLessThanOrEqual(top[j - 1] as number);
    }
    const rank = c.ranks[i] as number;
    expect(rank).toBeGreaterThanOrEqual(1);
    // The token is in its top list exactly at its rank, with the very logprob it was given.
    if (rank <= ids.length) {
      expect(ids[rank - 1]).toBe(token);
      expect(top[rank - 1]).toBe(lp);
    }
    // A scripted token is the top of its position (the model means to write it).
    if (i < scripted) {
      expect(rank).toBe(1);
      expect(ids[0]).toBe(token);
    }
  }
}

describe('scripted answers', () => {
  it('emits the script first, in order, then EOS with finish stop when it ends the answer', () => {
    const s = script(30);
    const c = run({ maxTokens: 200 }, s, true);
    expect(c.tokens).toEqual([...s, EOS]);
    expect(c.finish).toBe(FinishReason.Stop);
    expect(c.stopTokenId).toBe(-1); // as a sampled EOS: vLLM's stop_reason null
    // The model meant to end there: EOS is the top of its position, not a background-level one.
    expect(c.ranks.at(-1)).toBe(1);
    expect(c.logprobs.at(-1)).toBeGreaterThan(-0.01);
  });

  it('samples on after the script when it does not end the answer', () => {
    const s = script(20);
    const c = run({ maxTokens: 60, ignoreEos: true }, s);
    expect(c.tokens.slice(0, 20)).toEqual([...s]);
    expect(c.tokens).toHaveLength(60);
    expect(c.finish).toBe(FinishReason.Length);
    // The continuation is the model's own: not the script again, not one token over and over.
    const tail = c.tokens.slice(20);
    expect(new Set(tail).size).toBeGreaterThan(5);
    expect(tail).not.toEqual([...s, ...s].slice(0, 40));
    // Without ignore_eos, the continuation is an answer of the model's own length, ending at EOS.
    const natural = run({ maxTokens: 2000 }, s);
    expect(natural.tokens.slice(0, 20)).toEqual([...s]);
    expect(natural.tokens.length).toBeGreaterThan(21);
    expect(natural.tokens.at(-1)).toBe(EOS);
    expect(natural.finish).toBe(FinishReason.Stop);
  });

  it('cuts the script at max_tokens with finish length', () => {
    const s = script(40);
    for (const ends of [false, true]) {
      const c = run({ maxTokens: 12 }, s, ends);
      expect(c.tokens).toEqual([...s.subarray(0, 12)]);
      expect(c.finish).toBe(FinishReason.Length);
    }
    // Exactly max_tokens of script that ends: length wins over the EOS that would follow.
    const exact = run({ maxTokens: 40 }, s, true);
    expect(exact.tokens).toEqual([...s]);
    expect(exact.finish).toBe(FinishReason.Length);
  });

  it('stops at a stop_token_id or an EOS id inside the script, reporting it', () => {
    const s = script(30);
    const stopId = s[7] as number;
    const c = run({ maxTokens: 200, stopTokenIds: Int32Array.from([stopId, 3]) }, s, true);
    expect(c.tokens).toEqual([...s.subarray(0, 8)]);
    expect(c.finish).toBe(FinishReason.Stop);
    expect(c.stopTokenId).toBe(stopId);
    // The tokenizer's other EOS id (a stop id from generation_config) ends it too.
    const withEos = Int32Array.from([...s.subarray(0, 5), OTHER_EOS, ...s.subarray(5)]);
    const e = run({ maxTokens: 200 }, withEos, true);
    expect(e.tokens).toEqual([...withEos.subarray(0, 6)]);
    expect(e.finish).toBe(FinishReason.Stop);
    expect(e.stopTokenId).toBe(OTHER_EOS);
    // ignore_eos: EOS ids are ordinary tokens, and an ending script lets sampling go on instead.
    const ignored = run({ maxTokens: 40, ignoreEos: true }, withEos, true);
    expect(ignored.tokens.slice(0, 31)).toEqual([...withEos]);
    expect(ignored.tokens).toHaveLength(40);
    expect(ignored.finish).toBe(FinishReason.Length);
    expect(ignored).toEqual(run({ maxTokens: 40, ignoreEos: true }, withEos, false));
  });

  it('holds the ending EOS back until min_tokens, as a sampled EOS is', () => {
    const s = script(10);
    const c = run({ maxTokens: 200, minTokens: 25 }, s, true);
    expect(c.tokens.slice(0, 10)).toEqual([...s]);
    expect(c.tokens).toHaveLength(26);
    expect(c.tokens.slice(0, 25)).not.toContain(EOS);
    expect(c.tokens.at(-1)).toBe(EOS);
    expect(c.finish).toBe(FinishReason.Stop);
    // A stop id inside the script does not stop it before min_tokens either.
    const stopId = s[3] as number;
    const held = run({ maxTokens: 10, minTokens: 8, stopTokenIds: Int32Array.of(stopId) }, s);
    expect(held.tokens).toEqual([...s]);
    expect(held.finish).toBe(FinishReason.Length);
  });

  it('gives scripted positions well-formed logprobs, ranks, top candidates, masks and routing', () => {
    const s = Int32Array.from([...script(24), NON_TEXT, OTHER_EOS, 5, 5, 5]);
    const cases: Partial<SamplingParams>[] = [
      { topLogprobs: 5 },
      { topLogprobs: 20, topK: 0, topP: 0.9, minP: 0.05 },
      { topLogprobs: 3, temperature: 0.7, topK: 8, topP: 1 },
      { topLogprobs: 4, temperature: 0, topK: 0, topP: 1 },
      { topLogprobs: 2, presencePenalty: 1.5, frequencyPenalty: 0.5, repetitionPenalty: 1.3 },
      { topLogprobs: 2, presencePenalty: -2 }, // raises seen tokens' logits above the stream's top
      { topLogprobs: 6, minTokens: 45, stopTokenIds: Int32Array.from([s[2] as number, 5]) },
    ];
    for (const over of cases) {
      const p = params({ maxTokens: 45, ignoreEos: true, ...over });
      const promptLen = 24;
      const c = run(p, s, true);
      expect(c.tokens.slice(0, s.length)).toEqual([...s]);
      expect(c.tokens).toHaveLength(45);
      expectWellFormed(c, p, s.length);
      // Truncating sampling: every row carries a mask holding its token; greedy: the token alone.
      for (let i = 0; i < c.tokens.length; i++) {
        if (p.temperature === 0) expect(c.masks[i]).toEqual([c.tokens[i]]);
        else if (p.topK > 0 || p.topP < 1 || p.minP > 0)
          expect(c.masks[i]?.length).toBeGreaterThan(0);
      }
      if (p.temperature === 0)
        expect(c.logprobs.slice(0, s.length).every((x) => x === 0)).toBe(true);
      // A routing row for every position forwarded: the prompt and every output but the last.
      const positions = promptLen + c.tokens.length - 1;
      expect(c.routingPositions).toEqual(Array.from({ length: positions }, (_, i) => i));
      expect(c.routing.length).toBe(positions * 3 * 4);
    }
  });

  it('gives scripted tokens plausible logprobs: the model means them, not the floor', () => {
    const c = run({ maxTokens: 100, topLogprobs: 2 }, script(80), true);
    const lps = c.logprobs.slice(0, 80);
    expect(Math.min(...lps)).toBeGreaterThan(-20);
    // Mostly confident positions (the model's shape classes), some spread ones.
    expect(lps.filter((x) => x > -0.05).length).toBeGreaterThan(30);
    expect(lps.filter((x) => x < -0.5).length).toBeGreaterThan(0);
  });

  it('gives the same outputs for the same seed and script, alone, in a crowd, chunked, preempted', () => {
    const s = script(50, 3);
    const subject = () =>
      request(
        1,
        { seed: 11, maxTokens: 90, topLogprobs: 4, presencePenalty: 0.3 },
        { promptTokenIds: prompt(40, 2), script: s, scriptEnds: false },
      );
    const alone = only(runAll(tinyConfig(), [subject()]));
    expect(observable(only(runAll(tinyConfig(), [subject()])))).toEqual(observable(alone));
    const crowd = Array.from({ length: 8 }, (_, i) =>
      request(
        10 + i,
        { seed: 70 + i, maxTokens: 150, ignoreEos: true, topLogprobs: i % 3 },
        { promptTokenIds: prompt(40, i), script: i % 2 === 0 ? script(20 + i, i) : null },
      ),
    );
    for (const cfg of [
      tinyConfig({ maxNumBatchedTokens: 7 }),
      tinyConfig({ maxNumBatchedTokens: 64, blockSize: 4 }),
      tinyConfig({ numGpuBlocks: 30 }),
    ]) {
      const engine = new SimEngine(cfg);
      for (const r of [...crowd, subject()]) engine.add(r);
      const got = drain(engine);
      expect(observable(got.get(key(0, 1)))).toEqual(observable(alone));
      if (cfg.numGpuBlocks === 30) expect(engine.stats().numPreemptions).toBeGreaterThan(0);
      for (const r of crowd) {
        if (r.script)
          expect(got.get(key(0, r.slot))?.tokens.slice(0, r.script.length)).toEqual([...r.script]);
      }
    }
    // Another seed: the same script, a different continuation.
    const other = only(
      runAll(tinyConfig(), [{ ...subject(), params: params({ ...subject().params, seed: 12 }) }]),
    );
    expect(other.tokens.slice(0, 50)).toEqual([...s]);
    expect(other.tokens.slice(50)).not.toEqual(alone.tokens.slice(50));
  });

  it('leaves a request without a script as it was', () => {
    const p = { seed: 21, maxTokens: 120, topLogprobs: 3, repetitionPenalty: 1.1 };
    const none = only(runAll(tinyConfig(), [request(1, p)]));
    expect(none.tokens.length).toBeGreaterThan(1);
    for (const extra of [
      { script: null },
      { script: null, scriptEnds: true },
      { script: new Int32Array(0), scriptEnds: false },
    ]) {
      expect(observable(only(runAll(tinyConfig(), [request(1, p, extra)])))).toEqual(
        observable(none),
      );
    }
    // An empty script that ends the answer is an answer of EOS alone.
    const empty = only(
      runAll(tinyConfig(), [request(1, p, { script: new Int32Array(0), scriptEnds: true })]),
    );
    expect(empty.tokens).toEqual([EOS]);
    expect(empty.finish).toBe(FinishReason.Stop);
  });

  it('refuses a script with ids outside the vocabulary or past MAX_SCRIPT_TOKENS', () => {
    const bad = [
      { script: Int32Array.of(1, 2, 1000), reason: RejectReason.TokenOutOfRange },
      { script: Int32Array.of(-1), reason: RejectReason.TokenOutOfRange },
      { script: new Int32Array(MAX_SCRIPT_TOKENS + 1), reason: RejectReason.BadParams },
      { script: [1, 2] as unknown as Int32Array, reason: RejectReason.BadParams },
    ];
    for (const { script: s, reason } of bad) {
      const c = only(runAll(tinyConfig(), [request(1, {}, { script: s, scriptEnds: true })]));
      expect(c.finish).toBe(FinishReason.Error);
      expect(c.rejectReason).toBe(reason);
      expect(c.tokens).toEqual([]);
    }
    // A few thousand tokens are fine.
    const long = script(3000);
    const c = only(
      runAll(tinyConfig(), [request(1, { maxTokens: 3001 }, { script: long, scriptEnds: true })]),
    );
    expect(c.tokens).toEqual([...long, EOS]);
  });
});

describe('the sampler with a forced token', () => {
  const model = new SimModel(tiny, 5, 0);
  const shape = new PositionShape();
  const ids = new Int32Array(20);
  const lps = new Float32Array(20);
  const kept = new Int32Array(1000);

  it('puts any id at the top, in the kept set, with the top candidate logprob', () => {
    const counts = new TokenCounts(8);
    const p = params({
      presencePenalty: -1,
      repetitionPenalty: 1.2,
      stopTokenIds: Int32Array.of(3),
    });
    const sampler = new Sampler(model);
    for (let position = 0; position < 200; position++) {
      model.shapeAt(combine(17, position), position, shape);
      // Stream ranks 0, 1 and 300 of this position, an EOS id of each kind, a non-text id, a
      // penalised id, and a stop id held back by min_tokens.
      const forced = [
        model.tokenAtRank(0, shape),
        model.tokenAtRank(1, shape),
        model.tokenAtRank(300, shape),
        EOS,
        OTHER_EOS,
        NON_TEXT,
        42,
        3,
      ][position % 8] as number;
      counts.addOutput(42);
      counts.addOutput(position % 50);
      sampler.eosLogit = position % 5 === 0 ? 14 : -18;
      sampler.uniform = 0.999;
      sampler.forced = forced;
      const penalised = Math.floor(position / 8) % 3 !== 0;
      const suppress = Math.floor(position / 16) % 2 === 0;
      sampler.sample(shape, p, penalised ? counts : null, suppress);
      expect(sampler.token).toBe(forced);
      expect(sampler.rank).toBe(1);
      expect(sampler.logprob).toBeLessThanOrEqual(0);
      expect(sampler.logprob).toBeGreaterThan(-30);
      expect(sampler.candidates.topId).toBe(forced);
      expect(sampler.writeTop(ids, lps, 0, 5)).toBe(5);
      expect(ids[0]).toBe(forced);
      expect(lps[0]).toBe(Math.fround(sampler.logprob));
      expect(sampler.keptCount).toBeGreaterThan(0);
      sampler.writeKept(kept, 0);
      expect(kept[0]).toBe(forced);
    }
  });

  it('draws as before once no token is forced', () => {
    const a = new Sampler(model);
    const b = new Sampler(model);
    const p = params();
    for (let position = 0; position < 100; position++) {
      model.shapeAt(combine(23, position), position, shape);
      for (const s of [a, b]) {
        s.eosLogit = -18;
        s.uniform = (position * 0.137) % 1;
      }
      b.forced = 7;
      b.sample(shape, p, null, false);
      b.forced = -1;
      a.sample(shape, p, null, false);
      b.sample(shape, p, null, false);
      expect([b.token, b.logprob, b.rank, b.keptCount]).toEqual([
        a.token,
        a.logprob,
        a.rank,
        a.keptCount,
      ]);
    }
  });
});
