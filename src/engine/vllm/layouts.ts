import { RS_ERR_CONFIG_INVALID } from '../../errors.js';

/**
 * The positional field order of vLLM's engine messages, one table per supported vLLM version.
 * msgspec `array_like` structs are positional, and vLLM inserts fields between releases (a later
 * EngineCoreOutput gains `ec_transfer_params` before `prefill_stats`), so every encoder and
 * decoder in this folder walks one of these tables instead of hard-coding an index. A version is
 * named after the vLLM release it matches, or `<series>-main-<commit>` for a commit read between
 * releases (VLLM-ENGINE.md records where each table was read).
 */

/** EngineCoreRequest fields, in the order one layout sends them (vllm/v1/engine/__init__.py). */
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
  | 'abort_immediately';

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
  | 'num_nans_in_logits';

/** EngineCoreOutputs fields. */
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
  /** The name `--vllm-version` selects. */
  readonly name: string;
  /** Where the table was read: vLLM commit or tag. */
  readonly source: string;
  readonly request: readonly RequestField[];
  /** How many leading EngineCoreRequest fields have no default (a shorter ADD is refused). */
  readonly requestRequired: number;
  readonly output: readonly OutputField[];
  /** How many leading EngineCoreOutput fields have no default. */
  readonly outputRequired: number;
  readonly outputs: readonly OutputsField[];
  readonly outputsRequired: number;
  /** EngineCoreReadyResponse keys, in the order the engine sends them. */
  readonly registration: readonly string[];
}

/** vLLM main at 52a31ccecca2 (2026-05-27), as VLLM-ENGINE.md section 4-5 records it. */
const MAIN_52A31CC: VllmLayout = {
  name: '0.11-main-52a31cc',
  source: 'vllm-project/vllm@52a31ccecca2',
  request: [
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
  ],
  requestRequired: 9,
  output: [
    'request_id',
    'new_token_ids',
    'new_logprobs',
    'new_prompt_logprobs_tensors',
    'pooling_output',
    'finish_reason',
    'stop_reason',
    'events',
    'kv_transfer_params',
    'trace_headers',
    'prefill_stats',
    'routed_experts',
    'num_nans_in_logits',
  ],
  outputRequired: 2,
  outputs: [
    'engine_index',
    'outputs',
    'scheduler_stats',
    'timestamp',
    'utility_output',
    'finished_requests',
    'wave_complete',
    'start_wave',
  ],
  outputsRequired: 0,
  registration: ['max_model_len', 'num_gpu_blocks', 'dp_stats_address', 'dtype'],
};

/** Newest first: the first is the default. */
export const VLLM_LAYOUTS: readonly VllmLayout[] = [MAIN_52A31CC];

export const VLLM_VERSION_NAMES: readonly string[] = VLLM_LAYOUTS.map((l) => l.name);

export const DEFAULT_VLLM_LAYOUT: VllmLayout = MAIN_52A31CC;

/** The layout `--vllm-version` names (default: the newest); an unknown name is a config error. */
export function getVllmLayout(name?: string | null): VllmLayout {
  if (name === undefined || name === null || name === '') return DEFAULT_VLLM_LAYOUT;
  const layout = VLLM_LAYOUTS.find((l) => l.name === name);
  if (layout === undefined) {
    throw new RS_ERR_CONFIG_INVALID(
      '--vllm-version',
      `unknown vLLM message layout "${name}"; one of ${VLLM_VERSION_NAMES.join(', ')}`,
    );
  }
  return layout;
}

/** ringserve's registration key announcing that outputs carry sampling masks (not stock vLLM). */
export const SAMPLING_MASKS_KEY = 'ringserve_sampling_masks';

/** The SamplingParams `extra_args` key that asks a ringserve engine for a request's masks. */
export const SAMPLING_MASK_ARG = 'ringserve_return_sampling_mask';
