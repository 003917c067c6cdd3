import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { maxOutputBytes, OutputRoom } from '../../src/engine/output-room.js';
import { SimLoraAdapters } from '../../src/sim/lora-adapters.js';
import { SimModel } from '../../src/sim/model.js';
import { getPreset } from '../../src/sim/presets.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import type { LoraAdapter } from '../../src/wire/admin-args.js';
import { RejectReason } from '../../src/wire/reject.js';
import { type EngineRequest, FinishReason } from '../../src/wire/types.js';
import {
  type Collected,
  collect,
  drain,
  key,
  prompt,
  request,
  runAll,
  tinyConfig,
} from './helpers.js';
import { densePromptPosition } from './prompt-reference.js';

/**
 * Prompt logprobs through the engine: the same whatever the chunking, the prefix cache, the
 * preemptions and the output ring's size; changed by the weights and the adapter.
 */
const prompts = [prompt(300, 1), prompt(77, 2), prompt(513, 3), prompt(2, 4), prompt(1, 5)];
const ks = [1, 0, 5, 20, 3];

function requests(extra: Partial<EngineRequest> = {}): EngineRequest[] {
  return prompts.map((tokens, i) =>
    request(
      i,
      { promptLogprobs: ks[i] as number, maxTokens: 40, ignoreEos: true, seed: i },
      { promptTokenIds: tokens, ...extra },
    ),
  );
}

const promptView = (c: Collected | undefined) => ({
  positions: c?.promptPositions,
  ids: c?.promptIds,
  logprobs: c?.promptLogprobs,
  ranks: c?.promptRanks,
});

function expectComplete(results: Map<string, Collected>): void {
  prompts.forEach((tokens, i) => {
    const c = results.get(key(0, i)) as Collected;
    expect(c.promptPositions).toEqual(Array.from({ length: tokens.length - 1 }, (_, p) => p + 1));
    for (const ids of c.promptIds) expect(ids).toHaveLength(1 + (ks[i] as number));
    expect(c.promptIds.map((ids) => ids[0])).toEqual(Array.from(tokens.subarray(1)));
    expect(c.tokens).toHaveLength(40);
  });
}

describe('prompt logprobs in engine outputs', () => {
  const reference = runAll(tinyConfig(), requests());

  it('cover positions 1..P-1 once, in order, with the prompt token first', () => {
    expectComplete(reference);
    // A one-token prompt has none; its rows carry no prompt area.
    expect(reference.get(key(0, 4))?.promptPositions).toEqual([]);
  });

  it.each([
    ['chunks of 7', { maxNumBatchedTokens: 7 }],
    ['chunks of 64', { maxNumBatchedTokens: 64 }],
    ['one sequence at a time', { maxNumSeqs: 1, maxNumBatchedTokens: 100 }],
    ['no prefix caching', { enablePrefixCaching: false, maxNumBatchedTokens: 33 }],
  ])('are the same with %s', (_, config) => {
    const got = runAll(tinyConfig(config), requests());
    for (const k of reference.keys())
      expect(promptView(got.get(k)), k).toEqual(promptView(reference.get(k)));
  });

  it('are the same when served from the prefix cache (positions before the hit are emitted too)', () => {
    const engine = new SimEngine(tinyConfig({ maxNumBatchedTokens: 50 }));
    engine.add(request(9, { maxTokens: 2 }, { promptTokenIds: prompts[2] as Int32Array }));
    drain(engine);
    for (const r of requests()) engine.add(r);
    const got = drain(engine);
    expect(got.get(key(0, 2))?.numCachedTokens).toBeGreaterThan(400);
    for (const k of reference.keys())
      expect(promptView(got.get(k)), k).toEqual(promptView(reference.get(k)));
  });

  it('are the same when KV blocks run out and requests are preempted mid-prefill', () => {
    for (const config of [
      { numGpuBlocks: 40, maxNumBatchedTokens: 48, enablePrefixCaching: false },
      { numGpuBlocks: 40, maxNumBatchedTokens: 200 },
    ]) {
      const engine = new SimEngine(tinyConfig(config));
      for (const r of requests()) engine.add(r);
      const got = drain(engine);
      expect(engine.stats().numPreemptions).toBeGreaterThan(0);
      expectComplete(got);
      for (const k of reference.keys())
        expect(promptView(got.get(k)), k).toEqual(promptView(reference.get(k)));
    }
  });

  it('refuse a k the engine does not serve (above 20, below -1, not an integer)', () => {
    const bad = [21, -2, 1.5].map((k, slot) => request(slot, { promptLogprobs: k }));
    const got = runAll(tinyConfig(), bad);
    for (const slot of [0, 1, 2]) {
      const c = got.get(key(0, slot)) as Collected;
      expect([c.finish, c.rejectReason]).toEqual([FinishReason.Error, RejectReason.BadParams]);
    }
  });

  it('finish a request that asks max_tokens 1 (scoring a prefix), its positions all there', () => {
    const got = runAll(tinyConfig({ maxNumBatchedTokens: 64 }), [
      request(0, { promptLogprobs: 1, maxTokens: 1 }, { promptTokenIds: prompts[0] as Int32Array }),
    ]).get(key(0, 0)) as Collected;
    expect(got.finish).toBe(FinishReason.Length);
    expect(got.tokens).toHaveLength(1);
    expect(promptView(got)).toEqual(promptView(reference.get(key(0, 0))));
  });
});

describe('prompt logprobs and sampling', () => {
  it('score a rollout sampled at temperature 1 with nothing truncated as it was sampled', () => {
    const start = prompt(40, 3);
    const raw = { temperature: 1, topK: 0, topP: 1, ignoreEos: true, maxTokens: 64 };
    const engine = new SimEngine(tinyConfig());
    engine.add(request(0, raw, { promptTokenIds: start }));
    const rollout = drain(engine).get(key(0, 0)) as Collected;
    const whole = Int32Array.from([...start, ...rollout.tokens]);
    engine.add(request(1, { promptLogprobs: 0, maxTokens: 1 }, { promptTokenIds: whole }));
    const scored = drain(engine).get(key(0, 1)) as Collected;
    const tail = (rows: number[][]) => rows.slice(start.length - 1).map((r) => r[0]);
    expect(tail(scored.promptLogprobs)).toEqual(rollout.logprobs);
    expect(tail(scored.promptRanks)).toEqual(rollout.ranks);
  });
});

describe('prompt logprobs and the weights', () => {
  const root = mkdtempSync(join(tmpdir(), 'rs-prompt-lp-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));
  const tokens = prompt(60, 8);
  const one = (loraId = 0) =>
    request(0, { promptLogprobs: 3, maxTokens: 2 }, { promptTokenIds: tokens, loraId });

  it('change with another weight version and with a LoRA adapter, and match the dense reference under each', async () => {
    writeFileSync(join(root, 'adapter_config.json'), JSON.stringify({ r: 8 }));
    writeFileSync(join(root, 'adapter_model.safetensors'), 'w');
    const adapter: LoraAdapter = { id: 3, name: 'a', path: root };
    const engine = new SimEngine(tinyConfig());
    await engine.loadLora(adapter);
    engine.add(one());
    const base = drain(engine).get(key(0, 0)) as Collected;
    engine.add(one(3));
    const lora = drain(engine).get(key(0, 0)) as Collected;
    engine.updateWeights(7);
    engine.add(one());
    const v7 = drain(engine).get(key(0, 0)) as Collected;
    const adapters = new SimLoraAdapters();
    await adapters.load(adapter);
    const cases: [Collected, SimModel, number][] = [
      [base, new SimModel(getPreset('tiny'), 0, 0), 0],
      [lora, new SimModel(getPreset('tiny'), 0, 0), adapters.key(3) as number],
      [v7, new SimModel(getPreset('tiny'), 0, 7), 0],
    ];
    for (const [c, model, adapterKey] of cases) {
      expect(c.promptPositions).toHaveLength(59);
      c.promptPositions.forEach((p, i) => {
        const want = densePromptPosition(model, tokens, p, 3, adapterKey);
        expect(c.promptIds[i]).toEqual(want.ids);
        expect(c.promptRanks[i]).toEqual(want.ranks);
      });
    }
    expect(lora.promptLogprobs).not.toEqual(base.promptLogprobs);
    expect(v7.promptLogprobs).not.toEqual(base.promptLogprobs);
    expect(lora.promptRanks).not.toEqual(base.promptRanks);
    expect(v7.promptIds).not.toEqual(base.promptIds);
  });
});

describe('prompt logprobs under a small output ring', () => {
  /** Steps with a ring of `capacity` bytes per server, drained fully between steps. */
  function underRing(engine: SimEngine, capacity: number) {
    const p = engine.preset;
    const room = new OutputRoom(1, p.routingLayers * p.expertsPerToken, 1);
    const got = new Map<string, Collected>();
    const out = engine.newStepOutputs(8);
    let outputs = 0;
    let largest = 0;
    for (let step = 0; engine.hasWork(); step++) {
      if (step > 5000) throw new Error('still busy');
      room.open(0, capacity, capacity, capacity);
      out.clear();
      engine.step(out, room);
      for (let j = 0; j < out.count; j++) {
        const entries = (out.promptPositions[j] as number) * (out.promptWidth[j] as number);
        const cost = room.outputBytes(
          out.maskCount[j] as number,
          out.routingRows[j] as number,
          out.topCount[j] as number,
          entries,
        );
        largest = Math.max(largest, cost);
        if (entries > 0) outputs++;
      }
      collect(out, got, step);
    }
    return { got, outputs, largest };
  }

  it.each([
    ['prefix caching', {}],
    ['no prefix caching', { enablePrefixCaching: false }],
  ])(
    'split a long prompt over several outputs, each under the limit, complete (%s)',
    (_, extra) => {
      const long = prompt(3000, 6);
      const reqs = [
        request(0, { promptLogprobs: 1, maxTokens: 4 }, { promptTokenIds: long }),
        request(
          1,
          { promptLogprobs: 20, maxTokens: 4, returnRoutedExperts: false },
          { promptTokenIds: long },
        ),
        request(2, { promptLogprobs: 1, maxTokens: 1 }, { promptTokenIds: long }),
        // A P/D decode instance's request: all but the last prompt token's KV imported (capped
        // as prefix-cache hits are, so that its first output stays under the limit).
        request(
          3,
          { promptLogprobs: 2, maxTokens: 4 },
          { promptTokenIds: prompt(3000, 7), importKvTokens: 2999 },
        ),
      ];
      const expected = runAll(tinyConfig(extra), reqs);
      const capacity = 16_384;
      const engine = new SimEngine(tinyConfig(extra));
      for (const r of reqs) engine.add(r);
      const { got, outputs, largest } = underRing(engine, capacity);
      // 3000 positions of 2 entries (24 bytes) and a routing row each: ~80 KB, limit 6 KB.
      expect(outputs).toBeGreaterThan(30);
      expect(largest).toBeLessThanOrEqual(maxOutputBytes(capacity));
      for (const slot of [0, 1, 2, 3]) {
        const c = got.get(key(0, slot));
        expect(c?.promptPositions).toHaveLength(2999);
        expect(promptView(c)).toEqual(promptView(expected.get(key(0, slot))));
        expect(c?.tokens).toEqual(expected.get(key(0, slot))?.tokens);
      }
    },
  );
});
