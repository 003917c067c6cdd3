import { RS_ERR_CONFIG_INVALID } from '../errors.js';

/**
 * Step time in ms = baseMs + perDecodeSeqMs * decodeSeqs + perPrefillTokenMs * prefillTokens
 *                 + perContextTokenMs * totalContext   (see step-clock.ts).
 */
export interface StepTimeModel {
  /** Fixed cost per step: streaming the (MoE) weights once, collectives, launch overhead. */
  baseMs: number;
  /** Per sequence sampled: LM head, sampler, per-token MoE work. */
  perDecodeSeqMs: number;
  /** Per prompt token forwarded: compute-bound GEMMs over the active parameters. */
  perPrefillTokenMs: number;
  /** Per token of context attended over: reading its KV cache. */
  perContextTokenMs: number;
}

/** A simulated model: the architecture figures the API tier sees, and how fast it runs. */
export interface ModelPreset {
  name: string;
  vocabSize: number;
  numHiddenLayers: number;
  /** Layers that route to experts, i.e. routing-row layers (hidden layers minus dense ones). */
  routingLayers: number;
  numExperts: number;
  expertsPerToken: number;
  /** End-of-sequence ids; the first is the one the simulated model emits to end a response. */
  eosTokenIds: readonly number[];
  maxModelLen: number;
  /** KV blocks of 16 tokens in the reference deployment noted on each preset. */
  defaultNumGpuBlocks: number;
  stepTime: StepTimeModel;
}

/**
 * Qwen/Qwen3-30B-A3B, figures from its config.json on the Hugging Face hub: vocab_size 151936,
 * num_hidden_layers 48, num_experts 128, num_experts_per_tok 8, decoder_sparse_step 1 and
 * mlp_only_layers [] (every layer is MoE, so 48 routing layers), eos_token_id 151645 (<|im_end|>;
 * generation_config.json adds 151643 <|endoftext|>), max_position_embeddings 40960.
 * Reference deployment: 2 x H100-80GB, tensor parallel 2, gpu_memory_utilization 0.9.
 *   KV per token per GPU = 2 (K,V) * 2 kv heads (4 / TP2) * 128 head_dim * 48 layers * 2 B = 49,152 B.
 *   KV memory per GPU = 72 GB - 30.5 GB weights (30.5B params bf16 / 2) - ~4 GB activations = 37.5 GB
 *   -> 763k tokens -> ~47,000 blocks of 16.
 * Step time: base 10 ms = all experts' weights streamed once per step at batch >= ~32
 *   (30.5 GB per GPU / 3.35 TB/s = 9.1 ms) + ~1 ms of all-reduces; context 2.9e-5 ms/token = 49,152 B
 *   at 3.35 TB/s (14.7 ns) at 50% efficiency; prefill 0.0083 ms/token = 2 * 3.3B active FLOP over
 *   2 GPUs * 989 TFLOPS * 40% MFU.
 * These figures are from memory of the published configs, checked against public copies of them.
 */
const QWEN3_30B_A3B: ModelPreset = {
  name: 'qwen3-30b-a3b',
  vocabSize: 151936,
  numHiddenLayers: 48,
  routingLayers: 48,
  numExperts: 128,
  expertsPerToken: 8,
  eosTokenIds: [151645, 151643],
  maxModelLen: 40960,
  defaultNumGpuBlocks: 47_000,
  stepTime: {
    baseMs: 10,
    perDecodeSeqMs: 0.02,
    perPrefillTokenMs: 0.0083,
    perContextTokenMs: 2.9e-5,
  },
};

/**
 * zai-org/GLM-4.5-Air, figures from its config.json on the Hugging Face hub: vocab_size 151552,
 * num_hidden_layers 46 with first_k_dense_replace 1, so layer 0 is dense and layers 1..45 are MoE:
 * 45 routing layers (routing rows carry those 45, layer 1 first); n_routed_experts 128 (plus
 * n_shared_experts 1, which is not routed), num_experts_per_tok 8, eos_token_id
 * [151329, 151336, 151338] (<|endoftext|>, <|user|>, <|observation|>; the model emits <|user|>
 * to end an assistant turn, so that one comes first here), max_position_embeddings 131072.
 * Reference deployment (the one the 5.5k tok/s was measured on): one node of
 * 8 x H100-80GB, tensor parallel 8, gpu_memory_utilization 0.9.
 *   KV per token per GPU = 2 * 1 kv head (8 / TP8) * 128 * 46 layers * 2 B = 23,552 B.
 *   KV memory per GPU = 72 GB - 27.5 GB weights (~110B params bf16 / 8) - ~4 GB = 40.5 GB
 *   -> 1.72M tokens -> ~107,000 blocks of 16.
 * Step time, calibrated to the measurement: 130 concurrent requests of ~12k generated tokens run
 * at ~5.5k tok/s, i.e. 130 / 5500 = 23.64 ms per decode step, with contexts spread evenly over
 * 0..12k, i.e. ~6k on average, 130 * 6000 = 780,000 context tokens per step:
 *   base 10 ms (27.5 GB of weights per GPU / 3.35 TB/s = 8.2 ms, every expert is hit at batch 130,
 *   + ~1.8 ms of 2 all-reduces x 46 layers) + 130 * 0.02 ms = 12.6 ms;
 *   attention gets the rest: (23.636 - 12.6) / 780,000 = 1.415e-5 ms per context token
 *   (23,552 B / 3.35 TB/s = 7 ns at peak, so ~50% of bandwidth: plausible).
 *   Check: 10 + 2.6 + 780,000 * 1.415e-5 = 23.637 ms -> 130 / 0.023637 s = 5,500 tok/s.
 *   Prefill: 2 * 12B active FLOP / (8 GPUs * 989 TFLOPS * 40% MFU) = 7.6 us -> 0.0076 ms/token.
 * These figures are from memory of the published configs, checked against public copies of them.
 */
const GLM_45_AIR: ModelPreset = {
  name: 'glm-4.5-air',
  vocabSize: 151552,
  numHiddenLayers: 46,
  routingLayers: 45,
  numExperts: 128,
  expertsPerToken: 8,
  eosTokenIds: [151336, 151329, 151338],
  maxModelLen: 131072,
  defaultNumGpuBlocks: 107_000,
  stepTime: {
    baseMs: 10,
    perDecodeSeqMs: 0.02,
    perPrefillTokenMs: 0.0076,
    perContextTokenMs: 1.415e-5,
  },
};

/**
 * A small model for tests: a vocabulary small enough to enumerate in a test, a dense first layer
 * like GLM's, and few experts, so that every code path runs fast.
 */
const TINY: ModelPreset = {
  name: 'tiny',
  vocabSize: 1000,
  numHiddenLayers: 4,
  routingLayers: 3,
  numExperts: 16,
  expertsPerToken: 4,
  eosTokenIds: [999, 998],
  maxModelLen: 4096,
  defaultNumGpuBlocks: 2048,
  stepTime: { baseMs: 1, perDecodeSeqMs: 0.005, perPrefillTokenMs: 0.001, perContextTokenMs: 1e-6 },
};

const PRESETS: readonly ModelPreset[] = [QWEN3_30B_A3B, GLM_45_AIR, TINY];

export const PRESET_NAMES: readonly string[] = PRESETS.map((p) => p.name);

/** The preset of that name; an unknown name is a config error naming `--model`. */
export function getPreset(name: string): ModelPreset {
  const preset = PRESETS.find((p) => p.name === name);
  if (preset === undefined) {
    throw new RS_ERR_CONFIG_INVALID(
      '--model',
      `unknown model preset "${name}"; one of ${PRESET_NAMES.join(', ')}`,
    );
  }
  return preset;
}

/**
 * Checks a preset built by hand (tests, or a variant such as one with more than 256 experts).
 * Throws RS_ERR_CONFIG_INVALID naming `--model` when a figure is out of range.
 */
export function validatePreset(p: ModelPreset): ModelPreset {
  const fail = (what: string): never => {
    throw new RS_ERR_CONFIG_INVALID('--model', `preset "${p.name}": ${what}`);
  };
  const isInt = (v: number, min: number, max: number): boolean =>
    Number.isInteger(v) && v >= min && v <= max;
  if (!isInt(p.vocabSize, 16, 1 << 24)) fail('vocabSize must be an integer in [16, 2^24]');
  if (!isInt(p.numExperts, 1, 65536)) fail('numExperts must be an integer in [1, 65536]');
  if (!isInt(p.expertsPerToken, 1, p.numExperts))
    fail('expertsPerToken must be in [1, numExperts]');
  if (!isInt(p.routingLayers, 0, p.numHiddenLayers))
    fail('routingLayers must be in [0, numHiddenLayers]');
  if (p.eosTokenIds.length === 0) fail('eosTokenIds is empty');
  for (const id of p.eosTokenIds)
    if (!isInt(id, 0, p.vocabSize - 1)) fail(`eos id ${id} not in vocab`);
  if (new Set(p.eosTokenIds).size !== p.eosTokenIds.length) fail('eosTokenIds has duplicates');
  if (!isInt(p.maxModelLen, 2, 1 << 24)) fail('maxModelLen must be an integer in [2, 2^24]');
  if (!isInt(p.defaultNumGpuBlocks, 1, 1 << 26)) fail('defaultNumGpuBlocks out of range');
  for (const [k, v] of Object.entries(p.stepTime)) {
    if (!(Number.isFinite(v) && v >= 0)) fail(`stepTime.${k} must be finite and >= 0`);
  }
  return p;
}
