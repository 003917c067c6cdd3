/**
 * What the engine runs with when nobody says otherwise, and the widest values it runs with at all:
 * each default and bound written once. The configuration (src/config.ts: the flags and --help) and
 * the simulator (src/sim/engine-config.ts: programmatic use by tests and benchmarks) both read
 * them here, as neither may import the other and both may import wire/. A flag may offer less than
 * the engine runs with (src/config.ts says why where it does); test/config.test.ts checks that every
 * flag's range lies within these.
 */

export const SCHEDULING_POLICIES = ['fcfs', 'priority'] as const;
export type SchedulingPolicy = (typeof SCHEDULING_POLICIES)[number];

/** The simulator's response-length profiles (src/sim/length-profile.ts has one per name). */
export const LENGTH_PROFILE_NAMES = ['rl', 'chat'] as const;
export type LengthProfileName = (typeof LENGTH_PROFILE_NAMES)[number];

/** vLLM's defaults where it has one (max_num_seqs, max_num_batched_tokens, block_size, prefix caching). */
export const ENGINE_DEFAULTS = {
  maxNumSeqs: 256,
  maxNumBatchedTokens: 8192,
  blockSize: 16,
  seed: 0,
  policy: 'fcfs',
  lengthProfile: 'rl',
  speedup: 1,
  maxSpeed: false,
  enablePrefixCaching: true,
  weightVersion: 0,
  /** vLLM's nixl connector waits VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s); RL rollouts import at once. */
  kvTransferTimeoutS: 60,
  kvLoadFailureRate: 0,
  /** One 200 Gb/s RDMA NIC per GPU (P/D), about PCIe 4 x16 (CPU tier). */
  kvTransferBandwidthGbs: 25,
  kvOffloadGib: 0,
} as const satisfies {
  policy: SchedulingPolicy;
  lengthProfile: LengthProfileName;
  [key: string]: number | string | boolean;
};

export interface IntRange {
  readonly min: number;
  readonly max: number;
}

/** Inclusive integer ranges the engine accepts. */
export const ENGINE_LIMITS = {
  maxNumSeqs: { min: 1, max: 65_536 },
  maxNumBatchedTokens: { min: 1, max: 2 ** 24 },
  /** KV blocks in the pool; also bounds a model card's reference pool (in blocks of 16). */
  numGpuBlocks: { min: 1, max: 2 ** 26 },
  blockSize: { min: 1, max: 4096 },
  /** Prompt + output tokens; also bounds a model card's own max_model_len. */
  maxModelLen: { min: 2, max: 2 ** 24 },
  /** The model seed, a uint32. */
  seed: { min: 0, max: 2 ** 32 - 1 },
  /** Weight versions travel as int32 (per-token in STEP records, and through the control block). */
  weightVersion: { min: 0, max: 2 ** 31 - 1 },
  kvTransferTimeoutS: { min: 0, max: 3600 },
  kvLoadFailureRate: { min: 0, max: 1 },
  kvTransferBandwidthGbs: { min: 0.001, max: 10_000 },
  /** The CPU tier's index is sized for its whole capacity up front. */
  kvOffloadGib: { min: 0, max: 64 },
} as const satisfies Record<string, IntRange>;

/**
 * Request slots per API server the engine keeps a slot generation for (ADD records carry the slot),
 * so an API server's request table (--max-queue-len) holds at most this many.
 */
export const MAX_SLOTS_PER_SERVER = 65_536;
