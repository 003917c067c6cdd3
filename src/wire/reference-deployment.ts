/**
 * Where a model directory (`--model DIR`) is assumed to run, since its config.json says how big
 * the model is but not on what. The presets each name their deployment (model-card.ts,
 * src/sim/presets.ts); this is the same arithmetic written once, from the config's figures:
 *
 *   GPUs: H100-80GB SXM (3.35 TB/s HBM3, 989 TFLOPS dense bf16: NVIDIA's H100 datasheet), at
 *     gpu_memory_utilization 0.9 (vLLM's default), ~4 GB of that for activations and CUDA graphs.
 *   How many: the fewest, a power of two up to 64, whose share of the weights is at most 60% of
 *     the 0.9 x 80 GB, tensor parallel over all of them. The rule gives the presets' own
 *     deployments: Qwen3-30B-A3B (61 GB of bf16 weights) on 2, GLM-4.5-Air (~220 GB) on 8.
 *   Weights: parameters counted from the config (below) at bytesPerWeight.
 *   KV per token per GPU: 2 (K, V) x ceil(num_key_value_heads / TP) heads (vLLM replicates KV heads
 *     when there are fewer than GPUs) x head_dim x layers x 2 B (bf16 cache); with MLA the latent
 *     (kv_lora_rank + qk_rope_head_dim) x layers x 2 B, the same on every GPU (vLLM's MLA cache).
 *
 * Parameters: per layer the attention projections (q, k, v, o; MLA's low-rank ones), a SwiGLU MLP
 * of 3 x hidden x width for each dense layer, each routed expert and the shared ones, the router,
 * and the embeddings and LM head (one matrix when tied). Norms and biases (<0.1%) are left out.
 * For the configs of test/wire/hf-fixtures.ts this counts (total / active) Qwen3-30B-A3B 30.5B /
 * 3.0B, Qwen3-235B-A22B 235.1B / 21.6B, GLM-4.6 352.8B / 32.9B, DeepSeek-V3 671.0B / 36.6B,
 * Mixtral-8x7B 46.7B / 12.8B, Llama-3.1-8B 8.0B; their model cards say 30.5B / 3.3B, 235B / 22B,
 * 355B / 32B, 671B / 37B, 46.7B / 12.9B, 8B (active here leaves out the input embedding; GLM-4.6's
 * 355B is about this count plus its multi-token-prediction layer, ~3.8B, which is not counted).
 * Sliding-window layers are counted as full ones.
 */
import { ENGINE_DEFAULTS, ENGINE_LIMITS } from './engine-defaults.js';
import type { HfModelConfig } from './hf-config.js';

export const REFERENCE_GPU = {
  name: 'H100-80GB',
  memoryBytes: 80e9,
  memoryUtilization: 0.9,
  activationBytes: 4e9,
  hbmBytesPerS: 3.35e12,
  bf16Flops: 989e12,
} as const;

/** The largest share of a GPU's usable memory the weights may take; the rest is KV. */
const MAX_WEIGHT_SHARE = 0.6;
const MAX_GPUS = 64;
/** The largest --block-size: the pool is at least one longest sequence in blocks of that. */
const LARGEST_BLOCK = 128;
const KV_BYTES = 2;

export interface ModelSize {
  totalParams: number;
  /** Parameters one token is multiplied through (the LM head, not the input embedding). */
  activeParams: number;
}

export interface ReferenceDeployment extends ModelSize {
  gpus: number;
  weightBytesPerGpu: number;
  kvBytesPerTokenPerGpu: number;
  /** Tokens the KV memory left on each GPU holds (0 when the weights leave none). */
  kvTokens: number;
}

export function modelSize(m: HfModelConfig): ModelSize {
  const h = m.hiddenSize;
  const mlp = (width: number): number => 3 * h * width;
  const attention = attentionParams(m);
  const lmHead = m.vocabSize * h;
  const embeddings = m.tieWordEmbeddings ? lmHead : 2 * lmHead;
  const moe = m.moe;
  const denseLayers = moe === null ? m.numHiddenLayers : moe.denseLayers;
  const moeLayers = m.numHiddenLayers - denseLayers;
  let moeTotal = 0;
  let moeActive = 0;
  if (moe !== null) {
    const always = mlp(moe.sharedIntermediateSize) + h * moe.numExperts;
    moeTotal = moe.numExperts * mlp(moe.expertIntermediateSize) + always;
    moeActive = moe.expertsPerToken * mlp(moe.expertIntermediateSize) + always;
  }
  const common = m.numHiddenLayers * attention + denseLayers * mlp(m.intermediateSize);
  return {
    totalParams: common + moeLayers * moeTotal + embeddings,
    activeParams: common + moeLayers * moeActive + lmHead,
  };
}

function attentionParams(m: HfModelConfig): number {
  const h = m.hiddenSize;
  const heads = m.numAttentionHeads;
  const mla = m.mla;
  if (mla === null) return 2 * h * heads * m.headDim + 2 * h * m.numKeyValueHeads * m.headDim;
  const qHead = mla.qkNopeHeadDim + mla.qkRopeHeadDim;
  const q =
    mla.qLoraRank === null ? h * heads * qHead : h * mla.qLoraRank + mla.qLoraRank * heads * qHead;
  const kv =
    h * (mla.kvLoraRank + mla.qkRopeHeadDim) +
    mla.kvLoraRank * heads * (mla.qkNopeHeadDim + mla.vHeadDim);
  return q + kv + heads * mla.vHeadDim * h;
}

export function kvBytesPerTokenPerGpu(m: HfModelConfig, gpus: number): number {
  if (m.mla !== null)
    return (m.mla.kvLoraRank + m.mla.qkRopeHeadDim) * m.numHiddenLayers * KV_BYTES;
  const heads = Math.ceil(m.numKeyValueHeads / gpus);
  return 2 * heads * m.headDim * m.numHiddenLayers * KV_BYTES;
}

export function referenceDeployment(m: HfModelConfig): ReferenceDeployment {
  const size = modelSize(m);
  const weightBytes = size.totalParams * m.bytesPerWeight;
  const usable = REFERENCE_GPU.memoryBytes * REFERENCE_GPU.memoryUtilization;
  let gpus = 1;
  while (gpus < MAX_GPUS && weightBytes / gpus > MAX_WEIGHT_SHARE * usable) gpus *= 2;
  const weightBytesPerGpu = weightBytes / gpus;
  const kvBytes = kvBytesPerTokenPerGpu(m, gpus);
  const free = usable - weightBytesPerGpu - REFERENCE_GPU.activationBytes;
  return {
    ...size,
    gpus,
    weightBytesPerGpu,
    kvBytesPerTokenPerGpu: kvBytes,
    kvTokens: Math.max(0, Math.floor(free / kvBytes)),
  };
}

/**
 * The deployment's KV pool in blocks of `blockTokens`, clamped: at least one sequence of
 * `maxModelLen` (in the largest block size, so every --block-size holds one, as vLLM requires at
 * startup), at most what ENGINE_DEFAULTS.maxNumSeqs such sequences fill (a pool larger than
 * that only caches prefixes, yet costs the simulator ~20 B per block: a tiny model on a whole
 * H100 would be 10^8 blocks), and within ENGINE_LIMITS.numGpuBlocks.
 */
export function referenceKvBlocks(
  d: ReferenceDeployment,
  maxModelLen: number,
  blockTokens: number,
): number {
  const least = Math.ceil((Math.ceil(maxModelLen / LARGEST_BLOCK) * LARGEST_BLOCK) / blockTokens);
  const most = Math.min(
    ENGINE_LIMITS.numGpuBlocks.max,
    Math.ceil((ENGINE_DEFAULTS.maxNumSeqs * maxModelLen) / blockTokens),
  );
  return Math.min(most, Math.max(least, Math.floor(d.kvTokens / blockTokens)));
}
