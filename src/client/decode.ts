import { unpack } from 'msgpackr';
import { RS_ERR_CLIENT_DECODE } from '../errors.js';

/**
 * Decoding of /inference/v1/generate answers into typed arrays. One decoder covers the three
 * forms, field by field: packed arrays may carry base64 text (JSON) or raw bytes (msgpack bin);
 * `token_ids` may be an int array or an int32 packed array; logprobs come from
 * `completion_logprobs` or the legacy `logprobs.content`; the mask from `{ids, counts}` or int[][].
 * This is the client side, not a server hot path: clarity over allocation here.
 */

export interface DecodedRouting {
  data: Uint8Array | Uint16Array;
  /** [rows, layers, topk] */
  shape: [number, number, number];
  /** Absolute sequence position of row 0. */
  start: number;
}

export interface DecodedMask {
  counts: Int32Array;
  ids: Int32Array;
}

export interface DecodedChoice {
  index: number;
  finishReason: string | null;
  stopReason: number | string | null;
  tokenIds: Int32Array;
  logprobs: Float32Array | null;
  mask: DecodedMask | null;
  routedExperts: DecodedRouting | null;
  weightVersions: Int32Array | null;
}

export interface DecodedUsage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  cachedTokens: number | null;
}

export interface GenerateResult {
  requestId: string;
  model: string;
  created: number;
  choices: DecodedChoice[];
  usage: DecodedUsage | null;
  promptLogprobs: unknown;
  kvTransferParams: unknown;
}

type Obj = Record<string, unknown>;

const utf8 = new TextDecoder();

const ELEMENT_BYTES: Readonly<Record<string, number>> = {
  float32: 4,
  int32: 4,
  uint16: 2,
  uint8: 1,
};

function bad(path: string, what: string): never {
  throw new RS_ERR_CLIENT_DECODE(`${path}: ${what}`);
}

function asObject(v: unknown, path: string): Obj {
  if (typeof v !== 'object' || v === null || Array.isArray(v) || ArrayBuffer.isView(v)) {
    bad(path, 'expected an object');
  }
  return v as Obj;
}

function asInt(v: unknown, path: string): number {
  if (typeof v === 'bigint') return Number(v);
  if (typeof v !== 'number' || !Number.isInteger(v)) bad(path, 'expected an integer');
  return v;
}

/** The raw bytes of a packed array's `data`: base64 text (JSON) or a bin (msgpack). */
function packedBytes(data: unknown, path: string): Uint8Array {
  if (typeof data === 'string') return Buffer.from(data, 'base64');
  if (data instanceof Uint8Array) return data;
  return bad(`${path}.data`, 'expected base64 text or bytes');
}

/** A packed array `{data, shape, dtype}` as a typed array of its own (aligned) memory. */
export function decodePackedArray(
  v: unknown,
  path: string,
): Float32Array | Int32Array | Uint8Array | Uint16Array {
  const o = asObject(v, path);
  const dtype = o.dtype;
  const size = typeof dtype === 'string' ? ELEMENT_BYTES[dtype] : undefined;
  if (size === undefined) bad(`${path}.dtype`, `unknown dtype ${String(dtype)}`);
  if (!Array.isArray(o.shape)) bad(`${path}.shape`, 'expected an array');
  let count = 1;
  o.shape.forEach((d, i) => {
    count *= asInt(d, `${path}.shape[${i}]`);
  });
  const bytes = packedBytes(o.data, path);
  if (bytes.length !== count * size) {
    bad(path, `${bytes.length} bytes cannot be ${dtype} of ${count} elements`);
  }
  // A copy, because base64 Buffers and msgpack bins may start at an offset that is not a multiple
  // of the element size, and a typed array view needs one.
  const own = new Uint8Array(bytes.length);
  own.set(bytes);
  if (dtype === 'float32') return new Float32Array(own.buffer);
  if (dtype === 'int32') return new Int32Array(own.buffer);
  if (dtype === 'uint16') return new Uint16Array(own.buffer);
  return own;
}

function expectDtype<T>(
  arr: unknown,
  ctor: abstract new (...a: never[]) => T,
  path: string,
  dtype: string,
): T {
  if (!(arr instanceof ctor)) bad(path, `expected dtype ${dtype}`);
  return arr as T;
}

function intArray(v: unknown, path: string): Int32Array {
  if (Array.isArray(v)) {
    const out = new Int32Array(v.length);
    for (let i = 0; i < v.length; i++) out[i] = asInt(v[i], `${path}[${i}]`);
    return out;
  }
  return expectDtype(decodePackedArray(v, path), Int32Array, path, 'int32');
}

function decodeLogprobs(c: Obj, path: string): Float32Array | null {
  if (c.completion_logprobs !== undefined && c.completion_logprobs !== null) {
    const p = `${path}.completion_logprobs`;
    return expectDtype(decodePackedArray(c.completion_logprobs, p), Float32Array, p, 'float32');
  }
  if (c.logprobs === undefined || c.logprobs === null) return null;
  const content = asObject(c.logprobs, `${path}.logprobs`).content;
  if (!Array.isArray(content)) bad(`${path}.logprobs.content`, 'expected an array');
  const out = new Float32Array(content.length);
  content.forEach((entry, i) => {
    const lp = asObject(entry, `${path}.logprobs.content[${i}]`).logprob;
    if (typeof lp !== 'number') bad(`${path}.logprobs.content[${i}].logprob`, 'expected a number');
    out[i] = lp;
  });
  return out;
}

function decodeMask(v: unknown, path: string): DecodedMask | null {
  if (v === undefined || v === null) return null;
  if (Array.isArray(v)) {
    const counts = new Int32Array(v.length);
    const ids: number[] = [];
    v.forEach((row, i) => {
      const r = intArray(row, `${path}[${i}]`);
      counts[i] = r.length;
      for (const id of r) ids.push(id);
    });
    return { counts, ids: Int32Array.from(ids) };
  }
  const o = asObject(v, path);
  return { ids: intArray(o.ids, `${path}.ids`), counts: intArray(o.counts, `${path}.counts`) };
}

function decodeRouting(v: unknown, path: string): DecodedRouting | null {
  if (v === undefined || v === null) return null;
  const o = asObject(v, path);
  const data = decodePackedArray(o, path);
  if (!(data instanceof Uint8Array || data instanceof Uint16Array))
    bad(path, 'expected uint8 or uint16');
  const shape = o.shape as unknown[];
  if (shape.length !== 3) bad(`${path}.shape`, 'expected [rows, layers, topk]');
  const dims: [number, number, number] = [
    asInt(shape[0], `${path}.shape[0]`),
    asInt(shape[1], `${path}.shape[1]`),
    asInt(shape[2], `${path}.shape[2]`),
  ];
  return { data, shape: dims, start: asInt(o.start, `${path}.start`) };
}

export function decodeChoice(v: unknown, path: string): DecodedChoice {
  const c = asObject(v, path);
  const stop = c.stop_reason;
  if (stop !== null && stop !== undefined && typeof stop !== 'string')
    asInt(stop, `${path}.stop_reason`);
  const finish = c.finish_reason;
  if (finish !== null && finish !== undefined && typeof finish !== 'string') {
    bad(`${path}.finish_reason`, 'expected a string or null');
  }
  return {
    index: asInt(c.index, `${path}.index`),
    finishReason: finish ?? null,
    stopReason:
      typeof stop === 'bigint' ? Number(stop) : ((stop as number | string | undefined) ?? null),
    tokenIds: intArray(c.token_ids, `${path}.token_ids`),
    logprobs: decodeLogprobs(c, path),
    mask: decodeMask(c.sampling_mask, `${path}.sampling_mask`),
    routedExperts: decodeRouting(c.routed_experts, `${path}.routed_experts`),
    weightVersions:
      c.weight_versions === undefined || c.weight_versions === null
        ? null
        : intArray(c.weight_versions, `${path}.weight_versions`),
  };
}

export function decodeUsage(v: unknown, path = 'usage'): DecodedUsage | null {
  if (v === undefined || v === null) return null;
  const u = asObject(v, path);
  const details = u.prompt_tokens_details;
  return {
    promptTokens: asInt(u.prompt_tokens, `${path}.prompt_tokens`),
    completionTokens: asInt(u.completion_tokens, `${path}.completion_tokens`),
    totalTokens: asInt(u.total_tokens, `${path}.total_tokens`),
    cachedTokens:
      details === undefined || details === null
        ? null
        : asInt(
            asObject(details, `${path}.prompt_tokens_details`).cached_tokens,
            `${path}.prompt_tokens_details.cached_tokens`,
          ),
  };
}

/** A parsed response object (from JSON.parse or msgpack unpack), in any of the three forms. */
export function decodeGenerateResponse(v: unknown): GenerateResult {
  const r = asObject(v, 'response');
  if (typeof r.request_id !== 'string') bad('request_id', 'expected a string');
  if (typeof r.model !== 'string') bad('model', 'expected a string');
  if (!Array.isArray(r.choices)) bad('choices', 'expected an array');
  return {
    requestId: r.request_id,
    model: r.model,
    created: asInt(r.created, 'created'),
    choices: r.choices.map((c, i) => decodeChoice(c, `choices[${i}]`)),
    usage: decodeUsage(r.usage),
    promptLogprobs: r.prompt_logprobs ?? null,
    kvTransferParams: r.kv_transfer_params ?? null,
  };
}

/** Decode a response body by its content type: msgpack bytes or JSON text. */
export function decodeGenerateBody(body: Uint8Array, contentType: string): GenerateResult {
  let parsed: unknown;
  try {
    parsed = contentType.includes('msgpack') ? unpack(body) : JSON.parse(utf8.decode(body));
  } catch (err) {
    throw new RS_ERR_CLIENT_DECODE(`body is not valid ${contentType}: ${(err as Error).message}`);
  }
  return decodeGenerateResponse(parsed);
}
