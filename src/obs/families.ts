/**
 * The families /metrics exports: vLLM's (names, help texts and buckets as vllm/v1/metrics/loggers.py
 * declares them; docs/contract.md, Metrics) and the processes' own health (names as prom-client's default
 * metrics and the benchmark's reader, bench/loadtest/prom-text.ts, expect them). Where each figure
 * lives in the region is layout.ts's business; this file pairs the two.
 */
import {
  HEALTH_CPU_SYSTEM,
  HEALTH_CPU_USER,
  HEALTH_HEAP_USED,
  HEALTH_IN_FLIGHT,
  HEALTH_INLINE_ANSWERS,
  HEALTH_LAG_MAX,
  HEALTH_LAG_P50,
  HEALTH_LAG_P99,
  HEALTH_PACKER_QUEUE,
  HEALTH_POOL_IN_USE,
  HEALTH_POOL_ONE_OFF,
  HEALTH_POOL_POOLED,
  HEALTH_RSS,
  RANK_GENERATION_TOKENS,
  RANK_KV_USAGE,
  RANK_PREFIX_HITS,
  RANK_PREFIX_QUERIES,
  RANK_PROMPT_TOKENS,
  RANK_RUNNING,
  RANK_WAITING,
  RM_DECODE,
  RM_E2E,
  RM_GENERATION_HIST,
  RM_GENERATION_TOKENS,
  RM_INFERENCE,
  RM_ITL,
  RM_PREFILL,
  RM_PROMPT_HIST,
  RM_PROMPT_TOKENS,
  RM_QUEUE,
  RM_TTFT,
  STAT_CARRY_EXTERNAL_HIT_TOKENS,
  STAT_CARRY_KV_LOAD_FAILURES,
  STAT_CARRY_OFFLOAD_LOADED_BLOCKS,
  STAT_CARRY_OFFLOAD_STORED_BLOCKS,
  STAT_CARRY_PREEMPTIONS,
  STAT_CARRY_PREFIX_HITS,
  STAT_CARRY_PREFIX_QUERIES,
  STAT_CARRY_VLLM_UNDECODABLE,
  STAT_EXTERNAL_HIT_TOKENS,
  STAT_KV_LOAD_FAILURES,
  STAT_KV_USAGE,
  STAT_NUM_PREEMPTIONS,
  STAT_OFFLOAD_LOADED_BLOCKS,
  STAT_OFFLOAD_STORED_BLOCKS,
  STAT_PREFIX_HITS,
  STAT_PREFIX_QUERIES,
  STAT_RUNNING,
  STAT_VLLM_UNDECODABLE,
  STAT_WAITING,
  SUP_API_BACKOFF_S,
  SUP_API_RESTARTS,
  SUP_ENGINE_BACKOFF_S,
  SUP_ENGINE_RESTARTS,
  TH_GC_COUNT,
  TH_GC_MAX,
  TH_GC_SECONDS,
  TH_HEAP_USED,
} from '../shm/layout.js';
import { build125Buckets, ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS } from './buckets.js';

export interface EngineGauge {
  name: string;
  help: string;
  stat: number;
  /**
   * Its RANK_* slot, for a family vLLM labels per engine rank: while the engine core fronts several
   * data-parallel ranks, one sample per rank (engine="<r>") replaces the single engine="0" one.
   */
  rankSlot?: number;
}

export interface EngineCounter extends EngineGauge {
  /** Slot holding the totals of engines before this one (engine-carry.ts). */
  carry: number;
}

export interface RequestCounter {
  name: string;
  help: string;
  slot: number;
  /** As EngineGauge.rankSlot: per rank, from the engine's rank figures, while there are several. */
  rankSlot?: number;
}

export interface RequestHistogram {
  name: string;
  help: string;
  slot: number;
  bounds: readonly number[];
}

export interface HealthGauge {
  name: string;
  help: string;
  slot: number;
  /** Only API servers have it (not the engine). */
  serversOnly?: boolean;
}

export const ENGINE_GAUGES: readonly EngineGauge[] = [
  {
    name: 'vllm:num_requests_running',
    help: 'Number of requests in model execution batches.',
    stat: STAT_RUNNING,
    rankSlot: RANK_RUNNING,
  },
  {
    name: 'vllm:num_requests_waiting',
    help: 'Number of requests waiting to be processed.',
    stat: STAT_WAITING,
    rankSlot: RANK_WAITING,
  },
  {
    name: 'vllm:kv_cache_usage_perc',
    help: 'KV-cache usage. 1 means 100 percent usage.',
    stat: STAT_KV_USAGE,
    rankSlot: RANK_KV_USAGE,
  },
];

export const ENGINE_COUNTERS: readonly EngineCounter[] = [
  {
    name: 'vllm:num_preemptions_total',
    help: 'Cumulative number of preemption from the engine.',
    stat: STAT_NUM_PREEMPTIONS,
    carry: STAT_CARRY_PREEMPTIONS,
  },
  {
    name: 'vllm:prefix_cache_queries_total',
    help: 'Prefix cache queries, in terms of number of queried tokens.',
    stat: STAT_PREFIX_QUERIES,
    carry: STAT_CARRY_PREFIX_QUERIES,
    rankSlot: RANK_PREFIX_QUERIES,
  },
  {
    name: 'vllm:prefix_cache_hits_total',
    help: 'Prefix cache hits, in terms of number of cached tokens.',
    stat: STAT_PREFIX_HITS,
    carry: STAT_CARRY_PREFIX_HITS,
    rankSlot: RANK_PREFIX_HITS,
  },
  {
    name: 'vllm:external_prefix_cache_hits_total',
    help: 'External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.',
    stat: STAT_EXTERNAL_HIT_TOKENS,
    carry: STAT_CARRY_EXTERNAL_HIT_TOKENS,
  },
  {
    name: 'vllm:nixl_num_failed_transfers_total',
    help: 'Number of failed NIXL KV Cache transfers.',
    stat: STAT_KV_LOAD_FAILURES,
    carry: STAT_CARRY_KV_LOAD_FAILURES,
  },
  {
    // ringserve's: a vLLM bridge's engine messages that did not decode (src/engine/vllm/).
    name: 'ringserve_vllm_undecodable_messages_total',
    help: 'With --engine vllm: outputs or messages of the engine that did not decode; each failed only the requests it named.',
    stat: STAT_VLLM_UNDECODABLE,
    carry: STAT_CARRY_VLLM_UNDECODABLE,
  },
  {
    // ringserve's: vLLM's offloading connector has no Prometheus counter of its own for these.
    name: 'ringserve_kv_offload_stored_blocks_total',
    help: 'KV blocks spilled to the CPU offload tier (--kv-offload-gib).',
    stat: STAT_OFFLOAD_STORED_BLOCKS,
    carry: STAT_CARRY_OFFLOAD_STORED_BLOCKS,
  },
  {
    name: 'ringserve_kv_offload_loaded_blocks_total',
    help: 'KV blocks reloaded from the CPU offload tier instead of recomputed.',
    stat: STAT_OFFLOAD_LOADED_BLOCKS,
    carry: STAT_CARRY_OFFLOAD_LOADED_BLOCKS,
  },
];

/** ringserve's: which vLLM engine a bridge fronts (the labels of its engine note). */
export const VLLM_ENGINE_INFO = {
  name: 'ringserve_vllm_engine_info',
  help: 'With --engine vllm: the vLLM release the engine registered with and the message layout in use (vllm_layout).',
};

/** ringserve's: the trainer's weight broadcaster the engine joined (/init_broadcaster). */
export const WEIGHT_BROADCASTER_INFO = {
  name: 'ringserve_weight_broadcaster_info',
  help: "The trainer's weight broadcaster the engine joined through /init_broadcaster (address, its workers' ranks as offset+world size, NIXL session); absent before.",
};

/**
 * ringserve's: whether each data-parallel engine rank is attached (RANK_UP), labelled engine="<r>";
 * only while the engine core fronts several ranks.
 */
export const DP_RANK_UP = {
  name: 'ringserve_dp_rank_up',
  help: "1 while the data-parallel engine rank is attached to the cluster's engine core.",
};

export const CACHE_CONFIG_INFO = {
  name: 'vllm:cache_config_info',
  help: 'Information of the LLMEngine CacheConfig',
};

export const REQUEST_COUNTERS: readonly RequestCounter[] = [
  {
    name: 'vllm:prompt_tokens_total',
    help: 'Number of prefill tokens processed.',
    slot: RM_PROMPT_TOKENS,
    rankSlot: RANK_PROMPT_TOKENS,
  },
  {
    name: 'vllm:generation_tokens_total',
    help: 'Number of generation tokens processed.',
    slot: RM_GENERATION_TOKENS,
    rankSlot: RANK_GENERATION_TOKENS,
  },
];

export const REQUEST_SUCCESS = {
  name: 'vllm:request_success_total',
  help: 'Count of successfully processed requests.',
  /** vLLM's FINISH_REASON_STRINGS (vllm/v1/engine/__init__.py), in RM_SUCCESS slot order. */
  reasons: ['stop', 'length', 'abort', 'error', 'repetition'] as const,
};

/** The request histograms for a max_model_len (it bounds the token-count buckets). */
export function requestHistograms(maxModelLen: number): RequestHistogram[] {
  const tokens = build125Buckets(maxModelLen);
  const latency = REQUEST_LATENCY_BUCKETS;
  return [
    {
      name: 'vllm:request_prompt_tokens',
      help: 'Number of prefill tokens processed.',
      slot: RM_PROMPT_HIST,
      bounds: tokens,
    },
    {
      name: 'vllm:request_generation_tokens',
      help: 'Number of generation tokens processed.',
      slot: RM_GENERATION_HIST,
      bounds: tokens,
    },
    {
      name: 'vllm:time_to_first_token_seconds',
      help: 'Histogram of time to first token in seconds.',
      slot: RM_TTFT,
      bounds: TTFT_BUCKETS,
    },
    {
      name: 'vllm:inter_token_latency_seconds',
      help: 'Histogram of inter-token latency in seconds.',
      slot: RM_ITL,
      bounds: ITL_BUCKETS,
    },
    {
      name: 'vllm:e2e_request_latency_seconds',
      help: 'Histogram of e2e request latency in seconds.',
      slot: RM_E2E,
      bounds: latency,
    },
    {
      name: 'vllm:request_queue_time_seconds',
      help: 'Histogram of time spent in WAITING phase for request.',
      slot: RM_QUEUE,
      bounds: latency,
    },
    {
      name: 'vllm:request_inference_time_seconds',
      help: 'Histogram of time spent in RUNNING phase for request.',
      slot: RM_INFERENCE,
      bounds: latency,
    },
    {
      name: 'vllm:request_prefill_time_seconds',
      help: 'Histogram of time spent in PREFILL phase for request.',
      slot: RM_PREFILL,
      bounds: latency,
    },
    {
      name: 'vllm:request_decode_time_seconds',
      help: 'Histogram of time spent in DECODE phase for request.',
      slot: RM_DECODE,
      bounds: latency,
    },
  ];
}

export const GC_DURATION = {
  name: 'nodejs_gc_duration_seconds',
  help: 'Garbage collection duration by kind, one of major, minor, incremental or weakcb.',
};

export const GC_PAUSE_MAX = {
  name: 'ringserve_gc_pause_max_seconds',
  help: 'Longest garbage collection pause since the process started, by kind.',
};

export const HEALTH_GAUGES: readonly HealthGauge[] = [
  {
    name: 'nodejs_eventloop_lag_p50_seconds',
    help: 'The 50th percentile of the recorded event loop delays since the process started.',
    slot: HEALTH_LAG_P50,
  },
  {
    name: 'nodejs_eventloop_lag_p99_seconds',
    help: 'The 99th percentile of the recorded event loop delays since the process started.',
    slot: HEALTH_LAG_P99,
  },
  {
    name: 'nodejs_eventloop_lag_max_seconds',
    help: 'The maximum recorded event loop delay since the process started.',
    slot: HEALTH_LAG_MAX,
  },
  {
    name: 'nodejs_heap_size_used_bytes',
    help: 'Process heap size used from Node.js in bytes.',
    slot: HEALTH_HEAP_USED,
  },
  {
    name: 'process_resident_memory_bytes',
    help: 'Resident memory size in bytes.',
    slot: HEALTH_RSS,
  },
  {
    name: 'ringserve_packer_queue_depth',
    help: 'Encode tasks waiting for a packer thread.',
    slot: HEALTH_PACKER_QUEUE,
    serversOnly: true,
  },
  {
    name: 'ringserve_requests_in_flight',
    help: 'Requests whose client is waiting for an answer.',
    slot: HEALTH_IN_FLIGHT,
    serversOnly: true,
  },
  {
    name: 'ringserve_response_pool_in_use_bytes',
    help: 'Bytes of the response pool held by answers not yet sent.',
    slot: HEALTH_POOL_IN_USE,
    serversOnly: true,
  },
];

export const OUTPUT_RING_USED = {
  name: 'ringserve_output_ring_used_bytes',
  help: 'Bytes of the output ring (engine to API server) not yet drained by the output worker.',
};

export const HEALTH_AGE = {
  name: 'ringserve_health_age_seconds',
  help: 'Seconds since the process last published its health figures into the shared region.',
};

/** Per process, like HEALTH_GAUGES; prom-client's default names, then the API servers' own. */
export const HEALTH_COUNTERS: readonly HealthGauge[] = [
  {
    name: 'process_cpu_user_seconds_total',
    help: 'Total user CPU time spent in seconds.',
    slot: HEALTH_CPU_USER,
  },
  {
    name: 'process_cpu_system_seconds_total',
    help: 'Total system CPU time spent in seconds.',
    slot: HEALTH_CPU_SYSTEM,
  },
  {
    name: 'ringserve_response_pool_answers_total',
    help: 'Answers encoded into the response pool (no buffer of their own).',
    slot: HEALTH_POOL_POOLED,
    serversOnly: true,
  },
  {
    name: 'ringserve_response_pool_one_off_answers_total',
    help: 'Answers given a buffer of their own: larger than a quarter of the response pool, or no free run in it.',
    slot: HEALTH_POOL_ONE_OFF,
    serversOnly: true,
  },
  {
    name: 'ringserve_inline_answers_total',
    help: 'Answers small enough (--inline-pack-values) that the main thread encoded them itself, not a packer.',
    slot: HEALTH_INLINE_ANSWERS,
    serversOnly: true,
  },
];

export interface ThreadFamily {
  name: string;
  help: string;
  type: 'counter' | 'gauge';
  /** TH_* slot of a thread-health entry. */
  slot: number;
}

/** Per thread of each API server (labels `api_server`, `thread`: main, output, log, packer-N). */
export const THREAD_FAMILIES: readonly ThreadFamily[] = [
  {
    name: 'ringserve_thread_gc_seconds_total',
    help: 'Garbage collection pause time of the thread, every kind.',
    type: 'counter',
    slot: TH_GC_SECONDS,
  },
  {
    name: 'ringserve_thread_gc_pauses_total',
    help: 'Garbage collection pauses of the thread.',
    type: 'counter',
    slot: TH_GC_COUNT,
  },
  {
    name: 'ringserve_thread_gc_pause_max_seconds',
    help: 'Longest garbage collection pause of the thread since it started.',
    type: 'gauge',
    slot: TH_GC_MAX,
  },
  {
    name: 'ringserve_thread_heap_used_bytes',
    help: "Heap used by the thread's V8 isolate in bytes.",
    type: 'gauge',
    slot: TH_HEAP_USED,
  },
];

/** The supervisor's restarts by role (`engine`, `api`); layout.ts SUP_*. */
export const RESTART_FAMILIES = [
  {
    name: 'ringserve_restarts_total',
    help: 'Child processes restarted by the supervisor after they died, by role.',
    type: 'counter',
    slots: { engine: SUP_ENGINE_RESTARTS, api: SUP_API_RESTARTS },
    width: 'i32',
  },
  {
    name: 'ringserve_restart_backoff_seconds',
    help: 'Delay before the latest restart of a role: 0.2 s, doubling in a crash loop up to 30 s.',
    type: 'gauge',
    slots: { engine: SUP_ENGINE_BACKOFF_S, api: SUP_API_BACKOFF_S },
    width: 'f64',
  },
] as const;
