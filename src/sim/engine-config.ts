import { RS_ERR_CONFIG_INVALID } from '../errors.js';
import { getLengthProfile, type LengthProfile, validateLengthProfile } from './length-profile.js';
import { getPreset, type ModelPreset, validatePreset } from './presets.js';
import type { SchedulingPolicy } from './waiting-queue.js';

/** What SimEngine is built from. Omitted fields take the defaults below (vLLM's where it has one). */
export interface EngineConfig {
  /** A preset name from PRESET_NAMES, or a preset object (tests, variants). */
  preset: string | ModelPreset;
  /** --max-num-seqs: at most this many running requests. Default 256. */
  maxNumSeqs?: number;
  /** --max-num-batched-tokens: token budget per step. Default 8192. */
  maxNumBatchedTokens?: number;
  /** --num-gpu-blocks: KV blocks in the pool. Default: the preset's reference deployment. */
  numGpuBlocks?: number | null;
  /** --block-size: tokens per KV block. Default 16. */
  blockSize?: number;
  /** --max-model-len: prompt + output limit. Default: the preset's max_position_embeddings. */
  maxModelLen?: number | null;
  /** --seed: the model seed (and the source of seeds for requests without one). Default 0. */
  seed?: number;
  /** --scheduling-policy. Default fcfs. */
  policy?: SchedulingPolicy;
  /** --length-profile: a name from LENGTH_PROFILE_NAMES or a profile object. Default rl. */
  lengthProfile?: string | LengthProfile;
  /** --speedup: divides modelled step times. Default 1. */
  speedup?: number;
  /** --max-speed: modelled step times are 0. Default false. */
  maxSpeed?: boolean;
  /** --enable-prefix-caching. Default true (vLLM v1's default). */
  enablePrefixCaching?: boolean;
  /** Weight version at start. Default 0. */
  weightVersion?: number;
}

export interface ResolvedEngineConfig {
  preset: ModelPreset;
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  numGpuBlocks: number;
  blockSize: number;
  maxModelLen: number;
  seed: number;
  policy: SchedulingPolicy;
  lengthProfile: LengthProfile;
  speedup: number;
  maxSpeed: boolean;
  enablePrefixCaching: boolean;
  weightVersion: number;
}

function intIn(flag: string, value: number, min: number, max: number): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RS_ERR_CONFIG_INVALID(flag, `must be an integer in [${min}, ${max}], got ${value}`);
  }
  return value;
}

/** Applies defaults and checks ranges; a bad value throws RS_ERR_CONFIG_INVALID naming its flag. */
export function resolveEngineConfig(c: EngineConfig): ResolvedEngineConfig {
  const preset = validatePreset(typeof c.preset === 'string' ? getPreset(c.preset) : c.preset);
  const profile = c.lengthProfile ?? 'rl';
  const lengthProfile = validateLengthProfile(
    typeof profile === 'string' ? getLengthProfile(profile) : profile,
  );
  const policy = c.policy ?? 'fcfs';
  if (policy !== 'fcfs' && policy !== 'priority') {
    throw new RS_ERR_CONFIG_INVALID(
      '--scheduling-policy',
      `must be fcfs or priority, got ${policy}`,
    );
  }
  const speedup = c.speedup ?? 1;
  if (!(Number.isFinite(speedup) && speedup > 0)) {
    throw new RS_ERR_CONFIG_INVALID('--speedup', `must be a finite number > 0, got ${speedup}`);
  }
  const blockSize = intIn('--block-size', c.blockSize ?? 16, 1, 4096);
  // The preset counts its KV pool in blocks of 16 tokens.
  const defaultBlocks = Math.max(1, Math.floor((preset.defaultNumGpuBlocks * 16) / blockSize));
  const maxModelLen = intIn('--max-model-len', c.maxModelLen ?? preset.maxModelLen, 2, 1 << 24);
  return {
    preset,
    maxNumSeqs: intIn('--max-num-seqs', c.maxNumSeqs ?? 256, 1, 65536),
    maxNumBatchedTokens: intIn(
      '--max-num-batched-tokens',
      c.maxNumBatchedTokens ?? 8192,
      1,
      1 << 24,
    ),
    numGpuBlocks: intIn('--num-gpu-blocks', c.numGpuBlocks ?? defaultBlocks, 1, 1 << 26),
    blockSize,
    maxModelLen,
    seed: intIn('--seed', c.seed ?? 0, 0, 0xffffffff),
    policy,
    lengthProfile,
    speedup,
    maxSpeed: c.maxSpeed ?? false,
    enablePrefixCaching: c.enablePrefixCaching ?? true,
    weightVersion: intIn('weight version', c.weightVersion ?? 0, 0, 0x7fffffff),
  };
}
