import { describe, expect, it } from 'vitest';
import { SimEngine } from '../../src/sim/sim-engine.js';
import { drain, key, prompt, request } from './helpers.js';

const tiny = (extra = {}) => new SimEngine({ preset: 'tiny', maxSpeed: true, ...extra });

/** Prefill (max_tokens 1, pinned) then decode (import) of one prompt; colocated for reference. */
function disaggregated(len: number, decodeCfg = {}) {
  const p = prompt(len, 3);
  const colocated = drain(
    (() => {
      const e = tiny();
      e.add(request(0, { maxTokens: 40 }, { promptTokenIds: p }));
      return e;
    })(),
  ).get(key(0, 0))!;
  const prefillEngine = tiny();
  prefillEngine.add(request(0, { maxTokens: 1 }, { promptTokenIds: p, pinKv: true }));
  const prefill = drain(prefillEngine).get(key(0, 0))!;
  const decodeEngine = tiny(decodeCfg);
  decodeEngine.add(request(0, { maxTokens: 40 }, { promptTokenIds: p, importKvTokens: len }));
  const decode = drain(decodeEngine).get(key(0, 0))!;
  return { colocated, prefill, decode, prefillEngine, decodeEngine };
}

describe('P/D in the simulator', () => {
  it('a decode instance that imported the prompt emits rows from P-1 on, identical to colocated', () => {
    const len = 200;
    const { colocated, prefill, decode, prefillEngine } = disaggregated(len);
    expect(decode.tokens).toEqual(colocated.tokens);
    expect(decode.logprobs).toEqual(colocated.logprobs);
    expect(decode.masks).toEqual(colocated.masks);
    expect(prefill.tokens).toEqual(colocated.tokens.slice(0, 1));
    expect(prefill.routingPositions).toEqual([...Array(len).keys()]);
    expect(decode.routingPositions[0]).toBe(len - 1);
    expect(decode.routingPositions.length).toBe(decode.tokens.length);
    // Merged by position: prefill rows, then decode rows from prefill.start + prefill.rows on.
    const width = colocated.routing.length / colocated.routingPositions.length;
    const merged = [...prefill.routing, ...decode.routing.slice(width)];
    expect(merged).toEqual(colocated.routing);
    // The prefill's blocks stay pinned after it finished.
    expect(prefillEngine.numFreeBlocks).toBeLessThan(prefillEngine.config.numGpuBlocks);
  });

  it('a failed load is recomputed: same tokens, rows from the prompt start', () => {
    const { colocated, decode, decodeEngine } = disaggregated(100, { kvLoadFailureRate: 1 });
    expect(decode.tokens).toEqual(colocated.tokens);
    expect(decode.routing).toEqual(colocated.routing);
    expect(decode.routingPositions[0]).toBe(0);
    expect(decodeEngine.stats().numPreemptions).toBe(0);
  });

  it('pins expire after the transfer timeout', () => {
    const e = tiny({ kvTransferTimeoutS: 0 });
    e.add(request(0, { maxTokens: 1 }, { promptTokenIds: prompt(64), pinKv: true }));
    drain(e);
    e.step(e.newStepOutputs(8));
    expect(e.numFreeBlocks).toBe(e.config.numGpuBlocks);
  });

  it('the CPU tier reloads evicted blocks, but never ones whose rows a request needs', () => {
    // 16 blocks of 16 tokens: a second long prompt evicts the first one's blocks to the tier.
    const cfg = { numGpuBlocks: 16, maxModelLen: 256, kvOffloadGib: 1 };
    const e = tiny(cfg);
    const a = prompt(160, 1);
    e.add(request(0, { maxTokens: 1, returnRoutedExperts: false }, { promptTokenIds: a }));
    drain(e);
    e.add(
      request(1, { maxTokens: 1, returnRoutedExperts: false }, { promptTokenIds: prompt(160, 2) }),
    );
    drain(e);
    // The second prompt took the 6 free blocks and evicted the first one's last 5 (released
    // last-first): blocks 6..9 are hashed full blocks, now in the tier; 0..5 are still on the GPU.
    // Without rows, all 9 full blocks of 159 lookup tokens are served: 6 hits, 3 reloads.
    e.add(request(2, { maxTokens: 1, returnRoutedExperts: false }, { promptTokenIds: a }));
    const noRows = drain(e).get(key(0, 2))!;
    expect(noRows.numCachedTokens).toBe(144);
    expect(e.kvTransferCounters.offloadLoadedBlocks).toBe(3);
    // With rows from position 40: blocks 6..8 came from the tier, so they are rowless and the hit
    // stops before them (6 blocks, computed here, have rows); the tier may not reload them either
    // (it stops at block_floor(40 / 16) = 2). Rows 96.. are recomputed, identical.
    const ref = tiny(cfg);
    ref.add(request(3, { maxTokens: 1, routedExpertsPromptStart: 40 }, { promptTokenIds: a }));
    const expected = drain(ref).get(key(0, 3))!;
    e.add(request(3, { maxTokens: 1, routedExpertsPromptStart: 40 }, { promptTokenIds: a }));
    const withRows = drain(e).get(key(0, 3))!;
    expect(withRows.routingPositions).toEqual(expected.routingPositions);
    expect(withRows.routing).toEqual(expected.routing);
    expect(withRows.numCachedTokens).toBe(96);
    expect(e.kvTransferCounters.offloadLoadedBlocks).toBe(3);
  });
});
