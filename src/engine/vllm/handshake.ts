import { RS_ERR_VLLM_DECODE } from '../../errors.js';
import type { VllmLayout } from './layouts.js';
import { MsgReader } from './msgpack-reader.js';
import { MsgWriter } from './msgpack-writer.js';
import { writeAny } from './values.js';

/**
 * The cold messages of vLLM's startup handshake (docs/vllm-protocol.md, "Handshake"): the engine's HELLO and
 * READY on the handshake socket, the frontend's init message with the socket addresses, and the
 * engine's registration (EngineCoreReadyResponse) on the input socket. All are msgpack maps.
 */

export type HandshakeStatus = 'HELLO' | 'READY';

export interface HandshakeMessage {
  status: HandshakeStatus;
  local: boolean;
  headless: boolean;
  /** Sent with READY only when DP > 1. */
  parallelConfigHash: string | null;
}

/**
 * The DP group's rendezvous, as the init message's `parallel_config` carries it for a MoE model
 * with data parallel > 1 (vLLM's `coordinated_dp`; `{}` otherwise): the engine sets these
 * ParallelConfig attributes from it before it forms its DP process group.
 */
export interface DpGroupConfig {
  /** data_parallel_master_ip */
  masterIp: string;
  /** data_parallel_master_port */
  masterPort: number;
  /** _data_parallel_master_port_list (vLLM's engine pops the group's port from its end). */
  masterPortList: number[];
  /** data_parallel_size; 0 when the map lacks it (the engine keeps its own, as setattr would). */
  size: number;
}

export interface InitMessage {
  /** One input (ROUTER) address per frontend client; the engine connects a DEALER to each. */
  inputs: string[];
  /** One output (PULL) address per frontend client; the engine connects a PUSH to each. */
  outputs: string[];
  /** parallel_config: the DP group's rendezvous, or null/absent: `{}`. */
  parallelConfig?: DpGroupConfig | null;
}

/**
 * EngineCoreReadyResponse as ringserve reads and writes it (docs/vllm-protocol.md,
 * "Registration"): the keys both sides act on, each null when the engine did not send it, and
 * every key seen, in wire order, so a layout can be told from them (detect.ts).
 */
export interface Registration {
  maxModelLen: number;
  numGpuBlocks: number;
  blockSize: number | null;
  dpStatsAddress: string | null;
  /** float16, bfloat16 or float32 (the only values vLLM's Rust frontend accepts). */
  dtype: string | null;
  /** vllm.version.__version__: "0.26.0" for a release, "0.1.devN+g..." for a source build. */
  vllmVersion: string | null;
  worldSize: number | null;
  dataParallelSize: number | null;
  dataParallelRank: number | null;
  maxNumSeqs: number | null;
  maxNumBatchedTokens: number | null;
  supportsLora: boolean | null;
  maxLoras: number | null;
  kvCacheSizeTokens: number | null;
  instanceId: string | null;
  /** Every key of the message, in wire order. */
  keys: string[];
}

/** What an engine registers with, key by key (encodeRegistration writes its layout's keys). */
export type RegistrationValues = Omit<Registration, 'keys'>;

/** The 2-byte little-endian identity of DP rank `rank` on both engine DEALERs. */
export function engineIdentity(rank: number): Buffer {
  const id = Buffer.alloc(2);
  id.writeUInt16LE(rank, 0);
  return id;
}

export function encodeHandshake(m: HandshakeMessage): Buffer {
  const w = new MsgWriter(64);
  w.mapHeader(m.parallelConfigHash === null ? 3 : 4);
  w.str('status');
  w.str(m.status);
  w.str('local');
  w.bool(m.local);
  w.str('headless');
  w.bool(m.headless);
  if (m.parallelConfigHash !== null) {
    w.str('parallel_config_hash');
    w.str(m.parallelConfigHash);
  }
  return w.toBuffer();
}

export function decodeHandshake(frame: Uint8Array): HandshakeMessage {
  const r = new MsgReader().reset(frame);
  const m: HandshakeMessage = {
    status: 'HELLO',
    local: false,
    headless: false,
    parallelConfigHash: null,
  };
  let status: string | null = null;
  for (let n = r.mapHeader('handshake'); n > 0; n--) {
    const key = r.str('handshake key');
    if (key === 'status') status = r.str('handshake.status');
    else if (key === 'local') m.local = r.bool('handshake.local');
    else if (key === 'headless') m.headless = r.bool('handshake.headless');
    else if (key === 'parallel_config_hash' && !r.nil(key)) m.parallelConfigHash = r.str(key);
    else r.skip(`handshake.${key}`);
  }
  r.done('handshake');
  if (status !== 'HELLO' && status !== 'READY') {
    throw new RS_ERR_VLLM_DECODE('handshake.status', `expected HELLO or READY, got ${status}`);
  }
  m.status = status;
  return m;
}

export function encodeInit(m: InitMessage): Buffer {
  const w = new MsgWriter(256);
  w.mapHeader(2);
  w.str('addresses');
  w.mapHeader(5);
  w.str('inputs');
  strings(w, m.inputs);
  w.str('outputs');
  strings(w, m.outputs);
  for (const key of ['coordinator_input', 'coordinator_output', 'frontend_stats_publish_address']) {
    w.str(key);
    w.nil();
  }
  w.str('parallel_config');
  const pc = m.parallelConfig ?? null;
  if (pc === null) {
    w.mapHeader(0);
    return w.toBuffer();
  }
  w.mapHeader(4);
  w.str('data_parallel_master_ip');
  w.str(pc.masterIp);
  w.str('data_parallel_master_port');
  w.int(pc.masterPort, 'parallel_config.data_parallel_master_port');
  w.str('_data_parallel_master_port_list');
  w.arrayHeader(pc.masterPortList.length);
  for (const port of pc.masterPortList)
    w.int(port, 'parallel_config._data_parallel_master_port_list');
  w.str('data_parallel_size');
  w.int(pc.size, 'parallel_config.data_parallel_size');
  return w.toBuffer();
}

export function decodeInit(frame: Uint8Array): InitMessage {
  const r = new MsgReader().reset(frame);
  const m: InitMessage = { inputs: [], outputs: [], parallelConfig: null };
  let addresses = false;
  for (let n = r.mapHeader('init'); n > 0; n--) {
    const key = r.str('init key');
    if (key === 'parallel_config') {
      m.parallelConfig = readParallelConfig(r);
      continue;
    }
    if (key !== 'addresses') {
      r.skip(`init.${key}`);
      continue;
    }
    addresses = true;
    for (let k = r.mapHeader('init.addresses'); k > 0; k--) {
      const name = r.str('init.addresses key');
      if (name === 'inputs') m.inputs = readStrings(r, 'init.addresses.inputs');
      else if (name === 'outputs') m.outputs = readStrings(r, 'init.addresses.outputs');
      else r.skip(`init.addresses.${name}`);
    }
  }
  r.done('init');
  if (!addresses || m.inputs.length === 0 || m.outputs.length === 0) {
    throw new RS_ERR_VLLM_DECODE('init.addresses', 'no input or output address');
  }
  return m;
}

/**
 * init.parallel_config: vLLM's frontend sends the DP rendezvous keys (MoE, DP > 1) or `{}`. The
 * keys are typed as the ParallelConfig attributes they set; others are skipped. null when the map
 * has no data_parallel_master_port (nothing to rendezvous at).
 */
function readParallelConfig(r: MsgReader): DpGroupConfig | null {
  if (r.nil('init.parallel_config')) return null;
  const pc: DpGroupConfig = { masterIp: '127.0.0.1', masterPort: 0, masterPortList: [], size: 0 };
  let hasPort = false;
  for (let n = r.mapHeader('init.parallel_config'); n > 0; n--) {
    const key = r.str('init.parallel_config key');
    const field = `init.parallel_config.${key}`;
    switch (key) {
      case 'data_parallel_master_ip':
        pc.masterIp = r.str(field);
        break;
      case 'data_parallel_master_port':
        pc.masterPort = r.int(field);
        hasPort = true;
        break;
      case '_data_parallel_master_port_list':
        pc.masterPortList = [];
        for (let k = r.arrayHeader(field); k > 0; k--) pc.masterPortList.push(r.int(field));
        break;
      case 'data_parallel_size':
        pc.size = r.int(field);
        break;
      default:
        r.skip(field);
    }
  }
  return hasPort ? pc : null;
}

/**
 * The registration an engine of `layout` sends: every key of that series' EngineCoreReadyResponse,
 * its required ones with a value of the right type, the others nil or their default.
 */
export function encodeRegistration(layout: VllmLayout, m: RegistrationValues): Buffer {
  const w = new MsgWriter(1024);
  w.mapHeader(layout.registration.length);
  for (const key of layout.registration) {
    w.str(key);
    writeAny(w, registrationValue(key, m), `registration.${key}`);
  }
  return w.toBuffer();
}

/**
 * The value of one EngineCoreReadyResponse key (writeAny writes it: an integer as an int, any
 * other number as a float, which is what msgspec reads for an int or float field).
 */
function registrationValue(key: string, m: RegistrationValues): unknown {
  switch (key) {
    case 'max_model_len':
      return m.maxModelLen;
    case 'num_gpu_blocks':
      return m.numGpuBlocks;
    case 'block_size':
      return m.blockSize ?? 16;
    case 'dp_stats_address':
      return m.dpStatsAddress;
    case 'dtype':
      return m.dtype ?? 'bfloat16';
    case 'vllm_version':
      return m.vllmVersion ?? '0.0.0';
    case 'world_size':
      return m.worldSize ?? 1;
    case 'tensor_parallel_size':
    case 'pipeline_parallel_size':
    case 'decode_context_parallel_size':
      return 1;
    case 'data_parallel_size':
      return m.dataParallelSize ?? 1;
    case 'data_parallel_rank':
      return m.dataParallelRank ?? 0;
    case 'max_num_seqs':
      return m.maxNumSeqs ?? 256;
    case 'max_num_batched_tokens':
      return m.maxNumBatchedTokens ?? 8192;
    case 'instance_id':
      return m.instanceId ?? '';
    case 'supports_lora':
      return m.supportsLora === true;
    case 'enable_sleep_mode':
    case 'supports_draft_weight_updates':
      return false;
    case 'max_loras':
      return m.maxLoras ?? 0;
    case 'kv_cache_size_tokens':
      return m.kvCacheSizeTokens;
    case 'kv_cache_max_concurrency':
      return m.kvCacheSizeTokens === null ? null : m.kvCacheSizeTokens / m.maxModelLen;
    default:
      return null;
  }
}

/**
 * Reads a registration as vLLM's frontends do: a map (an empty frame is vLLM 0.19 or older, which
 * no layout here speaks), keys it does not act on skipped whatever their type, the ones it does
 * type-checked; max_model_len and num_gpu_blocks are required.
 */
export function decodeRegistration(frame: Uint8Array): Registration {
  if (frame.length === 0) {
    throw new RS_ERR_VLLM_DECODE('registration', 'an empty frame (vLLM 0.19 or older)');
  }
  const r = new MsgReader().reset(frame);
  const m: Registration = {
    maxModelLen: -1,
    numGpuBlocks: -1,
    blockSize: null,
    dpStatsAddress: null,
    dtype: null,
    vllmVersion: null,
    worldSize: null,
    dataParallelSize: null,
    dataParallelRank: null,
    maxNumSeqs: null,
    maxNumBatchedTokens: null,
    supportsLora: null,
    maxLoras: null,
    kvCacheSizeTokens: null,
    instanceId: null,
    keys: [],
  };
  for (let n = r.mapHeader('registration'); n > 0; n--) {
    const key = r.str('registration key');
    m.keys.push(key);
    readRegistrationValue(r, key, m);
  }
  r.done('registration');
  if (m.maxModelLen < 1) {
    throw new RS_ERR_VLLM_DECODE(
      'registration.max_model_len',
      `missing or not positive (keys: ${m.keys.join(', ') || 'none'})`,
    );
  }
  if (m.numGpuBlocks < 0) {
    throw new RS_ERR_VLLM_DECODE('registration.num_gpu_blocks', 'missing or negative');
  }
  return m;
}

function readRegistrationValue(r: MsgReader, key: string, m: Registration): void {
  const field = `registration.${key}`;
  const optInt = (): number | null => (r.nil(field) ? null : r.int(field));
  const optStr = (): string | null => (r.nil(field) ? null : r.str(field));
  switch (key) {
    case 'max_model_len':
      m.maxModelLen = r.int(field);
      break;
    case 'num_gpu_blocks':
      m.numGpuBlocks = r.int(field);
      break;
    case 'block_size':
      m.blockSize = optInt();
      break;
    case 'dp_stats_address':
      m.dpStatsAddress = optStr();
      break;
    case 'dtype':
      m.dtype = optStr();
      break;
    case 'vllm_version':
      m.vllmVersion = optStr();
      break;
    case 'world_size':
      m.worldSize = optInt();
      break;
    case 'data_parallel_size':
      m.dataParallelSize = optInt();
      break;
    case 'data_parallel_rank':
      m.dataParallelRank = optInt();
      break;
    case 'max_num_seqs':
      m.maxNumSeqs = optInt();
      break;
    case 'max_num_batched_tokens':
      m.maxNumBatchedTokens = optInt();
      break;
    case 'supports_lora':
      m.supportsLora = r.nil(field) ? null : r.bool(field);
      break;
    case 'max_loras':
      m.maxLoras = optInt();
      break;
    case 'kv_cache_size_tokens':
      m.kvCacheSizeTokens = optInt();
      break;
    case 'instance_id':
      m.instanceId = optStr();
      break;
    default:
      r.skip(field);
  }
}

function strings(w: MsgWriter, list: readonly string[]): void {
  w.arrayHeader(list.length);
  for (const s of list) w.str(s);
}

function readStrings(r: MsgReader, field: string): string[] {
  const out: string[] = [];
  for (let n = r.arrayHeader(field); n > 0; n--) out.push(r.str(field));
  return out;
}
