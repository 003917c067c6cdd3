import { RS_ERR_VLLM_BAD_FIELD, RS_ERR_VLLM_DECODE } from '../../errors.js';
import type { VllmLayout } from './layouts.js';
import { MsgReader } from './msgpack-reader.js';
import { MsgWriter } from './msgpack-writer.js';
import {
  checkSamplingParams,
  type ResolvedSamplingParams,
  readSamplingParams,
  resolveSamplingParams,
  type VllmSamplingParams,
  writeSamplingParams,
} from './sampling-params.js';
import { readAnyArgs, writeAny } from './values.js';

/**
 * What the frontend sends on the input socket (docs/vllm-protocol.md, "Requests"): frames
 * `[type byte, payload]` (a ROUTER prepends the engine identity). ADD carries an EngineCoreRequest
 * (positional, in the layout's order), ABORT a list of request ids, UTILITY a method call.
 */

export const RequestType = { Add: 0, Abort: 1, StartDpWave: 2, Utility: 3 } as const;
export type RequestType = (typeof RequestType)[keyof typeof RequestType];

/** The one-byte type frames, made once. */
export const REQUEST_TYPE_FRAMES: readonly Buffer[] = [0, 1, 2, 3].map((t) => Buffer.from([t]));

export interface VllmAddRequest {
  requestId: string;
  promptTokenIds: ArrayLike<number>;
  params: VllmSamplingParams;
  /** Epoch seconds. */
  arrivalTime: number;
  cacheSalt: string | null;
  /** Lower first, as vLLM's priority policy. */
  priority: number;
  /** Selects the engine's outputs[i] socket. */
  clientIndex: number;
  /** vLLM's LoRARequest, or none (absent or null). */
  lora?: VllmLoraRequest | null;
  /**
   * The rank an X-data-parallel-rank header named (vLLM's frontend sets it so; the engine does not
   * read it), or none (absent or null).
   */
  dataParallelRank?: number | null;
  /** The DP wave the frontend last knew (only a DP coordinator's engine reads it); absent: 0. */
  currentWave?: number;
}

/**
 * vLLM's LoRARequest (a msgspec Struct, array_like, omit_defaults): `[lora_name, lora_int_id,
 * lora_path]` are its first three fields in every release read (docs/vllm-protocol.md, "LoRA");
 * `load_inplace` (index 5, after base_model_name and tensorizer_config_dict) is sent only when
 * set, for add_lora.
 */
export interface VllmLoraRequest {
  name: string;
  id: number;
  path: string;
  loadInplace?: boolean;
}

/** The LoRARequest as vLLM's msgspec decodes it (trailing defaults left out). */
export function loraRequestArray(lora: VllmLoraRequest): unknown[] {
  if (lora.name.length === 0) bad('lora_request.lora_name', 'must be non-empty', lora.name);
  if (!Number.isSafeInteger(lora.id) || lora.id < 1)
    bad('lora_request.lora_int_id', 'must be an integer >= 1', lora.id);
  if (lora.path.length === 0) bad('lora_request.lora_path', 'must be non-empty', lora.path);
  const fields: unknown[] = [lora.name, lora.id, lora.path];
  if (lora.loadInplace === true) fields.push(null, null, true);
  return fields;
}

/** A LoRARequest as the engine reads it: the first three fields, the rest skipped. */
export function readLoraRequest(value: unknown, field: string): VllmLoraRequest {
  const v = value as unknown[];
  if (!Array.isArray(v) || v.length < 3)
    bad(field, 'must be [lora_name, lora_int_id, lora_path, ...]', value);
  const [name, id, path] = v;
  if (typeof name !== 'string' || name.length === 0)
    bad(`${field}.lora_name`, 'must be a non-empty string', name);
  if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 1)
    bad(`${field}.lora_int_id`, 'must be an integer >= 1', id);
  if (typeof path !== 'string' || path.length === 0)
    bad(`${field}.lora_path`, 'must be a non-empty string', path);
  return { name, id, path, loadInplace: v[5] === true };
}

export interface DecodedAddRequest extends VllmAddRequest {
  promptTokenIds: Int32Array;
  params: ResolvedSamplingParams;
}

export interface UtilityCall {
  clientIndex: number;
  /** Echoed in the reply; vLLM's Python frontend draws it from a uuid (a uint64, often >= 2^63). */
  callId: number | bigint;
  method: string;
  args: unknown[];
}

function bad(field: string, what: string, value: unknown): never {
  throw new RS_ERR_VLLM_BAD_FIELD(field, `${what}, got ${String(value)}`);
}

/**
 * The ADD payload. Every field is checked first (RS_ERR_VLLM_BAD_FIELD naming it): nothing is
 * encoded for a request vLLM would choke on.
 */
export function encodeAdd(layout: VllmLayout, req: VllmAddRequest, w = new MsgWriter()): Buffer {
  const params = resolveSamplingParams(req.params);
  checkAdd(req, params);
  w.reset();
  w.arrayHeader(layout.request.length);
  for (const field of layout.request) {
    switch (field) {
      case 'request_id':
        w.str(req.requestId);
        break;
      case 'prompt_token_ids': {
        const ids = req.promptTokenIds;
        w.arrayHeader(ids.length);
        for (let i = 0; i < ids.length; i++) w.int(ids[i] as number, 'prompt_token_ids');
        break;
      }
      case 'sampling_params':
        writeSamplingParams(w, params);
        break;
      case 'arrival_time':
        w.float(req.arrivalTime);
        break;
      case 'cache_salt':
        if (req.cacheSalt === null) w.nil();
        else w.str(req.cacheSalt);
        break;
      case 'client_index':
        w.int(req.clientIndex, field);
        break;
      case 'priority':
        w.int(req.priority, field);
        break;
      case 'current_wave':
        w.int(req.currentWave ?? 0, field);
        break;
      case 'data_parallel_rank':
        if (req.dataParallelRank === undefined || req.dataParallelRank === null) w.nil();
        else w.int(req.dataParallelRank, field);
        break;
      case 'resumable':
      case 'abort_immediately':
        w.bool(false);
        break;
      case 'lora_request':
        if (req.lora === undefined || req.lora === null) w.nil();
        else writeAny(w, loraRequestArray(req.lora), field);
        break;
      // Every other field (session_id, kv_hints, the multimodal ones) at its default.
      default:
        w.nil();
    }
  }
  return w.toBuffer();
}

function checkAdd(req: VllmAddRequest, params: ResolvedSamplingParams): void {
  if (typeof req.requestId !== 'string' || req.requestId.length === 0)
    bad('request_id', 'must be a non-empty string', req.requestId);
  const ids = req.promptTokenIds;
  if (ids.length === 0) bad('prompt_token_ids', 'must not be empty', '[]');
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    if (!Number.isInteger(id) || (id as number) < 0 || (id as number) > 0x7fffffff)
      bad(`prompt_token_ids[${i}]`, 'must be an integer in [0, 2^31)', id);
  }
  if (!Number.isFinite(req.arrivalTime)) bad('arrival_time', 'must be finite', req.arrivalTime);
  if (req.cacheSalt !== null && typeof req.cacheSalt !== 'string')
    bad('cache_salt', 'must be a string or null', req.cacheSalt);
  if (!Number.isSafeInteger(req.priority)) bad('priority', 'must be an integer', req.priority);
  if (!Number.isSafeInteger(req.clientIndex) || req.clientIndex < 0)
    bad('client_index', 'must be an integer >= 0', req.clientIndex);
  const rank = req.dataParallelRank;
  if (
    rank !== undefined &&
    rank !== null &&
    !(Number.isInteger(rank) && rank >= 0 && rank <= 0xffff)
  )
    bad('data_parallel_rank', 'must be an integer in [0, 65535] or null', rank);
  const wave = req.currentWave;
  if (wave !== undefined && !(Number.isSafeInteger(wave) && wave >= 0))
    bad('current_wave', 'must be an integer >= 0', wave);
  checkSamplingParams(params, ids.length);
}

/**
 * Decodes an ADD payload as the engine does: the layout's required fields must be there, types
 * are strict, SamplingParams is validated with vLLM's ranges (RS_ERR_VLLM_BAD_FIELD). Fields the
 * simulator cannot honour (multimodal, pooling, prompt embeds) must be nil.
 */
export function decodeAdd(layout: VllmLayout, payload: Uint8Array): DecodedAddRequest {
  const r = new MsgReader().reset(payload);
  const n = r.arrayHeader('EngineCoreRequest');
  if (n < layout.requestRequired) {
    r.fail('EngineCoreRequest', `${n} fields, at least ${layout.requestRequired} required`);
  }
  const req: DecodedAddRequest = {
    requestId: '',
    promptTokenIds: new Int32Array(0),
    params: readDefaultParams(),
    arrivalTime: 0,
    cacheSalt: null,
    priority: 0,
    clientIndex: 0,
  };
  let hasParams = false;
  for (let i = 0; i < n; i++) {
    const field = layout.request[i];
    if (field === undefined) {
      r.skip('EngineCoreRequest extra field');
      continue;
    }
    switch (field) {
      case 'request_id':
        req.requestId = r.str(field);
        break;
      case 'prompt_token_ids':
        if (!r.nil(field)) req.promptTokenIds = readTokenIds(r, field);
        break;
      case 'sampling_params':
        hasParams = !r.nil(field);
        if (hasParams) req.params = readSamplingParams(r);
        break;
      case 'arrival_time':
        req.arrivalTime = r.float(field);
        break;
      case 'cache_salt':
        req.cacheSalt = r.nil(field) ? null : r.str(field);
        break;
      case 'client_index':
        req.clientIndex = r.int(field);
        break;
      case 'priority':
        req.priority = r.int(field);
        break;
      case 'lora_request':
        if (!r.nil(field)) req.lora = readLoraRequest(readAnyArgs(r, field), field);
        break;
      case 'mm_features':
      case 'pooling_params':
      case 'prompt_embeds':
        if (!r.nil(field)) throw new RS_ERR_VLLM_DECODE(field, 'not supported by this engine');
        break;
      default:
        r.skip(field);
    }
  }
  r.done('EngineCoreRequest');
  if (!hasParams) throw new RS_ERR_VLLM_DECODE('sampling_params', 'nil: pooling is not supported');
  if (req.params.maxTokens !== -1) checkSamplingParams(req.params, req.promptTokenIds.length);
  return req;
}

function readDefaultParams(): ResolvedSamplingParams {
  return resolveSamplingParams({ maxTokens: 16 });
}

function readTokenIds(r: MsgReader, field: string): Int32Array {
  const n = r.arrayHeader(field);
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const id = r.int(field);
    if (id < 0 || id > 0x7fffffff) r.fail(field, `token id ${id} out of range`);
    out[i] = id;
  }
  return out;
}

export function encodeAbort(requestIds: readonly string[]): Buffer {
  const w = new MsgWriter(64 + requestIds.length * 32);
  w.arrayHeader(requestIds.length);
  for (const id of requestIds) {
    if (typeof id !== 'string' || id.length === 0) bad('abort[]', 'must be a non-empty string', id);
    w.str(id);
  }
  return w.toBuffer();
}

export function decodeAbort(payload: Uint8Array): string[] {
  const r = new MsgReader().reset(payload);
  const out: string[] = [];
  for (let n = r.arrayHeader('abort'); n > 0; n--) out.push(r.str('abort[]'));
  r.done('abort');
  return out;
}

/**
 * START_DP_WAVE's payload, `[wave, exclude_engine_index | nil]` (vLLM's DPEngineCoreProc reads it
 * as `new_wave, exclude_eng_index = request`): every MoE DP rank but `exclude` whose current wave
 * is at or below `wave` starts stepping in that wave.
 */
export function encodeStartDpWave(wave: number, exclude: number | null): Buffer {
  if (!Number.isSafeInteger(wave) || wave < 0)
    bad('start_dp_wave.wave', 'must be an integer >= 0', wave);
  if (exclude !== null && (!Number.isSafeInteger(exclude) || exclude < 0))
    bad('start_dp_wave.exclude_engine_index', 'must be an integer >= 0 or null', exclude);
  const w = new MsgWriter(16);
  w.arrayHeader(2);
  w.int(wave, 'start_dp_wave.wave');
  if (exclude === null) w.nil();
  else w.int(exclude, 'start_dp_wave.exclude_engine_index');
  return w.toBuffer();
}

export function decodeStartDpWave(payload: Uint8Array): { wave: number; exclude: number | null } {
  const r = new MsgReader().reset(payload);
  if (r.arrayHeader('start_dp_wave') !== 2)
    r.fail('start_dp_wave', 'expected [wave, exclude_engine_index]');
  const wave = r.int('start_dp_wave.wave');
  const exclude = r.nil('start_dp_wave.exclude_engine_index')
    ? null
    : r.int('start_dp_wave.exclude_engine_index');
  r.done('start_dp_wave');
  return { wave, exclude };
}

export function encodeUtility(call: UtilityCall): Buffer {
  if (!Number.isSafeInteger(call.clientIndex) || call.clientIndex < 0)
    bad('utility.client_index', 'must be an integer >= 0', call.clientIndex);
  if (typeof call.callId !== 'bigint' && !Number.isSafeInteger(call.callId))
    bad('utility.call_id', 'must be a safe integer or a bigint', call.callId);
  if (typeof call.method !== 'string' || call.method.length === 0)
    bad('utility.method_name', 'must be a non-empty string', call.method);
  const w = new MsgWriter(128);
  w.arrayHeader(4);
  w.int(call.clientIndex, 'utility.client_index');
  w.bigInt(call.callId, 'utility.call_id');
  w.str(call.method);
  writeAny(w, call.args, 'utility.args');
  return w.toBuffer();
}

export function decodeUtility(payload: Uint8Array): UtilityCall {
  const r = new MsgReader().reset(payload);
  if (r.arrayHeader('utility') !== 4)
    r.fail('utility', 'expected [client_index, call_id, method, args]');
  const clientIndex = r.int('utility.client_index');
  const callId = r.intOrBig('utility.call_id');
  const method = r.str('utility.method_name');
  const args = readAnyArgs(r, 'utility.args');
  r.done('utility');
  return { clientIndex, callId, method, args };
}
