/**
 * Engine -> frontend messages: EngineCoreOutputs (8 fields, VM §6) holding EngineCoreOutput arrays
 * of the era's length (VM §5), SchedulerStats (VH §4), UtilityOutput (VM §13), and the one-frame
 * ENGINE_CORE_DEAD notice (VE §5). Field names are vLLM's, so the era tables drive the layout.
 */
import {
  decodeLogprobs,
  decodePromptLogprobs,
  decodeRoutedExperts,
  decodeSamplingMask,
  encodeLogprobs,
  encodePromptLogprobs,
  encodeRoutedExperts,
  encodeSamplingMask,
  type Logprobs,
  type PromptLogprobs,
  type RoutedExperts,
  type SamplingMask,
} from './codec-arrays.js';
import { decodeSchedulerStats, encodeSchedulerStats, type SchedulerStats } from './codec-stats.js';
import {
  type Era,
  OUTPUT_FIELDS,
  OUTPUTS_FIELDS,
  type OutputField,
  outputLayoutFor,
} from './eras.js';
import { f64, pack, unpack } from './msgpack.js';
import { decodeTensor, encodeTensor, type Frames, type Tensor } from './ndarray.js';
import {
  array,
  arrayOf,
  bigInt,
  float,
  int,
  MirrorDecodeError,
  map,
  nullable,
  plain,
  plainMap,
  str,
  strMap,
} from './wire-types.js';

/** FinishReason (VM §12): the same five values in every era. */
export const FinishReason = { STOP: 0, LENGTH: 1, ABORT: 2, ERROR: 3, REPETITION: 4 } as const;

export const ENGINE_CORE_DEAD = Buffer.from('ENGINE_CORE_DEAD', 'ascii');

/** EngineCoreEvent: type 1 queued, 2 scheduled, 3 preempted; timestamp engine-monotonic. */
export interface EngineEvent {
  type: number;
  timestamp: number;
}

/** One EngineCoreOutput. Decoded ones have every field of their layout's era (nil when unset). */
export interface EngineCoreOutput {
  request_id: string;
  new_token_ids: number[];
  new_logprobs?: Logprobs | null;
  new_prompt_logprobs_tensors?: PromptLogprobs | null;
  pooling_output?: Tensor | null;
  finish_reason?: number | null;
  stop_reason?: number | string | null;
  events?: EngineEvent[] | null;
  kv_transfer_params?: Record<string, unknown> | null;
  ec_transfer_params?: Record<string, unknown> | null;
  trace_headers?: Record<string, string> | null;
  prefill_stats?: Record<string, unknown> | null;
  routed_experts?: RoutedExperts | null;
  num_nans_in_logits?: number;
  mm_cache_miss_hashes?: string[] | null;
  new_sampling_mask?: SamplingMask | null;
  spec_decode_metrics?: Record<string, unknown> | null;
  prompt_token_id_logprobs?: Tensor | null;
}

/** UtilityOutput `[call_id, failure_message, result]`; result is UtilityResult `[type_info, value]`. */
export interface UtilityOutput {
  call_id: bigint;
  failure_message: string | null;
  result: { value: unknown } | null;
}

export interface EngineCoreOutputs {
  engine_index: number;
  outputs: EngineCoreOutput[];
  scheduler_stats: SchedulerStats | null;
  timestamp: number;
  utility_output: UtilityOutput | null;
  finished_requests: string[] | null;
  wave_complete: number | null;
  start_wave: number | null;
}

/** A decoded message, with the element counts seen (the era evidence). */
export interface DecodedOutputs {
  message: EngineCoreOutputs;
  /** Elements of each EngineCoreOutput, in order. */
  outputLengths: number[];
  /** Elements of the EngineCoreOutputs array (8 in every era). */
  length: number;
}

interface FieldCodec {
  encode(v: unknown, frames: Frames): unknown;
  decode(v: unknown, frames: Frames, where: string): unknown;
}

type Coder<T> = (v: T, frames: Frames) => unknown;
type Decoder<T> = (v: unknown, frames: Frames, where: string) => T;

/** A field whose default is nil. */
function orNil<T>(encode: Coder<T>, decode: Decoder<T>): FieldCodec {
  return {
    encode: (v, frames) => (v === null || v === undefined ? null : encode(v as T, frames)),
    decode: (v, frames, where) => (v === null ? null : decode(v, frames, where)),
  };
}

const asIs = <T>(v: T): T => v;
const noFrames =
  <T>(check: (v: unknown, where: string) => T): Decoder<T> =>
  (v, _frames, where) =>
    check(v, where);

function finishReason(v: unknown, where: string): number {
  const n = int(v, where);
  if (n < 0 || n > 4) throw new MirrorDecodeError(where, `FinishReason ${n} is not 0..4`);
  return n;
}

function decodeEvent(v: unknown, where: string): EngineEvent {
  const m = map(v, where);
  return {
    type: int(m.type, `${where}.type`),
    timestamp: float(m.timestamp, `${where}.timestamp`),
  };
}

const OUTPUT_CODECS: Readonly<Record<OutputField, FieldCodec>> = {
  request_id: { encode: asIs, decode: noFrames(str) },
  new_token_ids: { encode: asIs, decode: noFrames(arrayOf(int)) },
  new_logprobs: orNil(encodeLogprobs, decodeLogprobs),
  new_prompt_logprobs_tensors: orNil(encodePromptLogprobs, decodePromptLogprobs),
  pooling_output: orNil(encodeTensor, decodeTensor),
  finish_reason: orNil(asIs, noFrames(finishReason)),
  stop_reason: orNil(
    asIs,
    noFrames((v, w) => (typeof v === 'string' ? v : int(v, w))),
  ),
  events: orNil(
    (e: EngineEvent[]) => e.map((x) => ({ type: x.type, timestamp: f64(x.timestamp) })),
    noFrames(arrayOf(decodeEvent)),
  ),
  kv_transfer_params: orNil(asIs, noFrames(plainMap)),
  ec_transfer_params: orNil(asIs, noFrames(plainMap)),
  trace_headers: orNil(asIs, noFrames(strMap)),
  prefill_stats: orNil(asIs, noFrames(plainMap)),
  routed_experts: orNil(encodeRoutedExperts, decodeRoutedExperts),
  num_nans_in_logits: { encode: (v) => v ?? 0, decode: noFrames(int) },
  mm_cache_miss_hashes: orNil(asIs, noFrames(arrayOf(str))),
  new_sampling_mask: orNil(encodeSamplingMask, decodeSamplingMask),
  spec_decode_metrics: orNil(asIs, noFrames(plainMap)),
  prompt_token_id_logprobs: orNil(encodeTensor, decodeTensor),
};

/** The wire array of one output: exactly the era's fields, unset ones at their defaults. */
export function encodeOutput(era: Era, o: EngineCoreOutput, frames: Frames): unknown[] {
  const fields = o as unknown as Record<string, unknown>;
  return OUTPUT_FIELDS[era].map((name) => OUTPUT_CODECS[name].encode(fields[name], frames));
}

/** One output decoded with `era`'s layout, as msgspec: missing trailing fields default. */
export function decodeOutput(
  era: Era,
  v: unknown,
  frames: Frames,
  where: string,
): EngineCoreOutput {
  const a = array(v, where);
  if (a.length < 2) throw new MirrorDecodeError(where, `EngineCoreOutput of ${a.length} (< 2)`);
  const out: Record<string, unknown> = {};
  OUTPUT_FIELDS[era].forEach((name, i) => {
    const x = a[i];
    out[name] =
      x === undefined
        ? name === 'num_nans_in_logits'
          ? 0
          : null
        : OUTPUT_CODECS[name].decode(x, frames, `${where}.${name}`);
  });
  return out as unknown as EngineCoreOutput;
}

function encodeUtility(u: UtilityOutput): unknown[] {
  return [u.call_id, u.failure_message, u.result === null ? null : [null, u.result.value]];
}

/** 1..3 elements (failure_message and result default to nil); call ids are bigints. */
export function decodeUtilityOutput(v: unknown, where: string): UtilityOutput {
  const a = array(v, where);
  if (a.length < 1) throw new MirrorDecodeError(where, 'empty UtilityOutput');
  const result = a[2] ?? null;
  let value: { value: unknown } | null = null;
  if (result !== null) {
    const r = array(result, `${where}.result`);
    if (r.length !== 2)
      throw new MirrorDecodeError(`${where}.result`, `UtilityResult of ${r.length}`);
    value = { value: plain(r[1]) };
  }
  return {
    call_id: bigInt(a[0], `${where}.call_id`),
    failure_message: nullable(str)(a[1] ?? null, `${where}.failure_message`),
    result: value,
  };
}

/** An EngineCoreOutputs as frames `[body, ...aux]`; its outputs in `era`'s layout. */
export function encodeOutputs(era: Era, m: Partial<EngineCoreOutputs>): Buffer[] {
  const frames: Frames = { aux: [] };
  const body = [
    m.engine_index ?? 0,
    (m.outputs ?? []).map((o) => encodeOutput(era, o, frames)),
    m.scheduler_stats ? encodeSchedulerStats(m.scheduler_stats) : null,
    f64(m.timestamp ?? 0),
    m.utility_output ? encodeUtility(m.utility_output) : null,
    m.finished_requests ?? null,
    m.wave_complete ?? null,
    m.start_wave ?? null,
  ];
  return [pack(body), ...frames.aux];
}

/**
 * Frames from an output socket, decoded. Each EngineCoreOutput takes the layout of `era`, or, when
 * none is given, the one its element count names (`outputLayoutFor`).
 */
export function decodeOutputs(frames: readonly Buffer[], era?: Era): DecodedOutputs {
  const [body, ...aux] = frames;
  if (body === undefined) throw new MirrorDecodeError('frames', 'no frames');
  const ctx: Frames = { aux };
  const a = array(unpack(body), 'EngineCoreOutputs');
  const at = (i: number) => a[i] ?? null;
  const where = (i: number) => `EngineCoreOutputs.${OUTPUTS_FIELDS[i]}`;
  const raw = a[1] === undefined ? [] : array(a[1], where(1)); // a list, never nil
  const outputs = raw.map((o, i) => {
    const n = Array.isArray(o) ? o.length : 0;
    return decodeOutput(era ?? outputLayoutFor(n), o, ctx, `${where(1)}[${i}]`);
  });
  const message: EngineCoreOutputs = {
    engine_index: a[0] === undefined ? 0 : int(a[0], where(0)),
    outputs,
    scheduler_stats: nullable(decodeSchedulerStats)(at(2), where(2)),
    timestamp: a[3] === undefined ? 0 : float(a[3], where(3)),
    utility_output: nullable(decodeUtilityOutput)(at(4), where(4)),
    finished_requests: nullable(arrayOf(str))(at(5), where(5)),
    wave_complete: nullable(int)(at(6), where(6)),
    start_wave: nullable(int)(at(7), where(7)),
  };
  const outputLengths = raw.map((o) => (Array.isArray(o) ? o.length : 0));
  return { message, outputLengths, length: a.length };
}

export function isEngineDead(frames: readonly Buffer[]): boolean {
  return frames.length === 1 && frames[0]!.equals(ENGINE_CORE_DEAD);
}
