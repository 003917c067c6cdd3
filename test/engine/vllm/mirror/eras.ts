/**
 * vLLM v1's engine-core wire layouts per release era, written from vLLM's struct definitions.
 * "VM", "VH" and "VE" with a section number, here and across the mirror, tag the reading notes it
 * was written from (messages, handshake, engine); what they established is in
 * docs/vllm-protocol.md, each fact with the vLLM or downstream commit it rests on.
 *
 * msgspec writes every field of an `array_like` struct (msgspec issue #720: omit_defaults is ignored
 * for them), so a real engine's EngineCoreOutput has a fixed element count per era, and that count
 * tells the era (VM §3, §14.1).
 */

/** Release series: '0.22' is 0.22.x-0.25.x, '0.26' 0.26-0.27, '0.28' 0.28.x, '0.29' 0.29-0.30. */
export const ERAS = ['0.22', '0.26', '0.28', '0.29', '0.33'] as const;
export type Era = (typeof ERAS)[number];

export function eraAtLeast(era: Era, min: Era): boolean {
  return ERAS.indexOf(era) >= ERAS.indexOf(min);
}

/** The version a mirror engine of each era reports in its registration. */
export const DEFAULT_VLLM_VERSION: Readonly<Record<Era, string>> = {
  '0.22': '0.22.1',
  '0.26': '0.26.0',
  '0.28': '0.28.0',
  '0.29': '0.29.0',
  '0.33': '0.33.0',
};

// EngineCoreOutput, era '0.22' (13): VM §5a: parallax 328c99fe ENGINE_CORE_OUTPUT_FIELD_COUNT = 13;
// pegainfer's exhaustive literals at vLLM revs 65b7a812 .. 8e61b646 (pinned 2026-05-22 .. 07-07);
// VE §5 (vllm/v1/engine/__init__.py:168-194 at 52a31cc).
const OUTPUT_022 = [
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
] as const;

// Era '0.26' (14): VM §5b: `ec_transfer_params` inserted at 9 by vLLM PR #42433; smg 965e8221
// (2026-07-31, "0.26.0 release"), vllm-ascend 87ba9410 against tag v0.26.0, pegainfer bfb64d6b
// (vLLM rev cc706b05, 14-field literal).
const OUTPUT_026 = [
  ...OUTPUT_022.slice(0, 9),
  'ec_transfer_params',
  'trace_headers',
  'prefill_stats',
  'routed_experts',
  'num_nans_in_logits',
] as const;

// Era '0.28' (16): VM §5c: + mm_cache_miss_hashes (PR #46747) and new_sampling_mask (PR #49577,
// "Mask Replay"); smg cef710b6 (2026-08-19) mirrors exactly 16; prime-rl: masks need vLLM >= 0.28.
const OUTPUT_028 = [...OUTPUT_026, 'mm_cache_miss_hashes', 'new_sampling_mask'] as const;

// Era '0.29' (17): VM §5d: + spec_decode_metrics (PR #48915; not in 0.28.0 per syv-ai #66/#106);
// vllm/v1/engine/__init__.py @ 48c3294b has these 17.
const OUTPUT_029 = [...OUTPUT_028, 'spec_decode_metrics'] as const;

// Era '0.33' (18): VM §5e: + prompt_token_id_logprobs (PR #54335); __init__.py and
// rust/.../protocol/output.rs @ 00388f65. The notes found it only on that PR's branch.
const OUTPUT_033 = [...OUTPUT_029, 'prompt_token_id_logprobs'] as const;

export type OutputField = (typeof OUTPUT_033)[number];

export const OUTPUT_FIELDS: Readonly<Record<Era, readonly OutputField[]>> = {
  '0.22': OUTPUT_022,
  '0.26': OUTPUT_026,
  '0.28': OUTPUT_028,
  '0.29': OUTPUT_029,
  '0.33': OUTPUT_033,
};

// EngineCoreOutputs (8 in every era): VM §6: __init__.py @ 48c3294b and @ 00388f65, parallax, smg.
export const OUTPUTS_FIELDS = [
  'engine_index',
  'outputs',
  'scheduler_stats',
  'timestamp',
  'utility_output',
  'finished_requests',
  'wave_complete',
  'start_wave',
] as const;

// EngineCoreRequest, eras '0.22' and '0.26' (20, the first 9 without defaults): VM §4a: parallax
// 328c99fe ENGINE_CORE_REQUEST_FIELDS and 162354a (v0.24.0 pin); smg 965e8221 "exactly 20
// elements"; VE §4 (__init__.py:81-130 at 52a31cc).
const REQUEST_022 = [
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
] as const;

// Eras '0.28' and '0.29' (21): VM §4b: + session_id (PR #48048); smg cef710b6 "exactly 21
// elements"; __init__.py @ 00388f65. Its first release is inferred in the notes.
const REQUEST_028 = [...REQUEST_022, 'session_id'] as const;

// Era '0.33' (22): VM §4c: + kv_hints (PR #53423); __init__.py and rust request.rs @ 48c3294b (its
// test asserts 22 elements).
const REQUEST_033 = [...REQUEST_028, 'kv_hints'] as const;

export type RequestField = (typeof REQUEST_033)[number];

export const REQUEST_FIELDS: Readonly<Record<Era, readonly RequestField[]>> = {
  '0.22': REQUEST_022,
  '0.26': REQUEST_022,
  '0.28': REQUEST_028,
  '0.29': REQUEST_028,
  '0.33': REQUEST_033,
};

/** EngineCoreRequest elements without a default (VM §4a): msgspec refuses fewer. */
export const REQUEST_REQUIRED = 9;

/** The era of an EngineCoreOutput of `n` elements, or null when no era has exactly that many. */
export function eraOfOutputLength(n: number): Era | null {
  return ERAS.find((era) => OUTPUT_FIELDS[era].length === n) ?? null;
}

/**
 * The layout to decode an EngineCoreOutput of `n` elements with, as msgspec would: the exact era, or
 * the oldest era that has at least n fields (missing trailing fields take defaults), or the newest
 * one for a longer array (extra trailing elements are ignored, VM §14.1).
 */
export function outputLayoutFor(n: number): Era {
  return eraOfOutputLength(n) ?? ERAS.find((era) => OUTPUT_FIELDS[era].length >= n) ?? '0.33';
}

/** The wire type of a registration key (`?`: nil allowed). */
export type KeyType = 'int' | 'float' | 'str' | 'bool' | 'int?' | 'float?' | 'str?' | 'map?';

/** EngineCoreReadyResponse keys (a dataclass, so a map; VH §3), with their types (VH §3.1-3.4). */
export const REGISTRATION_TYPES = {
  max_model_len: 'int',
  num_gpu_blocks: 'int',
  block_size: 'int',
  dp_stats_address: 'str?',
  dtype: 'str',
  vllm_version: 'str',
  world_size: 'int',
  data_parallel_size: 'int',
  kv_cache_size_tokens: 'int?',
  kv_cache_max_concurrency: 'float?',
  tensor_parallel_size: 'int',
  pipeline_parallel_size: 'int',
  decode_context_parallel_size: 'int',
  data_parallel_rank: 'int',
  max_num_seqs: 'int',
  max_num_batched_tokens: 'int',
  instance_id: 'str',
  kv_events_config: 'map?',
  supports_lora: 'bool',
  max_loras: 'int',
  weight_transfer_backend: 'str?',
  enable_sleep_mode: 'bool',
  supports_draft_weight_updates: 'bool',
  effective_attention_block_size: 'int?',
  mamba_block_size: 'int?',
  coord_store_port: 'int?',
  coordinator_input_address: 'str?',
  coordinator_output_address: 'str?',
} as const satisfies Record<string, KeyType>;

export type RegistrationKey = keyof typeof REGISTRATION_TYPES;

/** Keys a frontend of the era requires (no default: msgspec "missing required field"). */
export interface RegistrationKeys {
  required: readonly RegistrationKey[];
  optional: readonly RegistrationKey[];
}

// 0.22.x (VH §3.1, era A+): INIT-A's 5 keys; vllm_version since PR #43854 (2026-05-28).
const REG_022 = [
  'max_model_len',
  'num_gpu_blocks',
  'dp_stats_address',
  'dtype',
  'vllm_version',
] as const;
// 0.23 .. 0.26.0 (VH §3.2): block_size, world_size, data_parallel_size (PR #44801, #45557), and the
// two optional ones; INIT-026 has exactly these 10; smg: later keys "absent on the 0.26.0 release".
const REG_023 = ['block_size', 'world_size', 'data_parallel_size'] as const;
const REG_023_OPTIONAL = ['kv_cache_size_tokens', 'kv_cache_max_concurrency'] as const;
// 0.28 (VH §3.3): topology and scheduler keys of PR #49491, required in Python (INIT-late,
// PYCOMPAT, CORE-new); kv_events_config of PR #50033.
const REG_028 = [
  'tensor_parallel_size',
  'pipeline_parallel_size',
  'decode_context_parallel_size',
  'data_parallel_rank',
  'max_num_seqs',
  'max_num_batched_tokens',
  'instance_id',
] as const;
// 0.29 (VH §3.3): LoRA/RL capability keys (INIT-late, PYCOMPAT, CORE-new).
const REG_029 = ['supports_lora', 'max_loras'] as const;
const REG_029_OPTIONAL = [
  'weight_transfer_backend',
  'enable_sleep_mode',
  'supports_draft_weight_updates',
] as const;
// 0.33 (VH §3.4): the union of the two newest shapes, PYCOMPAT @ 00cdc9fe (24 keys, has
// effective_attention_block_size) and CORE-new core.py @ 00080ee1 (27, has mamba_block_size and
// the coord_* keys). Every one past the 17 required is defaulted on decode.
const REG_033_OPTIONAL = [
  'effective_attention_block_size',
  'mamba_block_size',
  'coord_store_port',
  'coordinator_input_address',
  'coordinator_output_address',
] as const;

export const REGISTRATION_KEYS: Readonly<Record<Era, RegistrationKeys>> = {
  // 0.23-0.25 engines add REG_023 and its optional pair; a 0.22 frontend needs only the first 5.
  '0.22': { required: REG_022, optional: [...REG_023, ...REG_023_OPTIONAL] },
  '0.26': { required: [...REG_022, ...REG_023], optional: REG_023_OPTIONAL },
  '0.28': {
    required: [...REG_022, ...REG_023, ...REG_028],
    optional: [...REG_023_OPTIONAL, 'kv_events_config'],
  },
  '0.29': {
    required: [...REG_022, ...REG_023, ...REG_028, ...REG_029],
    optional: [...REG_023_OPTIONAL, 'kv_events_config', ...REG_029_OPTIONAL],
  },
  '0.33': {
    required: [...REG_022, ...REG_023, ...REG_028, ...REG_029],
    optional: [...REG_023_OPTIONAL, 'kv_events_config', ...REG_029_OPTIONAL, ...REG_033_OPTIONAL],
  },
};

/** The leading numeric triple of a PEP 440 version ("0.25.1", "0.27.2rc1.dev407+g..."), or null. */
function versionTriple(version: string): [number, number, number] | null {
  const m = /^(\d+)\.(\d+)(?:\.(\d+))?/.exec(version);
  return m === null ? null : [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
}

/**
 * Every key an engine of `era` reporting `version` sends (a dataclass is encoded whole, defaulted
 * fields included): within era '0.22' a 0.22.x engine sends 5 keys, a 0.23-0.25 one 10.
 */
export function registrationKeysSent(era: Era, version: string): readonly RegistrationKey[] {
  const keys = REGISTRATION_KEYS[era];
  if (era !== '0.22') return [...keys.required, ...keys.optional];
  const v = versionTriple(version);
  const from023 = v !== null && (v[0] > 0 || v[1] >= 23);
  return from023 ? [...keys.required, ...keys.optional] : keys.required;
}
