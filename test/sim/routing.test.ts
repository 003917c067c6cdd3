import { describe, expect, it } from 'vitest';
import { getPreset, type ModelPreset } from '../../src/sim/presets.js';
import { ExpertRouter } from '../../src/sim/routing.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import { type Collected, drain, key, prompt, request, tinyConfig } from './helpers.js';

const tiny = getPreset('tiny');

function rowsOf(c: Collected, width: number): number[][] {
  const rows: number[][] = [];
  for (let r = 0; r * width < c.routing.length; r++)
    rows.push(c.routing.slice(r * width, (r + 1) * width));
  return rows;
}

function expectDistinctPerLayer(rows: number[][], layers: number, topk: number, experts: number) {
  for (const row of rows) {
    expect(row).toHaveLength(layers * topk);
    for (let l = 0; l < layers; l++) {
      const ids = row.slice(l * topk, (l + 1) * topk);
      expect(new Set(ids).size).toBe(topk);
      for (const e of ids) expect(e >= 0 && e < experts).toBe(true);
    }
  }
}

describe('MoE routing rows', () => {
  it('has one row per forwarded position: prompt rows at prefill, one per decode, none for the last token', () => {
    const engine = new SimEngine(tinyConfig({ maxNumBatchedTokens: 10 }));
    engine.add(request(1, { maxTokens: 30, ignoreEos: true }, { promptTokenIds: prompt(23) }));
    const out = engine.newStepOutputs();
    const c = drain(engine).get(key(0, 1)) as Collected;
    const width = tiny.routingLayers * tiny.expertsPerToken;
    const rows = rowsOf(c, width);
    // rows end at len(prompt) + len(completion) - 1, exclusive
    expect(rows).toHaveLength(23 + 30 - 1);
    expect(c.routingPositions).toEqual(Array.from({ length: 52 }, (_, i) => i));
    expectDistinctPerLayer(rows, tiny.routingLayers, tiny.expertsPerToken, tiny.numExperts);
    expect(out.routing).toBeInstanceOf(Uint8Array);
  });

  it('skips rows before routed_experts_prompt_start and omits routing when not asked', () => {
    const engine = new SimEngine(tinyConfig());
    engine.add(
      request(
        1,
        { maxTokens: 8, ignoreEos: true, routedExpertsPromptStart: 15 },
        { promptTokenIds: prompt(20) },
      ),
    );
    engine.add(
      request(2, {
        maxTokens: 8,
        ignoreEos: true,
        returnRoutedExperts: false,
        returnSamplingMask: false,
      }),
    );
    const r = drain(engine);
    expect(r.get(key(0, 1))?.routingPositions).toEqual(
      Array.from({ length: 20 + 8 - 1 - 15 }, (_, i) => 15 + i),
    );
    expect(r.get(key(0, 2))?.routing).toEqual([]);
    expect(r.get(key(0, 2))?.masks.every((m) => m.length === 0)).toBe(true);
  });

  it('is a function of (weights, token, position): shared prefixes route alike, positions differ', () => {
    const engine = new SimEngine(tinyConfig({ enablePrefixCaching: false }));
    const a = prompt(30, 2);
    const b = Int32Array.from(a);
    b[20] = (b[20] as number) + 1;
    engine.add(request(1, { maxTokens: 2 }, { promptTokenIds: a }));
    engine.add(request(2, { maxTokens: 2 }, { promptTokenIds: b }));
    const r = drain(engine);
    const width = tiny.routingLayers * tiny.expertsPerToken;
    const ra = rowsOf(r.get(key(0, 1)) as Collected, width);
    const rb = rowsOf(r.get(key(0, 2)) as Collected, width);
    expect(rb.slice(0, 20)).toEqual(ra.slice(0, 20));
    expect(rb[20]).not.toEqual(ra[20]);
    expect(rb.slice(21, 30)).toEqual(ra.slice(21, 30));
  });

  it('routes the same token differently at different positions, and per weight version', () => {
    const router = new ExpertRouter(getPreset('qwen3-30b-a3b'));
    router.setWeightKey(1);
    const row = (token: number, position: number): number[] => {
      const out = new Uint8Array(router.rowWidth);
      router.writeRow(token, position, out, 0);
      return Array.from(out);
    };
    const a = row(42, 100);
    expect(row(42, 100)).toEqual(a);
    expect(row(42, 101)).not.toEqual(a);
    expect(row(43, 100)).not.toEqual(a);
    router.setWeightKey(2);
    expect(row(42, 100)).not.toEqual(a);
    router.setWeightKey(1);
    expect(row(42, 100)).toEqual(a);
  });

  it('uses uint16 rows when a preset has more than 256 experts', () => {
    const wide: ModelPreset = {
      ...tiny,
      name: 'tiny-300e',
      numExperts: 300,
      expertsPerToken: 8,
      routingLayers: 2,
    };
    const engine = new SimEngine(tinyConfig({ preset: wide }));
    engine.add(request(1, { maxTokens: 40, ignoreEos: true }));
    const out = engine.newStepOutputs();
    expect(out.routing).toBeInstanceOf(Uint16Array);
    const c = drain(engine).get(key(0, 1)) as Collected;
    const rows = rowsOf(c, 16);
    expect(rows).toHaveLength(24 + 40 - 1);
    expectDistinctPerLayer(rows, 2, 8, 300);
    expect(Math.max(...c.routing)).toBeGreaterThan(255);
  });

  it('keeps the rows of the per-expert walk: pinned ids, and alike at any offset and width', () => {
    // Pinned from the walk perm[(s + k * stride) % E] before rows were copied from a run table.
    const pinned: Record<string, [number[], number[]]> = {
      'qwen3-30b-a3b': [
        [109, 113, 86, 97, 94, 36, 115, 26, 121, 21, 44, 96, 126, 7, 30, 15],
        [124, 113, 31, 77, 125, 28, 21, 114],
      ],
      'tiny-wide': [
        [378, 148, 12, 86, 69, 172, 106, 364, 66, 306, 351, 87, 285, 232, 253, 189],
        [78, 250, 261, 213, 235, 87, 132, 278],
      ],
    };
    for (const [name, [head, tail]] of Object.entries(pinned)) {
      const router = new ExpertRouter(getPreset(name));
      router.setWeightKey(7);
      const width = router.rowWidth;
      const Ids = router.numExperts > 256 ? Uint16Array : Uint8Array;
      const aligned = new Ids(width);
      router.writeRow(1000, 5, aligned, 0);
      expect(Array.from(aligned.subarray(0, 16))).toEqual(head);
      expect(Array.from(aligned.subarray(width - 8))).toEqual(tail);
      // Word copies need a 4-byte-aligned row of the table's width; the rest copy id by id.
      const shifted = new Ids(width + 1);
      router.writeRow(1000, 5, shifted, 1);
      expect(shifted.subarray(1)).toEqual(aligned);
      const wider = new Uint16Array(width);
      router.writeRow(1000, 5, wider, 0);
      expect(Array.from(wider)).toEqual(Array.from(aligned));
    }
  });

  it('walks the experts when a card is too wide for a run table', () => {
    // 4096 experts x 2048 coprime strides x topk 2 is past the table's cap.
    const router = new ExpertRouter({ ...tiny, numExperts: 4096, expertsPerToken: 2 });
    router.setWeightKey(3);
    const out = new Uint16Array(router.rowWidth * 3);
    for (let pos = 0; pos < 3; pos++) router.writeRow(9, pos, out, pos * router.rowWidth);
    const rows = [0, 1, 2].map((r) =>
      Array.from(out.subarray(r * router.rowWidth, (r + 1) * router.rowWidth)),
    );
    expectDistinctPerLayer(rows, router.layers, 2, 4096);
    expect(rows[1]).not.toEqual(rows[0]);
  });
});
