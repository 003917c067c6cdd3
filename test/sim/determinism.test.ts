import { describe, expect, it } from 'vitest';
import { SimEngine } from '../../src/sim/sim-engine.js';
import type { EngineRequest } from '../../src/wire/types.js';
import {
  type Collected,
  drain,
  key,
  observable,
  prompt,
  request,
  runAll,
  tinyConfig,
} from './helpers.js';

/** A request of interest plus `n` others with different prompts, seeds and parameters. */
function crowd(n: number): EngineRequest[] {
  const out: EngineRequest[] = [];
  for (let i = 1; i <= n; i++) {
    out.push(
      request(
        100 + i,
        {
          seed: 1000 + i,
          topK: i % 3 === 0 ? 0 : 20 + i,
          topP: i % 2 === 0 ? 1 : 0.9,
          maxTokens: 30 + i * 7,
          topLogprobs: (i % 4) * 3,
        },
        { promptTokenIds: prompt(10 + i * 5, i) },
      ),
    );
  }
  return out;
}

const subjects = (): EngineRequest[] => [
  request(
    1,
    { seed: 7, maxTokens: 80, temperature: 0.8, topLogprobs: 5 },
    { promptTokenIds: prompt(45, 1) },
  ),
  request(
    2,
    { seed: 8, maxTokens: 60, topK: 0, topP: 0.9, minP: 0.05, topLogprobs: 20 },
    { promptTokenIds: prompt(33, 2) },
  ),
  request(
    3,
    { seed: 9, maxTokens: 50, presencePenalty: 0.4, repetitionPenalty: 1.2, topLogprobs: 3 },
    {
      promptTokenIds: prompt(20, 3),
    },
  ),
];

describe('determinism', () => {
  it('gives each request the same outputs alone, in a crowd, and under any chunk size', () => {
    const alone = subjects().map((r) => runAll(tinyConfig({ maxNumBatchedTokens: 4096 }), [r]));
    const variants = [
      // Small token budgets force chunked prefill with odd chunk boundaries.
      tinyConfig({ maxNumBatchedTokens: 7 }),
      tinyConfig({ maxNumBatchedTokens: 64, blockSize: 4 }),
      tinyConfig({ maxNumBatchedTokens: 1000, maxNumSeqs: 3, enablePrefixCaching: false }),
    ];
    for (const config of variants) {
      // Crowd first, subjects after: they start at different steps next to different neighbours.
      const all = runAll(config, [...crowd(12), ...subjects()]);
      subjects().forEach((r, i) => {
        const expected = (alone[i] as Map<string, Collected>).get(key(0, r.slot));
        expect(expected?.topIds.every((t) => t.length === r.params.topLogprobs)).toBe(true);
        expect(observable(all.get(key(0, r.slot)))).toEqual(observable(expected));
      });
    }
  });

  it('does not depend on the API server a request comes from, its slot, or the server count', () => {
    const p = { seed: 5, topLogprobs: 6 };
    const base = runAll(tinyConfig(), [request(1, p, { promptTokenIds: prompt(30, 9) })]);
    expect(base.get(key(0, 1))?.topIds[0]).toHaveLength(6);
    const moved = runAll(tinyConfig(), [
      request(77, p, { server: 3, promptTokenIds: prompt(30, 9) }),
    ]);
    expect(observable(moved.get(key(3, 77)))).toEqual(observable(base.get(key(0, 1))));
    // Four API servers, each with its own requests: the same request still sees the same draws.
    const crowded = runAll(tinyConfig(), [
      ...[0, 1, 2, 3].flatMap((server) => crowd(3).map((r) => ({ ...r, server }))),
      request(77, p, { server: 2, promptTokenIds: prompt(30, 9) }),
    ]);
    expect(observable(crowded.get(key(2, 77)))).toEqual(observable(base.get(key(0, 1))));
  });

  it('gives identical outputs when KV blocks run out and requests are preempted', () => {
    const reqs = Array.from({ length: 8 }, (_, i) =>
      request(
        i,
        { seed: 40 + i, maxTokens: 150, ignoreEos: true, topLogprobs: i % 2 === 0 ? 4 : 0 },
        { promptTokenIds: prompt(40, i) },
      ),
    );
    const roomy = new SimEngine(tinyConfig({ numGpuBlocks: 2048 }));
    for (const r of reqs) roomy.add(r);
    const expected = drain(roomy);
    expect(roomy.stats().numPreemptions).toBe(0);
    for (const policy of ['fcfs', 'priority'] as const) {
      // 8 requests x ceil(190 / 16) = 12 blocks = 96 blocks wanted; 30 exist.
      const tight = new SimEngine(tinyConfig({ numGpuBlocks: 30, policy }));
      for (const r of reqs) tight.add({ ...r, priority: r.slot % 3 });
      const got = drain(tight);
      expect(tight.stats().numPreemptions).toBeGreaterThan(3);
      for (const r of reqs) {
        expect(observable(got.get(key(0, r.slot)))).toEqual(
          observable(expected.get(key(0, r.slot))),
        );
      }
      expect(tight.numFreeBlocks).toBe(30);
    }
  });

  it('draws a seed for requests without one, different per request, reproducible per engine', () => {
    const reqs = [0, 1, 2].map((slot) =>
      request(slot, { seed: null }, { promptTokenIds: prompt(20, 4) }),
    );
    const a = runAll(tinyConfig({ seed: 3 }), reqs);
    const b = runAll(tinyConfig({ seed: 3 }), reqs);
    const c = runAll(tinyConfig({ seed: 4 }), reqs);
    expect(a.get(key(0, 0))?.tokens).toEqual(b.get(key(0, 0))?.tokens);
    expect(a.get(key(0, 0))?.tokens).not.toEqual(a.get(key(0, 1))?.tokens);
    expect(a.get(key(0, 0))?.tokens).not.toEqual(c.get(key(0, 0))?.tokens);
  });
});
