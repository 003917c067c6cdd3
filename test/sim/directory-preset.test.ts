/**
 * A local Hugging Face model directory as the simulated model: `buildConfig({ model: dir })`, the
 * engine built from that config as the engine core builds it (engineConfigFrom), requests run end
 * to end with routing rows of the config's shape; a dense directory has none. The step time worked
 * out for a copy of Qwen3-30B-A3B's config.json is of the qwen3-30b-a3b preset's order.
 */
import { describe, expect, it } from 'vitest';
import { engineConfigFrom } from '../../src/cluster/sim-engine-config.js';
import { buildConfig } from '../../src/config.js';
import { getPreset } from '../../src/sim/presets.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import { getModelCard } from '../../src/wire/model-card.js';
import { FinishReason } from '../../src/wire/types.js';
import { modelDirs, QWEN3_30B_A3B, TINY_DENSE, TINY_GLM_SHAPE } from '../wire/hf-fixtures.js';
import { drain, key, request } from './helpers.js';

const dirs = modelDirs();

/** Runs three requests on the engine `--model model` gets, returning what each emitted. */
function runModel(model: string) {
  const config = buildConfig({ model, maxSpeed: true, lengthProfile: 'chat' });
  const engine = new SimEngine(engineConfigFrom(config));
  for (let slot = 0; slot < 3; slot++) engine.add(request(slot, { maxTokens: 40 }));
  const out = drain(engine);
  return { config, engine, out };
}

describe('a model directory in the simulator', () => {
  it("mirrors the tiny preset's card when its config.json has tiny's shape", () => {
    const dir = dirs.tiny('tiny-shaped', TINY_GLM_SHAPE);
    const { name: _, defaultNumGpuBlocks: __, ...card } = getModelCard(dir);
    const { name: ___, defaultNumGpuBlocks: ____, ...tiny } = getModelCard('tiny');
    expect(card).toEqual(tiny);
    expect(getModelCard(dir).name).toBe('tiny-shaped');
  });

  it('runs requests end to end with routing rows of the config shape', () => {
    const dir = dirs.tiny('tiny-moe', TINY_GLM_SHAPE);
    const { config, engine, out } = runModel(dir);
    expect(config.servedModelName).toBe(dir);
    expect(engine.config.preset).toBe(getPreset(dir));
    // 4 hidden layers, the first dense (first_k_dense_replace 1): 3 routing layers x 4 experts.
    const width = 3 * 4;
    for (let slot = 0; slot < 3; slot++) {
      const c = out.get(key(0, slot));
      expect(c, `slot ${slot}`).toBeDefined();
      if (c === undefined) continue;
      expect([FinishReason.Stop, FinishReason.Length]).toContain(c.finish);
      expect(c.tokens.length).toBeGreaterThan(0);
      // Prompt rows (24) and one per generated token but the last, each of `width` ids < 16.
      expect(c.routing.length).toBe(c.routingPositions.length * width);
      expect(c.routingPositions.length).toBeGreaterThanOrEqual(24);
      expect(Math.max(...c.routing)).toBeLessThan(16);
      for (const t of c.tokens) expect(t < 997 || t === 999 || t === 998, `token ${t}`).toBe(true);
    }
  });

  it("emits the tiny preset's tokens and routing for a directory of tiny's shape", () => {
    const dir = dirs.tiny('tiny-same', TINY_GLM_SHAPE);
    const fromDir = runModel(dir).out;
    const fromPreset = runModel('tiny').out;
    for (let slot = 0; slot < 3; slot++) {
      const a = fromDir.get(key(0, slot));
      const b = fromPreset.get(key(0, slot));
      expect(a?.tokens).toEqual(b?.tokens);
      expect(a?.routing).toEqual(b?.routing);
    }
  });

  it('runs a dense directory with no routing rows', () => {
    const dir = dirs.tiny('tiny-dense', TINY_DENSE);
    expect(getModelCard(dir)).toMatchObject({
      routingLayers: 0,
      numExperts: 1,
      expertsPerToken: 1,
    });
    const { out } = runModel(dir);
    for (let slot = 0; slot < 3; slot++) {
      const c = out.get(key(0, slot));
      expect(c?.tokens.length).toBeGreaterThan(0);
      expect(c?.routing).toEqual([]);
    }
  });

  it("works out a step time of the qwen3-30b-a3b preset's order for Qwen3-30B-A3B's config", () => {
    const dir = dirs.write('Qwen3-30B-A3B', { 'config.json': QWEN3_30B_A3B });
    const ours = getPreset(dir).stepTime;
    const preset = getPreset('qwen3-30b-a3b').stepTime;
    for (const k of Object.keys(preset) as (keyof typeof preset)[]) {
      expect(ours[k] / preset[k], k).toBeGreaterThan(0.8);
      expect(ours[k] / preset[k], k).toBeLessThan(1.25);
    }
    expect(ours.kvBytesPerToken).toBe(preset.kvBytesPerToken);
  });

  it('rejects a --model that is neither a preset nor a directory, naming --model', () => {
    expect(() => getPreset('/no/such/model-dir')).toThrow(
      expect.objectContaining({ code: 'RS_ERR_CONFIG_INVALID', param: '--model' }),
    );
  });
});
