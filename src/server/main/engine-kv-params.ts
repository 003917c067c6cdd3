/**
 * kv_transfer_params as bytes on the rings (wire/messages.ts), for an engine that takes them
 * itself (`--engine vllm`: the bridge hands them to vLLM's KV connector unchanged and brings its
 * answer back). One msgpack map each way, at most MAX_KV_PARAMS_BYTES; per request, on the main
 * thread, never per token.
 */
import { unpack } from 'msgpackr';
import { RS_ERR_ENGINE_REQUEST_FAILED } from '../../errors.js';
import { checkFreeForm, fail } from '../../protocol/fields.js';
import { MsgpackWriter } from '../../protocol/msgpack-writer.js';
import { MAX_KV_PARAMS_BYTES } from '../../wire/messages.js';

/** A request's kv_transfer_params (checked free-form) as the ADD's bytes; too large is a 400. */
export function encodeKvParams(value: Readonly<Record<string, unknown>>): Uint8Array {
  const bytes = new MsgpackWriter(512).value(value).finish();
  if (bytes.length > MAX_KV_PARAMS_BYTES) {
    fail(
      'kv_transfer_params',
      `encodes to ${bytes.length} bytes of msgpack, more than the ${MAX_KV_PARAMS_BYTES} an engine is handed`,
    );
  }
  return bytes;
}

/**
 * The value of the bytes an engine answered: a map of JSON's types (checkFreeForm's rules: an
 * integer of 64 bits that fits 2^53 becomes a number), or RS_ERR_ENGINE_REQUEST_FAILED naming why
 * it is not one (the request fails: its answer could not carry them).
 */
export function decodeKvParams(bytes: Uint8Array, requestId: string): Record<string, unknown> {
  try {
    const value = checkFreeForm(unpack(bytes), 'kv_transfer_params');
    if (value === null || typeof value !== 'object' || Array.isArray(value))
      throw new Error('not a map');
    return value as Record<string, unknown>;
  } catch (error) {
    throw new RS_ERR_ENGINE_REQUEST_FAILED(
      requestId,
      `the engine's kv_transfer_params do not decode to a JSON object (${(error as Error).message})`,
    );
  }
}
