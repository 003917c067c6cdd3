/**
 * Hugging Face model directories for `--model DIR` tests: the config.json figures of real models,
 * written into a temporary directory by the test (modelDirs() removes them after the file).
 *
 * The figures are from memory of the published config.json / generation_config.json files on the
 * Hugging Face hub (trimmed to the keys that matter here; keys ringserve does not read, such as
 * rope_theta or rms_norm_eps, are kept where they show the file's real shape). Each key figure is
 * the one named in the model's card on the hub too: layers, experts, experts per token, context.
 */
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { committedTokenizersDir } from '../../src/tokenizer/presets.js';

type Json = Record<string, unknown>;

/** Qwen/Qwen3-235B-A22B config.json: 94 layers, all MoE (decoder_sparse_step 1, mlp_only_layers []). */
export const QWEN3_235B_A22B: Json = {
  architectures: ['Qwen3MoeForCausalLM'],
  model_type: 'qwen3_moe',
  bos_token_id: 151643,
  eos_token_id: 151645,
  vocab_size: 151936,
  hidden_size: 4096,
  intermediate_size: 12288,
  moe_intermediate_size: 1536,
  num_hidden_layers: 94,
  num_attention_heads: 64,
  num_key_value_heads: 4,
  head_dim: 128,
  num_experts: 128,
  num_experts_per_tok: 8,
  decoder_sparse_step: 1,
  mlp_only_layers: [],
  norm_topk_prob: true,
  max_position_embeddings: 40960,
  max_window_layers: 94,
  rope_scaling: null,
  rope_theta: 1000000.0,
  sliding_window: null,
  tie_word_embeddings: false,
  torch_dtype: 'bfloat16',
};
/** Qwen3's generation_config.json (the 235B and 30B alike): <|im_end|>, then <|endoftext|>. */
export const QWEN3_GENERATION: Json = {
  bos_token_id: 151643,
  eos_token_id: [151645, 151643],
  pad_token_id: 151643,
  temperature: 0.6,
  top_k: 20,
  top_p: 0.95,
};

/** Qwen/Qwen3-30B-A3B config.json: the qwen3-30b-a3b preset's model (src/wire/model-card.ts). */
export const QWEN3_30B_A3B: Json = {
  ...QWEN3_235B_A22B,
  hidden_size: 2048,
  intermediate_size: 6144,
  moe_intermediate_size: 768,
  num_hidden_layers: 48,
  num_attention_heads: 32,
  num_key_value_heads: 4,
  max_window_layers: 48,
};

/** zai-org/GLM-4.6 config.json: 92 layers, the first 3 dense, 160 routed experts + 1 shared. */
export const GLM_46: Json = {
  architectures: ['Glm4MoeForCausalLM'],
  model_type: 'glm4_moe',
  attention_bias: true,
  eos_token_id: [151329, 151336, 151338],
  pad_token_id: 151329,
  vocab_size: 151552,
  hidden_size: 5120,
  intermediate_size: 12288,
  moe_intermediate_size: 1536,
  num_hidden_layers: 92,
  first_k_dense_replace: 3,
  num_attention_heads: 96,
  num_key_value_heads: 8,
  head_dim: 128,
  partial_rotary_factor: 0.5,
  n_routed_experts: 160,
  n_shared_experts: 1,
  num_experts_per_tok: 8,
  n_group: 1,
  topk_group: 1,
  routed_scaling_factor: 2.5,
  norm_topk_prob: true,
  num_nextn_predict_layers: 1,
  max_position_embeddings: 202752,
  rope_scaling: null,
  rope_theta: 1000000,
  use_qk_norm: true,
  tie_word_embeddings: false,
  torch_dtype: 'bfloat16',
};
export const GLM_46_GENERATION: Json = {
  eos_token_id: [151329, 151336, 151338],
  pad_token_id: 151329,
};

/**
 * deepseek-ai/DeepSeek-V3 config.json: 61 layers, the first 3 dense, 256 routed experts + 1
 * shared, MLA attention (kv_lora_rank 512, qk_rope_head_dim 64), fp8 weights.
 */
export const DEEPSEEK_V3: Json = {
  architectures: ['DeepseekV3ForCausalLM'],
  model_type: 'deepseek_v3',
  bos_token_id: 0,
  eos_token_id: 1,
  vocab_size: 129280,
  hidden_size: 7168,
  intermediate_size: 18432,
  moe_intermediate_size: 2048,
  num_hidden_layers: 61,
  first_k_dense_replace: 3,
  moe_layer_freq: 1,
  num_attention_heads: 128,
  num_key_value_heads: 128,
  q_lora_rank: 1536,
  kv_lora_rank: 512,
  qk_nope_head_dim: 128,
  qk_rope_head_dim: 64,
  v_head_dim: 128,
  n_routed_experts: 256,
  n_shared_experts: 1,
  num_experts_per_tok: 8,
  n_group: 8,
  topk_group: 4,
  topk_method: 'noaux_tc',
  scoring_func: 'sigmoid',
  routed_scaling_factor: 2.5,
  norm_topk_prob: true,
  num_nextn_predict_layers: 1,
  max_position_embeddings: 163840,
  rope_scaling: {
    beta_fast: 32,
    beta_slow: 1,
    factor: 40,
    mscale: 1.0,
    mscale_all_dim: 1.0,
    original_max_position_embeddings: 4096,
    type: 'yarn',
  },
  quantization_config: {
    activation_scheme: 'dynamic',
    fmt: 'e4m3',
    quant_method: 'fp8',
    weight_block_size: [128, 128],
  },
  tie_word_embeddings: false,
  torch_dtype: 'bfloat16',
};
export const DEEPSEEK_V3_GENERATION: Json = {
  bos_token_id: 0,
  eos_token_id: 1,
  do_sample: true,
  temperature: 0.6,
  top_p: 0.95,
};

/** meta-llama/Llama-3.1-8B-Instruct config.json: dense, no head_dim key (4096 / 32 heads). */
export const LLAMA_31_8B: Json = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  bos_token_id: 128000,
  eos_token_id: [128001, 128008, 128009],
  vocab_size: 128256,
  hidden_size: 4096,
  intermediate_size: 14336,
  num_hidden_layers: 32,
  num_attention_heads: 32,
  num_key_value_heads: 8,
  max_position_embeddings: 131072,
  rope_scaling: {
    factor: 8.0,
    low_freq_factor: 1.0,
    high_freq_factor: 4.0,
    original_max_position_embeddings: 8192,
    rope_type: 'llama3',
  },
  rope_theta: 500000.0,
  tie_word_embeddings: false,
  torch_dtype: 'bfloat16',
};

/** mistralai/Mixtral-8x7B-Instruct-v0.1 config.json: every layer MoE, 8 local experts, top 2. */
export const MIXTRAL_8X7B: Json = {
  architectures: ['MixtralForCausalLM'],
  model_type: 'mixtral',
  bos_token_id: 1,
  eos_token_id: 2,
  vocab_size: 32000,
  hidden_size: 4096,
  intermediate_size: 14336,
  num_hidden_layers: 32,
  num_attention_heads: 32,
  num_key_value_heads: 8,
  num_local_experts: 8,
  num_experts_per_tok: 2,
  max_position_embeddings: 32768,
  rope_theta: 1000000.0,
  sliding_window: null,
  tie_word_embeddings: false,
  torch_dtype: 'bfloat16',
};

/**
 * The tiny preset's shape as a GLM-style config.json (src/wire/model-card.ts TINY: 1000 ids,
 * 4 layers with a dense first one, 16 experts, 4 per token, 4096 positions); its tokenizer files
 * are tokenizers/tiny's (tinyDir copies them in).
 */
export const TINY_GLM_SHAPE: Json = {
  architectures: ['Glm4MoeForCausalLM'],
  model_type: 'glm4_moe',
  vocab_size: 1000,
  hidden_size: 64,
  intermediate_size: 128,
  moe_intermediate_size: 32,
  num_hidden_layers: 4,
  first_k_dense_replace: 1,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  n_routed_experts: 16,
  n_shared_experts: 1,
  num_experts_per_tok: 4,
  max_position_embeddings: 4096,
  eos_token_id: 999,
  tie_word_embeddings: true,
};

/** A dense model of the tiny preset's vocabulary (Llama's keys). */
export const TINY_DENSE: Json = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  vocab_size: 1000,
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  max_position_embeddings: 2048,
  eos_token_id: 999,
  tie_word_embeddings: true,
};

export interface ModelDirs {
  /** A directory `name` under the file's temporary root holding these files (objects as JSON). */
  write(name: string, files: Record<string, Json | string>): string;
  /** A directory with `config` and tokenizers/tiny's three files. */
  tiny(name: string, config: Json): string;
}

/** A temporary root for this test file's model directories, removed after the file. */
export function modelDirs(): ModelDirs {
  const root = mkdtempSync(join(tmpdir(), 'ringserve-model-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));
  const write = (name: string, files: Record<string, Json | string>): string => {
    const dir = join(root, name);
    mkdirSync(dir, { recursive: true });
    for (const [file, content] of Object.entries(files)) {
      writeFileSync(
        join(dir, file),
        typeof content === 'string' ? content : JSON.stringify(content, null, 2),
      );
    }
    return dir;
  };
  return {
    write,
    tiny: (name, config) => {
      const dir = write(name, { 'config.json': config });
      for (const file of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) {
        copyFileSync(join(committedTokenizersDir(), 'tiny', file), join(dir, file));
      }
      return dir;
    },
  };
}
