import { RS_ERR_CONFIG_INVALID } from '../errors.js';
import {
  getModelCard,
  MODEL_NAMES,
  type ModelCard,
  validateModelCard,
} from '../wire/model-card.js';
import { directoryPreset } from './directory-preset.js';

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
  /** KV bytes of one token on one GPU: what a P/D import or a CPU-tier reload moves per token. */
  kvBytesPerToken: number;
}

/** A simulated model: its card (the figures the API tier sees) and how fast it runs. */
export interface ModelPreset extends ModelCard {
  stepTime: StepTimeModel;
}

/**
 * Qwen3-30B-A3B on its reference deployment (the card, src/wire/model-card.ts, has both).
 * Step time: base 10 ms = all experts' weights streamed once per step at batch >= ~32
 *   (30.5 GB per GPU / 3.35 TB/s = 9.1 ms) + ~1 ms of all-reduces; context 2.9e-5 ms/token = 49,152 B
 *   at 3.35 TB/s (14.7 ns) at 50% efficiency; prefill 0.0083 ms/token = 2 * 3.3B active FLOP over
 *   2 GPUs * 989 TFLOPS * 40% MFU.
 * These figures are from memory of the published configs, checked against public copies of them.
 */
const QWEN3_30B_A3B: StepTimeModel = {
  baseMs: 10,
  perDecodeSeqMs: 0.02,
  perPrefillTokenMs: 0.0083,
  perContextTokenMs: 2.9e-5,
  kvBytesPerToken: 49_152,
};

/**
 * GLM-4.5-Air on its reference deployment (the one the 5.5k tok/s was measured on).
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
const GLM_45_AIR: StepTimeModel = {
  baseMs: 10,
  perDecodeSeqMs: 0.02,
  perPrefillTokenMs: 0.0076,
  perContextTokenMs: 1.415e-5,
  kvBytesPerToken: 23_552,
};

/** The tests' model: fast steps, so every code path runs quickly in real time too. */
const TINY: StepTimeModel = {
  baseMs: 1,
  perDecodeSeqMs: 0.005,
  perPrefillTokenMs: 0.001,
  perContextTokenMs: 1e-6,
  /** 2 * 2 kv heads * 128 * 4 layers * 2 B, rounded up: transfers that take visible time. */
  kvBytesPerToken: 16_384,
};

const STEP_TIMES: Readonly<Record<string, StepTimeModel>> = {
  'qwen3-30b-a3b': QWEN3_30B_A3B,
  'glm-4.5-air': GLM_45_AIR,
  tiny: TINY,
  'tiny-wide': TINY,
};

const PRESETS: readonly ModelPreset[] = MODEL_NAMES.map((name) => ({
  ...getModelCard(name),
  stepTime: STEP_TIMES[name] as StepTimeModel,
}));

export const PRESET_NAMES: readonly string[] = MODEL_NAMES;

/**
 * The preset of that name, or a local Hugging Face model directory's (directory-preset.ts);
 * anything else is a config error naming `--model`.
 */
export function getPreset(model: string): ModelPreset {
  return PRESETS.find((p) => p.name === model) ?? directoryPreset(model);
}

/**
 * Checks a preset built by hand (tests, or a variant such as one with more than 256 experts).
 * Throws RS_ERR_CONFIG_INVALID naming `--model` when a figure is out of range.
 */
export function validatePreset(p: ModelPreset): ModelPreset {
  validateModelCard(p);
  for (const [k, v] of Object.entries(p.stepTime)) {
    if (!(Number.isFinite(v) && v >= 0)) {
      throw new RS_ERR_CONFIG_INVALID(
        '--model',
        `preset "${p.name}": stepTime.${k} must be finite and >= 0`,
      );
    }
  }
  return p;
}
