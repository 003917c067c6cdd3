import { describe, expect, it } from 'vitest';
import { StepOutputs } from '../../src/engine/step-outputs.js';
import { resolveEngineConfig } from '../../src/sim/engine-config.js';
import { getLengthProfile, targetLength } from '../../src/sim/length-profile.js';
import { getPreset, PRESET_NAMES, validatePreset } from '../../src/sim/presets.js';
import { StepClock } from '../../src/sim/step-clock.js';
import { childSeed } from '../../src/wire/child-seed.js';
import { combine } from '../../src/wire/hash.js';

describe('presets', () => {
  it('has the published architecture figures', () => {
    expect(PRESET_NAMES).toEqual(['qwen3-30b-a3b', 'glm-4.5-air', 'tiny', 'tiny-wide']);
    const qwen = getPreset('qwen3-30b-a3b');
    expect([
      qwen.vocabSize,
      qwen.numHiddenLayers,
      qwen.routingLayers,
      qwen.numExperts,
      qwen.expertsPerToken,
    ]).toEqual([151936, 48, 48, 128, 8]);
    expect(qwen.eosTokenIds[0]).toBe(151645);
    expect(qwen.maxModelLen).toBe(40960);
    const glm = getPreset('glm-4.5-air');
    expect([
      glm.vocabSize,
      glm.numHiddenLayers,
      glm.routingLayers,
      glm.numExperts,
      glm.expertsPerToken,
    ]).toEqual([151552, 46, 45, 128, 8]);
    expect([...glm.eosTokenIds].sort()).toEqual([151329, 151336, 151338]);
    expect(glm.maxModelLen).toBe(131072);
    for (const name of PRESET_NAMES) expect(validatePreset(getPreset(name))).toBeDefined();
  });

  it('rejects unknown names and bad figures with a coded config error', () => {
    expect(() => getPreset('gpt-5')).toThrow(
      expect.objectContaining({ code: 'RS_ERR_CONFIG_INVALID', param: '--model' }),
    );
    expect(() => validatePreset({ ...getPreset('tiny'), expertsPerToken: 17 })).toThrow(
      /expertsPerToken/,
    );
    expect(() => resolveEngineConfig({ preset: 'tiny', maxNumSeqs: 0 })).toThrow(
      expect.objectContaining({ param: '--max-num-seqs' }),
    );
    expect(() => resolveEngineConfig({ preset: 'tiny', speedup: 0 })).toThrow(
      expect.objectContaining({ param: '--speedup' }),
    );
    expect(() => resolveEngineConfig({ preset: 'tiny', lengthProfile: 'novel' })).toThrow(
      expect.objectContaining({ param: '--length-profile' }),
    );
  });

  it('defaults the KV pool to the preset figure, rescaled to the block size', () => {
    expect(resolveEngineConfig({ preset: 'glm-4.5-air' }).numGpuBlocks).toBe(107_000);
    expect(resolveEngineConfig({ preset: 'glm-4.5-air', blockSize: 32 }).numGpuBlocks).toBe(53_500);
  });
});

describe('step clock', () => {
  it('puts glm-4.5-air at ~5.5k tok/s with 130 requests at ~6k average context', () => {
    const clock = new StepClock(getPreset('glm-4.5-air').stepTime, 1, false);
    const ms = clock.stepMs(130, 0, 130 * 6000);
    expect(ms).toBeCloseTo(23.64, 1);
    expect(130 / (ms / 1000)).toBeGreaterThan(5450);
    expect(130 / (ms / 1000)).toBeLessThan(5550);
  });

  it('grows with prefill and context, divides by speedup, and is 0 at max speed or idle', () => {
    const model = getPreset('qwen3-30b-a3b').stepTime;
    const clock = new StepClock(model, 1, false);
    expect(clock.stepMs(0, 0, 0)).toBe(0);
    expect(clock.stepMs(10, 4096, 5000)).toBeGreaterThan(clock.stepMs(10, 0, 5000));
    expect(clock.stepMs(10, 0, 50_000)).toBeGreaterThan(clock.stepMs(10, 0, 5000));
    expect(new StepClock(model, 4, false).stepMs(64, 0, 1e5)).toBeCloseTo(
      clock.stepMs(64, 0, 1e5) / 4,
      9,
    );
    expect(new StepClock(model, 1, true).stepMs(64, 8192, 1e6)).toBe(0);
  });
});

describe('length profiles', () => {
  const mean = (name: string): number => {
    const p = getLengthProfile(name);
    let sum = 0;
    for (let i = 0; i < 20_000; i++) sum += targetLength(p, combine(17, i));
    return sum / 20_000;
  };
  it('centre rl around 12.5k tokens and chat around 350', () => {
    expect(mean('rl')).toBeGreaterThan(12_500 * 0.95);
    expect(mean('rl')).toBeLessThan(12_500 * 1.05);
    expect(mean('chat')).toBeGreaterThan(350 * 0.9);
    expect(mean('chat')).toBeLessThan(350 * 1.1);
  });
});

describe('childSeed', () => {
  it('is seed + index as vLLM parallel sampling, null stays null, wraps near 2^53', () => {
    expect(childSeed(10, 3)).toBe(13);
    expect(childSeed(null, 3)).toBeNull();
    const s = childSeed(Number.MAX_SAFE_INTEGER, 2) as number;
    expect(Number.isSafeInteger(s)).toBe(true);
    expect(s).toBe(1);
  });
});

describe('StepOutputs', () => {
  it('keeps every row, mask id and routing row when its arrays grow', () => {
    const out = new StepOutputs(2);
    out.shapeRouting(3, 2, 300);
    for (let i = 0; i < 100; i++) {
      const row = out.addRow(i % 3, i, 7);
      out.token[row] = i;
      const m = out.reserveMask(i % 5);
      for (let k = 0; k < i % 5; k++) out.maskIds[m + k] = i * 10 + k;
      out.maskStart[row] = m;
      out.maskCount[row] = i % 5;
      out.maskLength = m + (i % 5);
      const at = out.reserveRoutingRows(2);
      for (let e = 0; e < 12; e++) out.routing[at + e] = (i + e) % 300;
      out.routingRows[row] = 2;
      out.routingRowCount += 2;
    }
    expect(out.count).toBe(100);
    expect(out.routing).toBeInstanceOf(Uint16Array);
    for (let i = 0; i < 100; i++) {
      expect(out.token[i]).toBe(i);
      expect(out.server[i]).toBe(i % 3);
      const m = out.maskStart[i] as number;
      for (let k = 0; k < i % 5; k++) expect(out.maskIds[m + k]).toBe(i * 10 + k);
      const at = (out.routingStart[i] as number) * out.routingRowWidth;
      expect(out.routing[at + 11]).toBe((i + 11) % 300);
    }
    out.clear();
    expect([out.count, out.maskLength, out.routingRowCount]).toEqual([0, 0, 0]);
  });
});
