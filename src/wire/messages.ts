/**
 * The records that cross the rings between the API servers and the engine core: the message types in
 * one file (as vLLM v1 keeps them in `v1/engine/__init__.py`), the transport in `src/shm/ring.ts`.
 *
 * Every record is written in place into ring memory through typed-array views over the whole region,
 * and read back the same way: no intermediate objects, no JSON. Payloads start 8-byte aligned (the
 * ring guarantees it), so float64 fields sit at multiples of 8 and int32 columns at multiples of 4.
 *
 * Request ring (API server k -> engine):
 *
 *   ADD     f64[8]  seed (NaN = none), arrival ms, temperature, top_p, min_p,
 *                   presence, frequency, repetition penalties
 *           i32[18] slot, top_k, max_tokens, min_tokens, flags, routed_experts_prompt_start,
 *                   priority, prompt_len, stop_ids_len, salt_bytes, slot_gen, import_kv_tokens,
 *                   top_logprobs, prompt_logprobs (-1: none), lora_id (0: none), kv_params_bytes,
 *                   script_len (0: none), data_parallel_rank (-1: none, the engine core picks)
 *           i32[prompt_len] prompt ids, i32[stop_ids_len] stop ids,
 *           i32[script_len] scripted answer ids (at most MAX_SCRIPT_TOKENS), u8[salt_bytes] cache
 *           salt (UTF-8), u8[kv_params_bytes] kv_transfer_params (one msgpack map, at most
 *           MAX_KV_PARAMS_BYTES)
 *   ABORT   i32 slot, i32 reserved
 *
 * Output ring (engine -> API server k), one STEP record per engine step that has outputs for k:
 *
 *   STEP    i32[10] count, mask_ids_total, routing_rows_total, layers, topk, routing_id_bytes (1|2),
 *                   top_total, prompt_total, kv_total, (1 reserved)
 *           f64[2]  engine clock ms at step end, modelled step duration ms
 *           i32[count] x 17 columns: slot, token, logprob (f32), finish, stop_token_id, num_cached,
 *                   weight_version, mask_count, routing_rows, routing_first_pos, slot_gen,
 *                   reject_reason (why a finish=Error request was refused, reject.ts), top_count,
 *                   prompt_positions, prompt_first_pos, prompt_width, kv_params_bytes
 *           i32[mask_ids_total] mask ids, rows in output order
 *           i32[top_total], f32[top_total] top candidates: ids, then their logprobs, rows in order
 *           i32[prompt_total], f32[prompt_total], i32[prompt_total] prompt logprobs: ids, logprobs,
 *                   ranks, rows in order
 *           u8|u16[routing_rows_total * layers * topk] routing rows, in output order
 *           u8[kv_total] kv_transfer_params the engine answered (msgpack maps), rows in order
 *
 * Every area starts 8-byte aligned (each is padded to a multiple of 8 bytes). The STEP record's
 * code is in step-record.ts (re-exported here).
 *
 * kv_transfer_params (prefill/decode through a vLLM engine, docs/vllm-protocol.md): the ADD's blob
 * is what the API server hands the engine unchanged (the bridge puts it in the EngineCoreRequest's
 * SamplingParams.extra_args), and an output's kv_params_bytes are what the engine answered on it
 * (vLLM: on a request's final output), which the API server answers as the response's
 * kv_transfer_params. Free-form and per request, never per token; the simulator writes none.
 *
 * Top candidates (a request's top_logprobs k > 0): top_count entries for the output's token, the
 * engine's best candidates in descending logprob (vLLM's logprob columns 1..k; the sampled token
 * is among them when it is among the k best). Prompt logprobs (prompt_logprobs k >= 0):
 * prompt_positions positions from prompt_first_pos on (position p scores prompt token p given the
 * tokens before it, so p >= 1), prompt_width = 1 + k entries each: entry 0 the prompt token itself
 * with its rank in the vocabulary (1 = the most likely), entries 1..k the best candidates with
 * ranks 1..k. A long prompt's positions come in several outputs, as its prefill does.
 *
 * Slot generations: an API server reuses request slots, and a restarted API server or engine can find
 * records of the previous incarnation still in a ring. The server writes a fresh generation with every
 * ADD, the engine echoes it on every output of that request, and the output worker drops outputs
 * whose generation is not the slot's current one. No reset handshake is needed on any restart.
 */
import { slotIndex, wordIndex } from '../shm/words.js';
import { int32Copy } from './int32-slab.js';
import type { EngineRequest, SamplingParams } from './types.js';

export * from './step-record.js';

export const RecordType = {
  Add: 1,
  Abort: 2,
  Step: 16,
} as const;

/** Typed views over one whole shared region; record offsets are absolute byte offsets into it. */
export interface RegionViews {
  readonly bytes: Uint8Array;
  readonly i32: Int32Array;
  readonly f32: Float32Array;
  readonly f64: Float64Array;
  readonly u16: Uint16Array;
}

export function regionViews(sab: SharedArrayBuffer): RegionViews {
  const whole8 = sab.byteLength - (sab.byteLength % 8);
  return {
    bytes: new Uint8Array(sab),
    i32: new Int32Array(sab, 0, whole8 / 4),
    f32: new Float32Array(sab, 0, whole8 / 4),
    f64: new Float64Array(sab, 0, whole8 / 8),
    u16: new Uint16Array(sab, 0, whole8 / 2),
  };
}

/**
 * The most bytes of kv_transfer_params one request or one output carries (vLLM's NixlConnector
 * answers a few hundred: ids, a host, a port and one block id per 16 prompt tokens, 64 KiB is a
 * 250,000-token prompt's). A larger one fails its request with an error naming the limit.
 */
export const MAX_KV_PARAMS_BYTES = 64 * 1024;

/**
 * The most tokens of a scripted answer (EngineRequest.script) one ADD carries: a whole 128k
 * context's worth (512 KiB of ids). Tokens past max_tokens are never emitted, so the API server
 * may cut a longer script there; a record declaring more is malformed.
 */
export const MAX_SCRIPT_TOKENS = 128 * 1024;

// ---- ADD ---------------------------------------------------------------------------------------

export const AddFlag = {
  IgnoreEos: 1,
  Logprobs: 2,
  SamplingMask: 4,
  RoutedExperts: 8,
  /** P/D: keep the prompt's KV pinned for a decode instance once the request finishes. */
  PinKv: 16,
  /** The scripted answer ends with its last token (EngineRequest.scriptEnds). */
  ScriptEnds: 32,
} as const;

const ADD_F64 = 8;
const ADD_I32 = 18;
/** Byte offset of the i32 fields from the record's start (after its f64 fields). */
const ADD_I32_AT = ADD_F64 * 8;
const ADD_FIXED_BYTES = ADD_I32_AT + ADD_I32 * 4;
// The f64 fields, in slots from the record's start.
const D_SEED = 0;
const D_ARRIVAL_MS = 1;
const D_TEMPERATURE = 2;
const D_TOP_P = 3;
const D_MIN_P = 4;
const D_PRESENCE = 5;
const D_FREQUENCY = 6;
const D_REPETITION = 7;
// The i32 fields, in words from ADD_I32_AT.
const A_SLOT = 0;
const A_TOP_K = 1;
const A_MAX_TOKENS = 2;
const A_MIN_TOKENS = 3;
const A_FLAGS = 4;
const A_ROUTED_START = 5;
const A_PRIORITY = 6;
const A_PROMPT_LEN = 7;
const A_STOP_LEN = 8;
const A_SALT_BYTES = 9;
const A_SLOT_GEN = 10;
const A_IMPORT_KV_TOKENS = 11;
const A_TOP_LOGPROBS = 12;
const A_PROMPT_LOGPROBS = 13;
const A_LORA_ID = 14;
const A_KV_BYTES = 15;
const A_SCRIPT_LEN = 16;
const A_DP_RANK = 17;
/** data_parallel_rank's word when the request names no rank. */
const NO_DP_RANK = -1;

/** What the API server knows of a request when it writes its ADD record. */
export interface AddFields {
  slot: number;
  slotGen: number;
  promptTokenIds: Int32Array;
  params: SamplingParams;
  priority: number;
  /** UTF-8 bytes of `cache_salt`, or null. */
  cacheSalt: Uint8Array | null;
  arrivalTimeMs: number;
  /** P/D (see EngineRequest): pin the prompt's KV for a decode instance; import this prefix. */
  pinKv?: boolean;
  importKvTokens?: number;
  /** The LoRA adapter (see EngineRequest); 0 or absent: none. */
  loraId?: number;
  /** kv_transfer_params for the engine, one msgpack map (see EngineRequest); absent: none. */
  kvParams?: Uint8Array | null;
  /** The scripted answer and whether it ends the answer (see EngineRequest); absent: none. */
  script?: Int32Array | null;
  scriptEnds?: boolean;
  /** The data-parallel rank it must run on (see EngineRequest); null or absent: none. */
  dataParallelRank?: number | null;
}

export function addRecordBytes(fields: AddFields): number {
  const ints =
    fields.promptTokenIds.length + fields.params.stopTokenIds.length + (fields.script?.length ?? 0);
  const bytes = (fields.cacheSalt?.length ?? 0) + (fields.kvParams?.length ?? 0);
  return ADD_FIXED_BYTES + ints * 4 + bytes;
}

export function writeAdd(v: RegionViews, offset: number, f: AddFields): void {
  const p = f.params;
  const d = slotIndex(offset);
  v.f64[d + D_SEED] = p.seed ?? Number.NaN;
  v.f64[d + D_ARRIVAL_MS] = f.arrivalTimeMs;
  v.f64[d + D_TEMPERATURE] = p.temperature;
  v.f64[d + D_TOP_P] = p.topP;
  v.f64[d + D_MIN_P] = p.minP;
  v.f64[d + D_PRESENCE] = p.presencePenalty;
  v.f64[d + D_FREQUENCY] = p.frequencyPenalty;
  v.f64[d + D_REPETITION] = p.repetitionPenalty;
  const i = wordIndex(offset + ADD_I32_AT);
  v.i32[i + A_SLOT] = f.slot;
  v.i32[i + A_TOP_K] = p.topK;
  v.i32[i + A_MAX_TOKENS] = p.maxTokens;
  v.i32[i + A_MIN_TOKENS] = p.minTokens;
  v.i32[i + A_FLAGS] =
    (p.ignoreEos ? AddFlag.IgnoreEos : 0) |
    (p.logprobs ? AddFlag.Logprobs : 0) |
    (p.returnSamplingMask ? AddFlag.SamplingMask : 0) |
    (p.returnRoutedExperts ? AddFlag.RoutedExperts : 0) |
    (f.pinKv === true ? AddFlag.PinKv : 0) |
    (f.scriptEnds === true && f.script ? AddFlag.ScriptEnds : 0);
  v.i32[i + A_ROUTED_START] = p.routedExpertsPromptStart;
  v.i32[i + A_PRIORITY] = f.priority;
  v.i32[i + A_PROMPT_LEN] = f.promptTokenIds.length;
  v.i32[i + A_STOP_LEN] = p.stopTokenIds.length;
  v.i32[i + A_SALT_BYTES] = f.cacheSalt?.length ?? 0;
  v.i32[i + A_SLOT_GEN] = f.slotGen;
  v.i32[i + A_IMPORT_KV_TOKENS] = f.importKvTokens ?? 0;
  v.i32[i + A_TOP_LOGPROBS] = p.topLogprobs;
  v.i32[i + A_PROMPT_LOGPROBS] = p.promptLogprobs;
  v.i32[i + A_LORA_ID] = f.loraId ?? 0;
  v.i32[i + A_KV_BYTES] = f.kvParams?.length ?? 0;
  const scriptLen = f.script?.length ?? 0;
  v.i32[i + A_SCRIPT_LEN] = scriptLen;
  v.i32[i + A_DP_RANK] = f.dataParallelRank ?? NO_DP_RANK;
  const promptAt = i + ADD_I32;
  v.i32.set(f.promptTokenIds, promptAt);
  const stopAt = promptAt + f.promptTokenIds.length;
  v.i32.set(p.stopTokenIds, stopAt);
  const scriptAt = stopAt + p.stopTokenIds.length;
  if (f.script) v.i32.set(f.script, scriptAt);
  const saltAt = (scriptAt + scriptLen) * 4;
  if (f.cacheSalt) v.bytes.set(f.cacheSalt, saltAt);
  if (f.kvParams) v.bytes.set(f.kvParams, saltAt + (f.cacheSalt?.length ?? 0));
}

const saltDecoder = new TextDecoder();

/**
 * Reads an ADD record into a fresh EngineRequest (the engine keeps it for the request's life, so the
 * arrays are copies, never views into ring memory that the producer will overwrite). A record whose
 * declared lengths do not fit its payload is malformed: null, and the engine answers with an error.
 */
export function readAdd(
  v: RegionViews,
  offset: number,
  length: number,
  server: number,
): EngineRequest | null {
  if (length < ADD_FIXED_BYTES) return null;
  const d = slotIndex(offset);
  const i = wordIndex(offset + ADD_I32_AT);
  const promptLen = v.i32[i + A_PROMPT_LEN]!;
  const stopLen = v.i32[i + A_STOP_LEN]!;
  const saltBytes = v.i32[i + A_SALT_BYTES]!;
  const kvBytes = v.i32[i + A_KV_BYTES]!;
  const scriptLen = v.i32[i + A_SCRIPT_LEN]!;
  const dpRank = v.i32[i + A_DP_RANK]!;
  if (promptLen < 0 || stopLen < 0 || saltBytes < 0) return null;
  if (kvBytes < 0 || kvBytes > MAX_KV_PARAMS_BYTES) return null;
  if (scriptLen < 0 || scriptLen > MAX_SCRIPT_TOKENS) return null;
  const ints = promptLen + stopLen + scriptLen;
  if (ADD_FIXED_BYTES + ints * 4 + saltBytes + kvBytes > length) return null;
  const flags = v.i32[i + A_FLAGS]!;
  const ends = (flags & AddFlag.ScriptEnds) !== 0;
  const seed = v.f64[d + D_SEED]!;
  const promptAt = i + ADD_I32;
  const stopAt = promptAt + promptLen;
  const scriptAt = stopAt + stopLen;
  const saltAt = (scriptAt + scriptLen) * 4;
  const kvAt = saltAt + saltBytes;
  return {
    server,
    slot: v.i32[i + A_SLOT]!,
    promptTokenIds: int32Copy(v.i32, promptAt, stopAt),
    params: {
      temperature: v.f64[d + D_TEMPERATURE]!,
      topP: v.f64[d + D_TOP_P]!,
      topK: v.i32[i + A_TOP_K]!,
      minP: v.f64[d + D_MIN_P]!,
      seed: Number.isNaN(seed) ? null : seed,
      maxTokens: v.i32[i + A_MAX_TOKENS]!,
      minTokens: v.i32[i + A_MIN_TOKENS]!,
      stopTokenIds: int32Copy(v.i32, stopAt, stopAt + stopLen),
      ignoreEos: (flags & AddFlag.IgnoreEos) !== 0,
      presencePenalty: v.f64[d + D_PRESENCE]!,
      frequencyPenalty: v.f64[d + D_FREQUENCY]!,
      repetitionPenalty: v.f64[d + D_REPETITION]!,
      logprobs: (flags & AddFlag.Logprobs) !== 0,
      topLogprobs: v.i32[i + A_TOP_LOGPROBS]!,
      promptLogprobs: v.i32[i + A_PROMPT_LOGPROBS]!,
      returnSamplingMask: (flags & AddFlag.SamplingMask) !== 0,
      returnRoutedExperts: (flags & AddFlag.RoutedExperts) !== 0,
      routedExpertsPromptStart: v.i32[i + A_ROUTED_START]!,
    },
    priority: v.i32[i + A_PRIORITY]!,
    cacheSalt: saltBytes > 0 ? saltDecoder.decode(v.bytes.slice(saltAt, saltAt + saltBytes)) : null,
    arrivalTimeMs: v.f64[d + D_ARRIVAL_MS]!,
    pinKv: (flags & AddFlag.PinKv) !== 0,
    importKvTokens: v.i32[i + A_IMPORT_KV_TOKENS]!,
    loraId: v.i32[i + A_LORA_ID]!,
    kvParams: kvBytes > 0 ? v.bytes.slice(kvAt, kvAt + kvBytes) : null,
    // An empty script that ends the answer is one (an answer of EOS alone); without the flag it
    // is none.
    script: scriptLen > 0 || ends ? int32Copy(v.i32, scriptAt, scriptAt + scriptLen) : null,
    scriptEnds: ends,
    // Any negative word is none (the writer writes -1); the range is the API server's check.
    dataParallelRank: dpRank >= 0 ? dpRank : null,
  };
}

/** The slot an ADD record is for, readable even when the rest of the record is malformed. */
export function readAddSlot(v: RegionViews, offset: number, length: number): number {
  return length >= ADD_FIXED_BYTES ? v.i32[wordIndex(offset + ADD_I32_AT) + A_SLOT]! : -1;
}

/** The slot generation an ADD record carries (see the header comment). */
export function readAddSlotGen(v: RegionViews, offset: number, length: number): number {
  return length >= ADD_FIXED_BYTES ? v.i32[wordIndex(offset + ADD_I32_AT) + A_SLOT_GEN]! : 0;
}

// ---- ABORT -------------------------------------------------------------------------------------

export const ABORT_BYTES = 8;
// Its i32 fields, in words from the record's start.
const AB_SLOT = 0;
const AB_RESERVED = 1;

export function writeAbort(v: RegionViews, offset: number, slot: number): void {
  const i = wordIndex(offset);
  v.i32[i + AB_SLOT] = slot;
  v.i32[i + AB_RESERVED] = 0;
}

export function readAbortSlot(v: RegionViews, offset: number): number {
  return v.i32[wordIndex(offset) + AB_SLOT]!;
}
