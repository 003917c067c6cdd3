/**
 * The registration (EngineCoreReadyResponse) a mirror engine sends: every key its era and version
 * send (a dataclass goes out whole, defaulted fields included, VH §3), with values of an
 * unremarkable single-GPU engine, then the test's overrides (an undefined value drops the key).
 */
import type { Registration } from './codec-handshake.js';
import { type Era, type RegistrationKey, registrationKeysSent } from './eras.js';

export interface RegistrationInputs {
  era: Era;
  vllmVersion: string;
  maxModelLen: number;
  numGpuBlocks: number;
  blockSize: number;
  rank: number;
  overrides: Readonly<Record<string, unknown>>;
}

export function registrationFor(r: RegistrationInputs): Registration {
  const tokens = r.numGpuBlocks * r.blockSize;
  const values: Readonly<Record<RegistrationKey, unknown>> = {
    max_model_len: r.maxModelLen,
    num_gpu_blocks: r.numGpuBlocks,
    block_size: r.blockSize,
    dp_stats_address: null,
    dtype: 'bfloat16',
    vllm_version: r.vllmVersion,
    world_size: 1,
    data_parallel_size: 1,
    kv_cache_size_tokens: tokens,
    kv_cache_max_concurrency: tokens / r.maxModelLen,
    tensor_parallel_size: 1,
    pipeline_parallel_size: 1,
    decode_context_parallel_size: 1,
    data_parallel_rank: r.rank,
    max_num_seqs: 256,
    max_num_batched_tokens: 8192,
    instance_id: `mirror-${r.rank}`,
    kv_events_config: null,
    supports_lora: false,
    max_loras: 0,
    weight_transfer_backend: null,
    enable_sleep_mode: false,
    supports_draft_weight_updates: false,
    effective_attention_block_size: null,
    mamba_block_size: null,
    coord_store_port: null,
    coordinator_input_address: null,
    coordinator_output_address: null,
  };
  const reg: Registration = {};
  for (const k of registrationKeysSent(r.era, r.vllmVersion)) reg[k] = values[k];
  for (const [k, v] of Object.entries(r.overrides)) {
    if (v === undefined) delete reg[k];
    else reg[k] = v;
  }
  return reg;
}
