/**
 * kv_transfer_params on vLLM's wire (docs/vllm-protocol.md, "Prefill/decode"): a request's sit in
 * `SamplingParams.extra_args["kv_transfer_params"]` (EngineCoreRequest has no field for them), an
 * engine's answer in EngineCoreOutput.kv_transfer_params. Both are a dict[str, Any], one msgpack
 * map, which the bridge carries as bytes (unchanged) and the headless engine reads as a value.
 * Per request, never per token.
 */
import { RS_ERR_VLLM_BAD_FIELD } from '../../errors.js';
import { MAX_KV_PARAMS_BYTES } from '../../wire/messages.js';
import { MsgReader } from './msgpack-reader.js';
import { MsgWriter } from './msgpack-writer.js';
import { writeAny } from './values.js';

/** A msgpack map's first byte (fixmap, map16, map32). */
export function isMapByte(b: number): boolean {
  return (b & 0xf0) === 0x80 || b === 0xde || b === 0xdf;
}

/** Reads a map-or-nil value at the reader's position as a copy of its bytes (nil: null). */
export function readKvParamsBytes(r: MsgReader, field: string): Uint8Array | null {
  if (r.nil(field)) return null;
  const at = r.pos;
  if (!isMapByte(r.peek(field))) r.fail(field, 'expected a map or nil');
  r.skip(field);
  return Uint8Array.prototype.slice.call(r.buf, at, r.pos);
}

/**
 * The value of kv_transfer_params bytes: one map of str keys and plain values (an ext type, which
 * vLLM's decoder could refuse, is an error: an ADD that fails to decode ends vLLM's input thread),
 * at most MAX_KV_PARAMS_BYTES. Throws RS_ERR_VLLM_BAD_FIELD naming `field`.
 */
export function decodeKvParams(bytes: Uint8Array, field: string): Record<string, unknown> {
  if (!(bytes instanceof Uint8Array) || bytes.length > MAX_KV_PARAMS_BYTES) {
    throw new RS_ERR_VLLM_BAD_FIELD(field, `must be at most ${MAX_KV_PARAMS_BYTES} bytes`);
  }
  let value: unknown;
  try {
    const r = new MsgReader().reset(bytes);
    value = r.any(field);
    r.done(field);
  } catch (error) {
    throw new RS_ERR_VLLM_BAD_FIELD(field, `not one msgpack map: ${(error as Error).message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new RS_ERR_VLLM_BAD_FIELD(field, 'must be a map');
  }
  return value as Record<string, unknown>;
}

/** Throws RS_ERR_VLLM_BAD_FIELD unless `bytes` are valid kv_transfer_params (decodeKvParams). */
export function checkKvParams(bytes: Uint8Array, field: string): void {
  decodeKvParams(bytes, field);
}

/** A plain map as kv_transfer_params bytes (an integral number as an int, as Python sends it). */
export function encodeKvParams(value: Readonly<Record<string, unknown>>): Uint8Array {
  const w = new MsgWriter(256);
  writeAny(w, value, 'kv_transfer_params');
  return w.toBuffer();
}
