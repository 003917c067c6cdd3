import { RS_ERR_CONFIG_INVALID } from '../../errors.js';

/**
 * The positional field order of vLLM's engine messages, one table per vLLM release series whose
 * wire layout differs (docs/vllm-protocol.md has each table with the commit and file it was read
 * at). msgspec `array_like` structs are positional; vLLM inserted `ec_transfer_params` in the
 * middle of EngineCoreOutput for 0.26 and has appended fields since, so every encoder and decoder
 * in this folder walks one of these tables instead of hard-coding an index. msgspec writes every
 * field of an array-like struct, so an engine's EngineCoreOutput element count is fixed per
 * series: that count confirms (or corrects) the table the registration suggested (detect.ts).
 */

/** EngineCoreRequest fields (vllm/v1/engine/__init__.py). */
export type RequestField =
  | 'request_id'
  | 'prompt_token_ids'
  | 'mm_features'
  | 'sampling_params'
  | 'pooling_params'
  | 'arrival_time'
  | 'lora_request'
  | 'cache_salt'
  | 'data_parallel_rank'
  | 'prompt_embeds'
  | 'prompt_is_token_ids'
  | 'client_index'
  | 'current_wave'
  | 'priority'
  | 'trace_headers'
  | 'resumable'
  | 'external_req_id'
  | 'reasoning_ended'
  | 'reasoning_parser_kwargs'
  | 'abort_immediately'
  | 'session_id'
  | 'kv_hints';

/** EngineCoreOutput fields. */
export type OutputField =
  | 'request_id'
  | 'new_token_ids'
  | 'new_logprobs'
  | 'new_prompt_logprobs_tensors'
  | 'pooling_output'
  | 'finish_reason'
  | 'stop_reason'
  | 'events'
  | 'kv_transfer_params'
  | 'ec_transfer_params'
  | 'trace_headers'
  | 'prefill_stats'
  | 'routed_experts'
  | 'num_nans_in_logits'
  | 'mm_cache_miss_hashes'
  | 'new_sampling_mask'
  | 'spec_decode_metrics'
  | 'prompt_token_id_logprobs';

/** EngineCoreOutputs fields: the same 8 in every series. */
export type OutputsField =
  | 'engine_index'
  | 'outputs'
  | 'scheduler_stats'
  | 'timestamp'
  | 'utility_output'
  | 'finished_requests'
  | 'wave_complete'
  | 'start_wave';

export interface VllmLayout {
  /** The name `--vllm-version` selects: the first release of the series. */
  readonly name: string;
  /** The releases whose engines speak this layout. */
  readonly series: string;
  /** The vllm_version `ringserve engine` registers with under this layout. */
  readonly release: string;
  /** Where the table was read (docs/vllm-protocol.md has the detail). */
  readonly source: string;
  readonly request: readonly RequestField[];
  /** Leading EngineCoreRequest fields without a default (a shorter ADD is refused). */
  readonly requestRequired: number;
  readonly output: readonly OutputField[];
  /** Leading EngineCoreOutput fields without a default. */
  readonly outputRequired: number;
  readonly outputs: readonly OutputsField[];
  /** EngineCoreReadyResponse keys this series' engines send, in the dataclass's order. */
  readonly registration: readonly string[];
}

const REQUEST_BASE: readonly RequestField[] = [
  'request_id',
  'prompt_token_ids',
  'mm_features',
  'sampling_params',
  'pooling_params',
  'arrival_time',
  'lora_request',
  'cache_salt',
  'data_parallel_rank',
  'prompt_embeds',
  'prompt_is_token_ids',
  'client_index',
  'current_wave',
  'priority',
  'trace_headers',
  'resumable',
  'external_req_id',
  'reasoning_ended',
  'reasoning_parser_kwargs',
  'abort_immediately',
];

const OUTPUT_HEAD: readonly OutputField[] = [
  'request_id',
  'new_token_ids',
  'new_logprobs',
  'new_prompt_logprobs_tensors',
  'pooling_output',
  'finish_reason',
  'stop_reason',
  'events',
  'kv_transfer_params',
];
const OUTPUT_TAIL: readonly OutputField[] = [
  'trace_headers',
  'prefill_stats',
  'routed_experts',
  'num_nans_in_logits',
];
const OUTPUT_0_26: readonly OutputField[] = [...OUTPUT_HEAD, 'ec_transfer_params', ...OUTPUT_TAIL];
const OUTPUT_0_28: readonly OutputField[] = [
  ...OUTPUT_0_26,
  'mm_cache_miss_hashes',
  'new_sampling_mask',
];
const OUTPUT_0_29: readonly OutputField[] = [...OUTPUT_0_28, 'spec_decode_metrics'];

const OUTPUTS: readonly OutputsField[] = [
  'engine_index',
  'outputs',
  'scheduler_stats',
  'timestamp',
  'utility_output',
  'finished_requests',
  'wave_complete',
  'start_wave',
];

// EngineCoreReadyResponse grew between releases; every later key has a default on the Python side,
// and both Python's msgspec and the Rust frontends' serde ignore keys they do not know.
const READY_0_22 = ['max_model_len', 'num_gpu_blocks', 'dp_stats_address', 'dtype', 'vllm_version'];
const READY_0_26 = [
  'max_model_len',
  'num_gpu_blocks',
  'block_size',
  'dp_stats_address',
  'dtype',
  'vllm_version',
  'world_size',
  'data_parallel_size',
  'kv_cache_size_tokens',
  'kv_cache_max_concurrency',
];
const READY_TOPOLOGY = [
  'tensor_parallel_size',
  'pipeline_parallel_size',
  'decode_context_parallel_size',
  'data_parallel_rank',
  'max_num_seqs',
  'max_num_batched_tokens',
  'instance_id',
];
const READY_0_28 = [
  ...READY_0_26.slice(0, 8),
  ...READY_TOPOLOGY,
  ...READY_0_26.slice(8),
  'kv_events_config',
];
const READY_CAPABILITIES = ['supports_lora', 'max_loras'];
const READY_OPTIONAL_0_29 = [
  'weight_transfer_backend',
  'enable_sleep_mode',
  'supports_draft_weight_updates',
];
const READY_0_29 = [...READY_0_28.slice(0, 15), ...READY_CAPABILITIES, ...READY_0_28.slice(15)];
const READY_0_29_FULL = [...READY_0_29, ...READY_OPTIONAL_0_29];
const READY_0_33 = [
  ...READY_0_29_FULL,
  'mamba_block_size',
  'effective_attention_block_size',
  'coord_store_port',
  'coordinator_input_address',
  'coordinator_output_address',
];

/** vLLM 0.22 to 0.25: the layout of vLLM main at 52a31cc (2026-05-27), plus vllm_version (#43854). */
const V0_22: VllmLayout = {
  name: '0.22',
  series: '0.22.x - 0.25.x',
  release: '0.22.1',
  source: 'vllm-project/vllm@52a31ccecca2 vllm/v1/engine/__init__.py; #43854 (vllm_version)',
  request: REQUEST_BASE,
  requestRequired: 9,
  output: [...OUTPUT_HEAD, ...OUTPUT_TAIL],
  outputRequired: 2,
  outputs: OUTPUTS,
  registration: READY_0_22,
};

/** vLLM 0.26 and 0.27: ec_transfer_params inserted at index 9 of EngineCoreOutput (#42433). */
const V0_26: VllmLayout = {
  name: '0.26',
  series: '0.26.x - 0.27.x',
  release: '0.26.0',
  source: 'vLLM Rust client protocol/output.rs (14 fields); SMG engine_zmq_client @965e8221e',
  request: REQUEST_BASE,
  requestRequired: 9,
  output: OUTPUT_0_26,
  outputRequired: 2,
  outputs: OUTPUTS,
  registration: READY_0_26,
};

/** vLLM 0.28: mm_cache_miss_hashes and new_sampling_mask (#49577) appended; session_id. */
const V0_28: VllmLayout = {
  name: '0.28',
  series: '0.28.x',
  release: '0.28.0',
  source: 'SMG engine_zmq_client @cef710b6 (16 / 21 fields); vLLM protocol/sampling_mask.rs',
  request: [...REQUEST_BASE, 'session_id'],
  requestRequired: 9,
  output: OUTPUT_0_28,
  outputRequired: 2,
  outputs: OUTPUTS,
  registration: READY_0_28,
};

/** vLLM 0.29 to 0.32: spec_decode_metrics appended (#48915). */
const V0_29: VllmLayout = {
  name: '0.29',
  series: '0.29.x - 0.32.x',
  release: '0.29.0',
  source: 'vllm-project/vllm@48c3294bea51 vllm/v1/engine/__init__.py (EngineCoreOutput)',
  request: [...REQUEST_BASE, 'session_id'],
  requestRequired: 9,
  output: OUTPUT_0_29,
  outputRequired: 2,
  outputs: OUTPUTS,
  registration: READY_0_29_FULL,
};

/** vLLM 0.33: prompt_token_id_logprobs (#54335) appended to outputs, kv_hints (#53423) to requests. */
const V0_33: VllmLayout = {
  name: '0.33',
  series: '0.33.x',
  release: '0.33.0',
  source:
    'vllm-project/vllm@00388f6573cc protocol/output.rs and @48c3294bea51 __init__.py; python_compat.py @00cdc9fe',
  request: [...REQUEST_BASE, 'session_id', 'kv_hints'],
  requestRequired: 9,
  output: [...OUTPUT_0_29, 'prompt_token_id_logprobs'],
  outputRequired: 2,
  outputs: OUTPUTS,
  registration: READY_0_33,
};

/** Newest first: the first is what `ringserve engine` speaks by default. */
export const VLLM_LAYOUTS: readonly VllmLayout[] = [V0_33, V0_29, V0_28, V0_26, V0_22];

export const VLLM_VERSION_NAMES: readonly string[] = VLLM_LAYOUTS.map((l) => l.name);

export const NEWEST_VLLM_LAYOUT: VllmLayout = V0_33;

/** The value of --vllm-version that detects the layout from the engine (the bridge's default). */
export const AUTO_VLLM_VERSION = 'auto';

/** The layout `--vllm-version` names; an unknown name is a config error naming the flag. */
export function getVllmLayout(name: string): VllmLayout {
  const layout = VLLM_LAYOUTS.find((l) => l.name === name);
  if (layout === undefined) {
    throw new RS_ERR_CONFIG_INVALID(
      '--vllm-version',
      `unknown vLLM release series "${name}"; one of ${VLLM_VERSION_NAMES.join(', ')}`,
    );
  }
  return layout;
}

/** The layout whose EngineCoreOutput has `n` fields, or undefined. */
export function layoutForOutputFields(n: number): VllmLayout | undefined {
  return VLLM_LAYOUTS.find((l) => l.output.length === n);
}

/** "0.22 (13 fields), 0.26 (14), ...": the tables, for error messages. */
export function describeLayouts(): string {
  return VLLM_LAYOUTS.map((l) => `${l.name} (${l.series}: ${l.output.length} fields)`).join(', ');
}
