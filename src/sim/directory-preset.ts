import { resolve } from 'node:path';
import { readHfModelConfig } from '../wire/hf-config.js';
import { getModelCard } from '../wire/model-card.js';
import { REFERENCE_GPU, referenceDeployment } from '../wire/reference-deployment.js';
import type { ModelPreset, StepTimeModel } from './presets.js';

/**
 * A local Hugging Face model directory as a simulated model: its card (src/wire/model-card.ts) and
 * a step time worked out as the presets' are (presets.ts), on the reference deployment of
 * src/wire/reference-deployment.ts (H100-80GB, tensor parallel over the fewest GPUs that hold the
 * weights with room for KV):
 *   base: every GPU's share of the weights streamed once per step (all experts are hit at the
 *     batch sizes RL runs at) at 3.35 TB/s, plus 2 all-reduces per layer of ~10 us each across
 *     more than one GPU (NVLink, small messages);
 *   per decode sequence: 0.02 ms (LM head, sampler), the presets' figure;
 *   per prefill token: 2 FLOP per active parameter over all GPUs' 989 TFLOPS at 40% MFU;
 *   per context token: its KV bytes on one GPU read at 50% of 3.35 TB/s.
 * For a copy of Qwen3-30B-A3B's config.json this gives base 10.1 ms, prefill 0.0077 ms/token,
 * context 2.9e-5 ms/token and 49,152 KV bytes/token: the qwen3-30b-a3b preset's figures (10,
 * 0.0083, 2.9e-5, 49,152; its prefill counts the input embedding's 0.3B as active too).
 */
const ALL_REDUCE_MS = 0.01;
const MFU = 0.4;
const KV_READ_EFFICIENCY = 0.5;
const PER_DECODE_SEQ_MS = 0.02;

const cache = new Map<string, ModelPreset>();

/** The directory's preset, worked out once per path; a bad directory is a --model config error. */
export function directoryPreset(dir: string): ModelPreset {
  const key = resolve(dir);
  let preset = cache.get(key);
  if (preset === undefined) {
    const card = getModelCard(dir);
    const m = readHfModelConfig(dir);
    const d = referenceDeployment(m);
    const gpu = REFERENCE_GPU;
    const stepTime: StepTimeModel = {
      baseMs:
        (d.weightBytesPerGpu / gpu.hbmBytesPerS) * 1e3 +
        (d.gpus > 1 ? 2 * m.numHiddenLayers * ALL_REDUCE_MS : 0),
      perDecodeSeqMs: PER_DECODE_SEQ_MS,
      perPrefillTokenMs: ((2 * d.activeParams) / (d.gpus * gpu.bf16Flops * MFU)) * 1e3,
      perContextTokenMs: (d.kvBytesPerTokenPerGpu / (gpu.hbmBytesPerS * KV_READ_EFFICIENCY)) * 1e3,
      kvBytesPerToken: d.kvBytesPerTokenPerGpu,
    };
    preset = { ...card, stepTime };
    cache.set(key, preset);
  }
  return preset;
}
