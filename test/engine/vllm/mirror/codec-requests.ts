/**
 * Frontend -> engine messages (VM §4, §13; VE §4): a one-byte type frame, then the msgpack payload
 * and, for an ADD, its extra frames. EngineCoreRequest is array_like (positional, every field);
 * SamplingParams is a sparse map of the keys not at their default (codec-sampling.ts).
 */
import {
  decodeSamplingParams,
  encodeSamplingParams,
  type SamplingParams,
} from './codec-sampling.js';
import { type Era, REQUEST_FIELDS, REQUEST_REQUIRED, type RequestField } from './eras.js';
import { f64, pack, unpack } from './msgpack.js';
import { decodeTensor, encodeTensor, type Frames, type Tensor } from './ndarray.js';
import {
  array,
  arrayOf,
  bigInt,
  bool,
  float,
  int,
  MirrorDecodeError,
  nullable,
  plain,
  plainMap,
  str,
  strMap,
} from './wire-types.js';

/** EngineCoreRequestType, the first frame (VM §13). 4 and 5 are engine-internal, never sent. */
export const RequestType = { ADD: 0, ABORT: 1, START_DP_WAVE: 2, UTILITY: 3 } as const;

export interface EngineCoreRequest {
  request_id: string;
  prompt_token_ids: number[] | null;
  mm_features: unknown[] | null;
  sampling_params: SamplingParams | null;
  pooling_params: unknown;
  arrival_time: number;
  lora_request: unknown[] | null;
  cache_salt: string | null;
  data_parallel_rank: number | null;
  prompt_embeds?: Tensor | null;
  prompt_is_token_ids?: boolean[] | null;
  client_index?: number;
  current_wave?: number;
  priority?: number;
  trace_headers?: Record<string, string> | null;
  resumable?: boolean;
  external_req_id?: string | null;
  reasoning_ended?: boolean | null;
  reasoning_parser_kwargs?: Record<string, unknown> | null;
  abort_immediately?: boolean;
  session_id?: string | null;
  kv_hints?: Record<string, unknown> | null;
}

/** A decoded ADD, with the element count it arrived with (a Rust peer needs the exact one). */
export interface DecodedAdd {
  request: EngineCoreRequest;
  length: number;
}

export interface UtilityCall {
  client_index: number;
  call_id: bigint;
  method: string;
  args: unknown[];
}

interface FieldCodec {
  encode(v: unknown, frames: Frames): unknown;
  decode(v: unknown, frames: Frames, where: string): unknown;
  fallback: unknown;
}

type Check<T> = (v: unknown, where: string, frames: Frames) => T;

/** A field typed `T | None` in vLLM: nil passes. */
function field<T>(
  check: Check<T>,
  fallback: unknown,
  encode: (v: T, frames: Frames) => unknown = (v) => v,
): FieldCodec {
  return {
    encode: (v, frames) =>
      v === undefined ? fallback : v === null ? null : encode(v as T, frames),
    decode: (v, frames, where) => (v === null ? null : check(v, where, frames)),
    fallback,
  };
}

/** A field typed `T` (no None): msgspec refuses nil. */
function strict<T>(check: Check<T>, fallback: unknown, encode?: (v: T) => unknown): FieldCodec {
  return {
    ...field(check, fallback, encode),
    decode: (v, frames, where) => check(v, where, frames),
  };
}

const REQUIRED = Symbol('required');

const REQUEST_CODECS: Readonly<Record<RequestField, FieldCodec>> = {
  request_id: strict(str, REQUIRED),
  prompt_token_ids: field(arrayOf(int), null),
  mm_features: field((v, w) => plain(array(v, w)), null),
  sampling_params: field(decodeSamplingParams, null, encodeSamplingParams),
  pooling_params: field(plain, null),
  arrival_time: strict(float, REQUIRED, f64),
  lora_request: field((v, w) => plain(array(v, w)) as unknown[], null),
  cache_salt: field(str, null),
  data_parallel_rank: field(int, null),
  prompt_embeds: field((v, where, frames) => decodeTensor(v, frames, where), null, encodeTensor),
  prompt_is_token_ids: field(arrayOf(bool), null),
  client_index: strict(int, 0),
  current_wave: strict(int, 0),
  priority: strict(int, 0),
  trace_headers: field(strMap, null),
  resumable: strict(bool, false),
  external_req_id: field(str, null),
  reasoning_ended: field(bool, null),
  reasoning_parser_kwargs: field(plainMap, null),
  abort_immediately: strict(bool, false),
  session_id: field(str, null),
  kv_hints: field(plainMap, null),
};

/** The defaults of fields that have one; fields without (the first 9) must be given. */
function fieldDefault(name: RequestField): unknown {
  const d = REQUEST_CODECS[name].fallback;
  return d === REQUIRED ? undefined : d;
}

/** ADD frames `[0x00, payload, ...aux]`: exactly `era`'s field count, unset fields defaulted. */
export function encodeAdd(era: Era, r: EngineCoreRequest): Buffer[] {
  const frames: Frames = { aux: [] };
  const fields = r as unknown as Record<string, unknown>;
  const body = REQUEST_FIELDS[era].map((name) => {
    const v = fields[name];
    if (v === undefined && REQUEST_CODECS[name].fallback === REQUIRED) {
      throw new TypeError(`mirror: EngineCoreRequest.${name} has no default`);
    }
    return REQUEST_CODECS[name].encode(v, frames);
  });
  return [Buffer.from([RequestType.ADD]), pack(body), ...frames.aux];
}

/**
 * An ADD payload (and its extra frames) decoded as `era`'s engine would: at least the 9 fields
 * without defaults, fields past the era's list ignored (msgspec), every type checked.
 */
export function decodeAdd(era: Era, payload: Buffer, aux: readonly Buffer[] = []): DecodedAdd {
  const a = array(unpack(payload), 'EngineCoreRequest');
  if (a.length < REQUEST_REQUIRED) {
    throw new MirrorDecodeError('EngineCoreRequest', `${a.length} elements, < ${REQUEST_REQUIRED}`);
  }
  const frames: Frames = { aux: [...aux] };
  const out: Record<string, unknown> = {};
  REQUEST_FIELDS[era].forEach((name, i) => {
    const where = `EngineCoreRequest.${name}`;
    const v = a[i];
    out[name] =
      v === undefined ? fieldDefault(name) : REQUEST_CODECS[name].decode(v, frames, where);
  });
  return { request: out as unknown as EngineCoreRequest, length: a.length };
}

export function encodeAbort(ids: readonly string[]): Buffer[] {
  return [Buffer.from([RequestType.ABORT]), pack([...ids])];
}

export function decodeAbort(payload: Buffer): string[] {
  return arrayOf(str)(unpack(payload), 'ABORT');
}

/** UTILITY `[client_index, call_id, method_name, args]`; a bigint call id >= 2^63 is a uint64. */
export function encodeUtilityCall(c: UtilityCall): Buffer[] {
  return [Buffer.from([RequestType.UTILITY]), pack([c.client_index, c.call_id, c.method, c.args])];
}

/** Also the pre-2026 3-element form without client_index (VM §13). */
export function decodeUtilityCall(payload: Buffer): UtilityCall {
  const a = array(unpack(payload), 'UTILITY');
  const full = a.length === 4;
  if (!full && a.length !== 3) throw new MirrorDecodeError('UTILITY', `${a.length} elements`);
  const at = (i: number) => a[full ? i : i - 1];
  return {
    client_index: full ? int(a[0], 'UTILITY.client_index') : 0,
    call_id: bigInt(at(1), 'UTILITY.call_id'),
    method: str(at(2), 'UTILITY.method_name'),
    args: plain(array(at(3), 'UTILITY.args')) as unknown[],
  };
}

/** START_DP_WAVE `[new_wave, exclude_engine_index | nil]` (VH §6.2). */
export function encodeStartDpWave(wave: number, exclude: number | null): Buffer[] {
  return [Buffer.from([RequestType.START_DP_WAVE]), pack([wave, exclude])];
}

export function decodeStartDpWave(payload: Buffer): { wave: number; exclude: number | null } {
  const a = array(unpack(payload), 'START_DP_WAVE');
  return {
    wave: int(a[0], 'START_DP_WAVE.wave'),
    exclude: nullable(int)(a[1] ?? null, 'START_DP_WAVE.exclude'),
  };
}
