/**
 * `--model DIR`: a local Hugging Face model directory, as vLLM's --model takes one. These are the
 * figures of its config.json (with generation_config.json for the EOS ids and tokenizer.json for
 * the text vocabulary) that a model card (model-card.ts) and a step-time model (src/sim/presets.ts)
 * are made from. Read synchronously, once per path: every process gets its card at startup, in
 * code that is synchronous throughout. Key names are transformers' (configuration_qwen3_moe.py,
 * configuration_deepseek_v3.py, configuration_glm4_moe.py, configuration_mixtral.py,
 * configuration_llama.py); a multimodal config's language model is read from its text_config.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { RS_ERR_CONFIG_INVALID } from '../errors.js';
import { textVocabSizeOf } from './hf-text-vocab.js';

/** The MoE part of a model: its routed experts, and which layers route to them. */
export interface HfMoe {
  numExperts: number;
  expertsPerToken: number;
  /** Hidden width of one routed expert's MLP. */
  expertIntermediateSize: number;
  /** Hidden width of a MoE layer's shared (always active) experts together; 0 when none. */
  sharedIntermediateSize: number;
  /** Leading dense layers: layers [denseLayers, numHiddenLayers) route to experts. */
  denseLayers: number;
}

/** Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds a latent per token and layer. */
export interface HfMla {
  kvLoraRank: number;
  /** null: the query is projected from the hidden state directly (DeepSeek-V2-Lite). */
  qLoraRank: number | null;
  qkNopeHeadDim: number;
  qkRopeHeadDim: number;
  vHeadDim: number;
}

export interface HfModelConfig {
  /** The directory as given. */
  dir: string;
  vocabSize: number;
  numHiddenLayers: number;
  maxPositionEmbeddings: number;
  hiddenSize: number;
  /** Width of a dense layer's MLP (0 when every layer is MoE and the config gives none). */
  intermediateSize: number;
  numAttentionHeads: number;
  numKeyValueHeads: number;
  headDim: number;
  mla: HfMla | null;
  /** null: a dense model. */
  moe: HfMoe | null;
  tieWordEmbeddings: boolean;
  /** Bytes per weight as served: 1 for an fp8 checkpoint, bits / 8 for other quantized ones, else 2. */
  bytesPerWeight: number;
  /** generation_config.json's eos_token_id, else config.json's; the first ends a simulated turn. */
  eosTokenIds: number[];
  /** From tokenizer.json (hf-text-vocab.ts); undefined without one, or with no added tokens after the text. */
  textVocabSize: number | undefined;
}

function fail(what: string): never {
  throw new RS_ERR_CONFIG_INVALID('--model', what);
}

type Json = Record<string, unknown>;

/** A file's JSON object; null when the file does not exist and is not required. */
function readJsonObject(path: string, required: boolean): Json | null {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && !required) return null;
    if (code === 'ENOENT') fail(`${path} does not exist: a model directory holds config.json`);
    fail(`cannot read ${path}: ${(err as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    fail(`${path} is not JSON: ${(err as Error).message}`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    fail(`${path} is not a JSON object`);
  }
  return json as Json;
}

/** Typed reads of config.json's keys, each failure a config error naming the file and the key. */
class Keys {
  constructor(
    readonly path: string,
    readonly json: Json,
  ) {}

  has(key: string): boolean {
    return this.json[key] !== undefined && this.json[key] !== null;
  }

  /** An integer >= min, or undefined when absent (or null, as transformers writes "unset"). */
  opt(key: string, min = 0): number | undefined {
    const v = this.json[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
      fail(`${this.path}: "${key}" must be an integer >= ${min}, got ${JSON.stringify(v)}`);
    }
    return v;
  }

  int(key: string, min = 0): number {
    const v = this.opt(key, min);
    if (v === undefined) fail(`${this.path} has no "${key}" (an integer)`);
    return v;
  }

  /** An integer or a list of them (eos_token_id, mlp_only_layers); undefined when absent. */
  ints(key: string): number[] | undefined {
    const v = this.json[key];
    if (v === undefined || v === null) return undefined;
    const list = Array.isArray(v) ? v : [v];
    for (const id of list) {
      if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) {
        fail(
          `${this.path}: "${key}" must be an integer or a list of them, got ${JSON.stringify(v)}`,
        );
      }
    }
    return list as number[];
  }
}

const cache = new Map<string, HfModelConfig>();

/** The model directory's figures, read once per path; a missing or bad key is a --model error. */
export function readHfModelConfig(dir: string): HfModelConfig {
  const key = resolve(dir);
  let m = cache.get(key);
  if (m === undefined) {
    m = parse(dir);
    cache.set(key, m);
  }
  return m;
}

function parse(dir: string): HfModelConfig {
  const path = join(dir, 'config.json');
  const top = readJsonObject(path, true) as Json;
  // Multimodal configs (Llama-4, Gemma-3, Qwen2.5-VL's newer form) keep the language model's
  // figures under text_config; its keys win over the top level's, which may hold eos_token_id.
  const text = top.text_config;
  const k = new Keys(path, isObject(text) ? { ...top, ...text } : top);
  const layers = k.int('num_hidden_layers', 1);
  const hidden = k.int('hidden_size', 1);
  const heads = k.int('num_attention_heads', 1);
  const moe = readMoe(k, layers);
  const denseLayers = moe === null ? layers : moe.denseLayers;
  const intermediateSize = denseLayers > 0 ? k.int('intermediate_size', 1) : 0;
  return {
    dir,
    vocabSize: k.int('vocab_size', 1),
    numHiddenLayers: layers,
    maxPositionEmbeddings: k.int('max_position_embeddings', 1),
    hiddenSize: hidden,
    intermediateSize,
    numAttentionHeads: heads,
    numKeyValueHeads: k.opt('num_key_value_heads', 1) ?? heads,
    headDim: k.opt('head_dim', 1) ?? headDimOf(k, hidden, heads),
    mla: readMla(k),
    moe,
    tieWordEmbeddings: k.json.tie_word_embeddings === true,
    bytesPerWeight: bytesPerWeight(k.json.quantization_config),
    eosTokenIds: eosIds(dir, k),
    textVocabSize: textVocabSize(dir),
  };
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function headDimOf(k: Keys, hidden: number, heads: number): number {
  if (hidden % heads !== 0) {
    fail(
      `${k.path} has no "head_dim", and hidden_size ${hidden} is not a multiple of ${heads} heads`,
    );
  }
  return hidden / heads;
}

/**
 * Which layers route to experts, as the models' own code decides it:
 *   Qwen2/3-MoE (modeling_qwen3_moe.py): layer i not in mlp_only_layers and
 *     (i + 1) % decoder_sparse_step == 0;
 *   DeepSeek-V3 (modeling_deepseek.py): i >= first_k_dense_replace and i % moe_layer_freq == 0;
 *   GLM-4.5/4.6 (modeling_glm4_moe.py): i >= first_k_dense_replace;
 *   Mixtral: every layer.
 * Routing rows carry the MoE layers after a leading block of dense ones (ModelCard.routingLayers;
 * the vLLM bridge drops a row's first numHiddenLayers - routingLayers layers, step-encoder.ts and
 * bridge-output.ts), so a dense layer after the first MoE one is refused.
 */
function readMoe(k: Keys, layers: number): HfMoe | null {
  const numExperts =
    k.opt('num_experts') ?? k.opt('n_routed_experts') ?? k.opt('num_local_experts');
  if (numExperts === undefined || numExperts === 0) return null;
  const firstDense = k.opt('first_k_dense_replace') ?? 0;
  const freq = k.opt('moe_layer_freq', 1) ?? 1;
  const step = k.opt('decoder_sparse_step', 1) ?? 1;
  const mlpOnly = new Set(k.ints('mlp_only_layers') ?? []);
  const isMoe = (i: number): boolean =>
    i >= firstDense && i % freq === 0 && (i + 1) % step === 0 && !mlpOnly.has(i);
  let first = 0;
  while (first < layers && !isMoe(first)) first++;
  if (first === layers) return null;
  for (let i = first + 1; i < layers; i++) {
    if (!isMoe(i)) {
      fail(
        `${k.path}: layer ${i} is dense but layer ${first} before it routes to experts; routing ` +
          'rows carry the MoE layers after a leading block of dense ones, so dense layers among ' +
          'MoE ones (decoder_sparse_step, mlp_only_layers, moe_layer_freq) are not supported',
      );
    }
  }
  // Mixtral's experts are intermediate_size wide; the others name the expert width apart.
  const expertWidth = k.opt('moe_intermediate_size', 1) ?? k.int('intermediate_size', 1);
  const shared =
    (k.opt('n_shared_experts') ?? 0) * expertWidth +
    (k.opt('shared_expert_intermediate_size') ?? 0);
  return {
    numExperts,
    expertsPerToken: k.int('num_experts_per_tok', 1),
    expertIntermediateSize: expertWidth,
    sharedIntermediateSize: shared,
    denseLayers: first,
  };
}

function readMla(k: Keys): HfMla | null {
  if (!k.has('kv_lora_rank')) return null;
  return {
    kvLoraRank: k.int('kv_lora_rank', 1),
    qLoraRank: k.opt('q_lora_rank', 1) ?? null,
    qkNopeHeadDim: k.int('qk_nope_head_dim'),
    qkRopeHeadDim: k.int('qk_rope_head_dim'),
    vHeadDim: k.int('v_head_dim', 1),
  };
}

/** DeepSeek-V3 ships fp8 weights (quant_method "fp8"); GPTQ/AWQ say their bits. */
function bytesPerWeight(q: unknown): number {
  if (!isObject(q)) return 2;
  if (q.quant_method === 'fp8') return 1;
  return typeof q.bits === 'number' && q.bits > 0 && q.bits <= 16 ? q.bits / 8 : 2;
}

/** As transformers' GenerationConfig: generation_config.json's eos_token_id wins over config.json's. */
function eosIds(dir: string, k: Keys): number[] {
  const genPath = join(dir, 'generation_config.json');
  const gen = readJsonObject(genPath, false);
  const fromGen = gen === null ? undefined : new Keys(genPath, gen).ints('eos_token_id');
  const ids = fromGen !== undefined && fromGen.length > 0 ? fromGen : k.ints('eos_token_id');
  if (ids === undefined || ids.length === 0) {
    fail(`${k.path} has no "eos_token_id", nor has ${genPath}`);
  }
  return [...new Set(ids)];
}

function textVocabSize(dir: string): number | undefined {
  const path = join(dir, 'tokenizer.json');
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    fail(`cannot read ${path}: ${(err as Error).message}`);
  }
  try {
    return textVocabSizeOf(text);
  } catch (err) {
    fail(`${path} is not JSON: ${(err as Error).message}`);
  }
}
