import { describe, expect, it } from 'vitest';
import { PositionShape, SimModel } from '../../src/sim/model.js';
import { getPreset } from '../../src/sim/presets.js';
import { Sampler } from '../../src/sim/sampler.js';
import { combine } from '../../src/wire/hash.js';
import { params } from './helpers.js';

const tiny = getPreset('tiny');

describe('the simulated model', () => {
  it('is peaked like a real LM under top_p 0.97 / top_k 512: mostly 1-3 kept, some hundreds', () => {
    const model = new SimModel(getPreset('qwen3-30b-a3b'), 0, 0);
    const sampler = new Sampler(model);
    const shape = new PositionShape();
    const p = params({ temperature: 1, topP: 0.97, topK: 512 });
    let small = 0;
    let large = 0;
    const n = 20_000;
    for (let position = 0; position < n; position++) {
      model.shapeAt(combine(3, position), position, shape);
      sampler.eosLogit = -18;
      sampler.uniform = 0.5;
      sampler.sample(shape, p, null, false);
      expect(sampler.keptCount).toBeLessThanOrEqual(512);
      if (sampler.keptCount <= 3) small++;
      if (sampler.keptCount > 100) large++;
    }
    expect(small / n).toBeGreaterThan(0.75);
    expect(large / n).toBeGreaterThan(0.01);
    expect(large / n).toBeLessThan(0.1);
  });

  it('maps ranks to token ids and back as a bijection over the non-EOS text ids', () => {
    const model = new SimModel(tiny, 1, 3);
    const shape = new PositionShape();
    model.shapeAt(12345, 6, shape);
    const seen = new Set<number>();
    for (let r = 0; r < model.streamSize; r++) {
      const id = model.tokenAtRank(r, shape);
      expect(model.isEos(id)).toBe(false);
      expect(id).toBeLessThan(tiny.textVocabSize!);
      expect(model.rankOfToken(id, shape)).toBe(r);
      seen.add(id);
    }
    // Every text token, and none of the special ones (997 is <|im_start|>).
    expect(seen.size).toBe(tiny.textVocabSize);
    expect(model.rankOfToken(tiny.eosTokenIds[0] as number, shape)).toBe(-1);
    expect(model.rankOfToken(997, shape)).toBe(-1);
  });
});
