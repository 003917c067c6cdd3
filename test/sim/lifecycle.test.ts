import { describe, expect, it } from 'vitest';
import { SimEngine } from '../../src/sim/sim-engine.js';
import { FinishReason } from '../../src/wire/types.js';
import { type Collected, collect, drain, key, prompt, request, tinyConfig } from './helpers.js';

function stepN(engine: SimEngine, n: number, into = new Map<string, Collected>()) {
  const out = engine.newStepOutputs();
  for (let i = 0; i < n; i++) {
    out.clear();
    engine.step(out);
    collect(out, into, i);
  }
  return into;
}

describe('abort', () => {
  it('confirms with one Abort output, frees the blocks, and leaves the others running', () => {
    const engine = new SimEngine(tinyConfig());
    for (let slot = 0; slot < 4; slot++)
      engine.add(request(slot, { maxTokens: 300, ignoreEos: true }));
    const seen = stepN(engine, 10);
    engine.abort(0, 1);
    engine.abort(0, 99); // unknown: already finished or never added; nothing happens
    const after = new Map<string, Collected>();
    stepN(engine, 1, after);
    const aborted = after.get(key(0, 1)) as Collected;
    expect(aborted.finish).toBe(FinishReason.Abort);
    expect(aborted.tokens).toEqual([]);
    expect(after.has(key(0, 99))).toBe(false);
    drain(engine, after);
    expect(after.get(key(0, 1))?.rows).toBe(1);
    expect(after.get(key(0, 0))?.finish).toBe(FinishReason.Length);
    expect(
      (seen.get(key(0, 0))?.tokens.length ?? 0) + (after.get(key(0, 0))?.tokens.length ?? 0),
    ).toBe(300);
    expect(engine.numFreeBlocks).toBe(engine.config.numGpuBlocks);
    expect(engine.stats().kvUsage).toBe(0);
  });

  it('drops every request of a dead API server without outputs', () => {
    const engine = new SimEngine(tinyConfig());
    for (let slot = 0; slot < 3; slot++) {
      engine.add(request(slot, { maxTokens: 100, ignoreEos: true }));
      engine.add(request(slot, { maxTokens: 100, ignoreEos: true }, { server: 1 }));
    }
    stepN(engine, 5);
    engine.abort(1, 2); // its Abort output is pending when the server dies: dropped too
    engine.abortServer(1);
    const rest = drain(engine);
    for (const k of rest.keys()) expect(k.startsWith('0:')).toBe(true);
    expect(rest.size).toBe(3);
    expect(engine.numFreeBlocks).toBe(engine.config.numGpuBlocks);
  });
});

describe('KV blocks', () => {
  it('are all free again after requests finish, whatever the mix', () => {
    const engine = new SimEngine(tinyConfig({ numGpuBlocks: 64, blockSize: 8 }));
    for (let slot = 0; slot < 20; slot++) {
      engine.add(
        request(
          slot,
          { maxTokens: 20 + slot * 3 },
          { promptTokenIds: prompt(5 + slot * 4, slot % 4) },
        ),
      );
    }
    let peak = 0;
    const out = engine.newStepOutputs();
    while (engine.hasWork()) {
      out.clear();
      engine.step(out);
      peak = Math.max(peak, engine.stats().kvUsage);
    }
    expect(peak).toBeGreaterThan(0.3);
    expect(engine.numFreeBlocks).toBe(64);
    expect(engine.stats().kvUsage).toBe(0);
    expect(engine.stats().running + engine.stats().waiting).toBe(0);
  });
});

describe('pause and resume', () => {
  it('runs no steps while paused, keeps state, and resumes to the same outputs', () => {
    const reqs = [0, 1, 2].map((slot) => request(slot, { maxTokens: 60, ignoreEos: true }));
    const reference = new SimEngine(tinyConfig());
    for (const r of reqs) reference.add(r);
    const expected = drain(reference);

    const engine = new SimEngine(tinyConfig());
    for (const r of reqs) engine.add(r);
    const got = stepN(engine, 7);
    engine.pause();
    expect(engine.paused).toBe(true);
    const before = engine.stats();
    expect(engine.hasWork()).toBe(false);
    const out = engine.newStepOutputs();
    for (let i = 0; i < 5; i++) {
      out.clear();
      const t = engine.step(out);
      expect(out.count).toBe(0);
      expect(t.generatedTokens).toBe(0);
    }
    expect(engine.stats()).toEqual(before);
    // Control outputs still go out while paused.
    engine.add(request(9, {}, { promptTokenIds: new Int32Array(0) }));
    expect(engine.hasWork()).toBe(true);
    out.clear();
    engine.step(out);
    expect(out.count).toBe(1);
    expect(out.finish[0]).toBe(FinishReason.Error);
    engine.resume();
    drain(engine, got);
    for (const r of reqs)
      expect(got.get(key(0, r.slot))?.tokens).toEqual(expected.get(key(0, r.slot))?.tokens);
  });
});

describe('prefix caching', () => {
  it('serves a repeated prompt from the cache, counts queries and hits in tokens, honours the salt', () => {
    const engine = new SimEngine(tinyConfig());
    const shared = prompt(64, 5);
    engine.add(request(1, { maxTokens: 5 }, { promptTokenIds: shared }));
    drain(engine);
    expect(engine.stats().prefixQueries).toBe(64);
    expect(engine.stats().prefixHits).toBe(0);
    engine.add(request(2, { maxTokens: 5 }, { promptTokenIds: shared }));
    engine.add(request(3, { maxTokens: 5 }, { promptTokenIds: shared, cacheSalt: 'tenant-b' }));
    const r = drain(engine);
    // vLLM caps a hit at num_tokens - 1: floor(63 / 16) = 3 blocks = 48 tokens.
    expect(r.get(key(0, 2))?.numCachedTokens).toBe(48);
    expect(r.get(key(0, 3))?.numCachedTokens).toBe(0);
    expect(engine.stats().prefixQueries).toBe(64 * 3);
    expect(engine.stats().prefixHits).toBe(48);
    expect(engine.stats().promptTokens).toBe(64 * 3);
  });

  it('resets only when no request holds blocks, as vLLM', () => {
    const engine = new SimEngine(tinyConfig());
    const shared = prompt(40, 6);
    engine.add(request(1, { maxTokens: 100, ignoreEos: true }, { promptTokenIds: shared }));
    stepN(engine, 3);
    expect(engine.resetPrefixCache()).toBe(false);
    drain(engine);
    expect(engine.resetPrefixCache()).toBe(true);
    engine.add(request(2, { maxTokens: 5 }, { promptTokenIds: shared }));
    expect(drain(engine).get(key(0, 2))?.numCachedTokens).toBe(0);
  });
});

describe('scheduling policy', () => {
  const firstSlots = (policy: 'fcfs' | 'priority'): number[] => {
    const engine = new SimEngine(tinyConfig({ maxNumSeqs: 1, policy }));
    engine.add(request(1, { maxTokens: 3, ignoreEos: true }, { priority: 5, arrivalTimeMs: 1 }));
    engine.add(request(2, { maxTokens: 3, ignoreEos: true }, { priority: 0, arrivalTimeMs: 2 }));
    engine.add(request(3, { maxTokens: 3, ignoreEos: true }, { priority: 5, arrivalTimeMs: 0 }));
    const r = drain(engine);
    return [1, 2, 3].sort(
      (a, b) => (r.get(key(0, a))?.firstTokenStep ?? 0) - (r.get(key(0, b))?.firstTokenStep ?? 0),
    );
  };

  it('admits in arrival order (fcfs) or by (priority, arrival) (priority)', () => {
    expect(firstSlots('fcfs')).toEqual([1, 2, 3]);
    expect(firstSlots('priority')).toEqual([2, 3, 1]);
  });

  it('never runs more than max_num_seqs or more tokens than the budget per step', () => {
    const engine = new SimEngine(tinyConfig({ maxNumSeqs: 3, maxNumBatchedTokens: 20 }));
    for (let slot = 0; slot < 8; slot++)
      engine.add(request(slot, { maxTokens: 10 }, { promptTokenIds: prompt(30, slot) }));
    const out = engine.newStepOutputs();
    while (engine.hasWork()) {
      out.clear();
      const t = engine.step(out);
      expect(engine.stats().running).toBeLessThanOrEqual(3);
      expect(t.decodeSeqs + t.prefillTokens).toBeLessThanOrEqual(20);
    }
  });
});
