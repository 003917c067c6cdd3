import { RS_ERR_VLLM_DECODE } from '../../errors.js';
import { SAMPLING_MASKS_KEY, type VllmLayout } from './layouts.js';
import { MsgReader } from './msgpack-reader.js';
import { MsgWriter } from './msgpack-writer.js';

/**
 * The cold messages of vLLM's startup handshake (VLLM-ENGINE.md section 3): the engine's HELLO and
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

export interface InitMessage {
  /** One input (ROUTER) address per frontend client; the engine connects a DEALER to each. */
  inputs: string[];
  /** One output (PULL) address per frontend client; the engine connects a PUSH to each. */
  outputs: string[];
}

/** EngineCoreReadyResponse, plus ringserve's extension key. */
export interface Registration {
  maxModelLen: number;
  numGpuBlocks: number;
  dpStatsAddress: string | null;
  dtype: string | null;
  /** The engine appends CSR sampling masks to its outputs (ringserve's extension). */
  samplingMasks: boolean;
  /** Keys this layout does not know (a newer vLLM's): ignored, as vLLM's frontend ignores them. */
  unknownKeys: string[];
}

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
  w.mapHeader(0);
  return w.toBuffer();
}

export function decodeInit(frame: Uint8Array): InitMessage {
  const r = new MsgReader().reset(frame);
  const m: InitMessage = { inputs: [], outputs: [] };
  let addresses = false;
  for (let n = r.mapHeader('init'); n > 0; n--) {
    const key = r.str('init key');
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

export function encodeRegistration(layout: VllmLayout, m: Registration): Buffer {
  const w = new MsgWriter(128);
  w.mapHeader(layout.registration.length + (m.samplingMasks ? 1 : 0));
  for (const key of layout.registration) {
    w.str(key);
    if (key === 'max_model_len') w.int(m.maxModelLen, key);
    else if (key === 'num_gpu_blocks') w.int(m.numGpuBlocks, key);
    else if (key === 'dp_stats_address') optionalStr(w, m.dpStatsAddress);
    else if (key === 'dtype') optionalStr(w, m.dtype);
    else w.nil();
  }
  if (m.samplingMasks) {
    w.str(SAMPLING_MASKS_KEY);
    w.bool(true);
  }
  return w.toBuffer();
}

export function decodeRegistration(layout: VllmLayout, frame: Uint8Array): Registration {
  const r = new MsgReader().reset(frame);
  const m: Registration = {
    maxModelLen: -1,
    numGpuBlocks: -1,
    dpStatsAddress: null,
    dtype: null,
    samplingMasks: false,
    unknownKeys: [],
  };
  for (let n = r.mapHeader('registration'); n > 0; n--) {
    const key = r.str('registration key');
    const field = `registration.${key}`;
    if (key === 'max_model_len') m.maxModelLen = r.int(field);
    else if (key === 'num_gpu_blocks') m.numGpuBlocks = r.int(field);
    else if (key === 'dp_stats_address') m.dpStatsAddress = r.nil(field) ? null : r.str(field);
    else if (key === 'dtype') m.dtype = r.nil(field) ? null : r.str(field);
    else if (key === SAMPLING_MASKS_KEY) m.samplingMasks = r.bool(field);
    else {
      if (!layout.registration.includes(key)) m.unknownKeys.push(key);
      r.skip(field);
    }
  }
  r.done('registration');
  if (m.maxModelLen < 1) {
    throw new RS_ERR_VLLM_DECODE('registration.max_model_len', 'missing or not positive');
  }
  if (m.numGpuBlocks < 0) {
    throw new RS_ERR_VLLM_DECODE('registration.num_gpu_blocks', 'missing or negative');
  }
  return m;
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

function optionalStr(w: MsgWriter, s: string | null): void {
  if (s === null) w.nil();
  else w.str(s);
}
