import { RS_ERR_CONFIG_INVALID } from '../errors.js';
import {
  ENGINE_DEFAULTS,
  ENGINE_LIMITS,
  type IntRange,
  SCHEDULING_POLICIES,
  type SchedulingPolicy,
} from '../wire/engine-defaults.js';
import { defaultNumGpuBlocks } from '../wire/model-card.js';
import { getLengthProfile, type LengthProfile, validateLengthProfile } from './length-profile.js';
import { getPreset, type ModelPreset, validatePreset } from './presets.js';

/**
 * What SimEngine is built from. An omitted field takes its default from src/wire/engine-defaults.ts,
 * the configuration's default too (named after each field's flag below).
 */
export interface EngineConfig {
  /** A preset name from PRESET_NAMES, or a preset object (tests, variants). */
  preset: string | ModelPreset;
  /** --max-num-seqs: at most this many running requests. */
  maxNumSeqs?: number;
  /** --max-num-batched-tokens: token budget per step. */
  maxNumBatchedTokens?: number;
  /** --num-gpu-blocks: KV blocks in the pool. Default: the preset's reference deployment. */
  numGpuBlocks?: number | null;
  /** --block-size: tokens per KV block. */
  blockSize?: number;
  /** --max-model-len: prompt + output limit. Default: the preset's max_position_embeddings. */
  maxModelLen?: number | null;
  /** --seed: the model seed (and the source of seeds for requests without one). */
  seed?: number;
  /** --scheduling-policy. */
  policy?: SchedulingPolicy;
  /** --length-profile: a name from LENGTH_PROFILE_NAMES or a profile object. */
  lengthProfile?: string | LengthProfile;
  /** --speedup: divides modelled step times. */
  speedup?: number;
  /** --max-speed: modelled step times are 0. */
  maxSpeed?: boolean;
  /** --enable-prefix-caching (on by default, as in vLLM v1). */
  enablePrefixCaching?: boolean;
  /** Weight version at start. */
  weightVersion?: number;
  /** --kv-transfer-timeout-s: how long a prefill instance keeps a prompt's KV for a decode one. */
  kvTransferTimeoutS?: number;
  /** --kv-load-failure-rate: fraction of P/D imports that fail (then recomputed). */
  kvLoadFailureRate?: number;
  /** --kv-transfer-bandwidth-gbs: bandwidth of a P/D import and of CPU-tier reloads. */
  kvTransferBandwidthGbs?: number;
  /** --kv-offload-gib: size of the CPU tier evicted prefix blocks spill to (0 = none). */
  kvOffloadGib?: number;
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
  kvTransferTimeoutS: number;
  kvLoadFailureRate: number;
  kvTransferBandwidthGbs: number;
  kvOffloadGib: number;
}

function intIn(flag: string, value: number, range: IntRange): number {
  if (!Number.isInteger(value) || value < range.min || value > range.max) {
    throw new RS_ERR_CONFIG_INVALID(
      flag,
      `must be an integer in [${range.min}, ${range.max}], got ${value}`,
    );
  }
  return value;
}

/**
 * Applies the defaults and checks the ranges of src/wire/engine-defaults.ts (the configuration's
 * too); a bad value throws RS_ERR_CONFIG_INVALID naming its flag.
 */
export function resolveEngineConfig(c: EngineConfig): ResolvedEngineConfig {
  const preset = validatePreset(typeof c.preset === 'string' ? getPreset(c.preset) : c.preset);
  const profile = c.lengthProfile ?? ENGINE_DEFAULTS.lengthProfile;
  const lengthProfile = validateLengthProfile(
    typeof profile === 'string' ? getLengthProfile(profile) : profile,
  );
  const policy = c.policy ?? ENGINE_DEFAULTS.policy;
  if (!SCHEDULING_POLICIES.includes(policy)) {
    throw new RS_ERR_CONFIG_INVALID(
      '--scheduling-policy',
      `must be ${SCHEDULING_POLICIES.join(' or ')}, got ${policy}`,
    );
  }
  const speedup = c.speedup ?? ENGINE_DEFAULTS.speedup;
  if (!(Number.isFinite(speedup) && speedup > 0)) {
    throw new RS_ERR_CONFIG_INVALID('--speedup', `must be a finite number > 0, got ${speedup}`);
  }
  const d = ENGINE_DEFAULTS;
  const limits = ENGINE_LIMITS;
  const blockSize = intIn('--block-size', c.blockSize ?? d.blockSize, limits.blockSize);
  const defaultBlocks = defaultNumGpuBlocks(preset, blockSize);
  return {
    preset,
    maxNumSeqs: intIn('--max-num-seqs', c.maxNumSeqs ?? d.maxNumSeqs, limits.maxNumSeqs),
    maxNumBatchedTokens: intIn(
      '--max-num-batched-tokens',
      c.maxNumBatchedTokens ?? d.maxNumBatchedTokens,
      limits.maxNumBatchedTokens,
    ),
    numGpuBlocks: intIn('--num-gpu-blocks', c.numGpuBlocks ?? defaultBlocks, limits.numGpuBlocks),
    blockSize,
    maxModelLen: intIn('--max-model-len', c.maxModelLen ?? preset.maxModelLen, limits.maxModelLen),
    seed: intIn('--seed', c.seed ?? d.seed, limits.seed),
    policy,
    lengthProfile,
    speedup,
    maxSpeed: c.maxSpeed ?? d.maxSpeed,
    enablePrefixCaching: c.enablePrefixCaching ?? d.enablePrefixCaching,
    weightVersion: intIn(
      'weight version',
      c.weightVersion ?? d.weightVersion,
      limits.weightVersion,
    ),
    kvTransferTimeoutS: numberIn(
      '--kv-transfer-timeout-s',
      c.kvTransferTimeoutS ?? d.kvTransferTimeoutS,
      limits.kvTransferTimeoutS,
    ),
    kvLoadFailureRate: numberIn(
      '--kv-load-failure-rate',
      c.kvLoadFailureRate ?? d.kvLoadFailureRate,
      limits.kvLoadFailureRate,
    ),
    kvTransferBandwidthGbs: numberIn(
      '--kv-transfer-bandwidth-gbs',
      c.kvTransferBandwidthGbs ?? d.kvTransferBandwidthGbs,
      limits.kvTransferBandwidthGbs,
    ),
    kvOffloadGib: numberIn(
      '--kv-offload-gib',
      c.kvOffloadGib ?? d.kvOffloadGib,
      limits.kvOffloadGib,
    ),
  };
}

function numberIn(flag: string, value: number, range: IntRange): number {
  if (!(Number.isFinite(value) && value >= range.min && value <= range.max)) {
    throw new RS_ERR_CONFIG_INVALID(
      flag,
      `must be a number in [${range.min}, ${range.max}], got ${value}`,
    );
  }
  return value;
}
