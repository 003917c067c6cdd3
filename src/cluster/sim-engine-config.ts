import type { RingserveConfig } from '../config.js';
import type { EngineConfig } from '../sim/engine-config.js';
import type { ModelPreset } from '../sim/presets.js';

/** The simulator's configuration from the validated flags: the engine core's, and the headless vLLM engine's. */
export function engineConfigFrom(
  config: RingserveConfig,
  preset: string | ModelPreset = config.model,
): EngineConfig {
  return {
    preset,
    maxNumSeqs: config.maxNumSeqs,
    maxNumBatchedTokens: config.maxNumBatchedTokens,
    numGpuBlocks: config.numGpuBlocks,
    blockSize: config.blockSize,
    maxModelLen: config.maxModelLen,
    seed: config.seed,
    policy: config.schedulingPolicy,
    lengthProfile: config.lengthProfile,
    speedup: config.speedup,
    maxSpeed: config.maxSpeed,
    kvTransferTimeoutS: config.kvTransferTimeoutS,
    kvLoadFailureRate: config.kvLoadFailureRate,
    kvTransferBandwidthGbs: config.kvTransferBandwidthGbs,
    kvOffloadGib: config.kvOffloadGib,
  };
}
