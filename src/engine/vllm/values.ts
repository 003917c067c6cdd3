import { RS_ERR_VLLM_BAD_FIELD } from '../../errors.js';
import type { MsgReader } from './msgpack-reader.js';
import type { MsgWriter } from './msgpack-writer.js';

/**
 * Free-form values (utility call arguments and results, kv_transfer_params) as msgpack: JSON-like
 * data, an integral number going out as an int, a bigint as a 64-bit int. Cold path only.
 */
export function writeAny(w: MsgWriter, value: unknown, field: string): void {
  if (value === null || value === undefined) w.nil();
  else if (typeof value === 'boolean') w.bool(value);
  else if (typeof value === 'number') {
    if (Number.isSafeInteger(value)) w.int(value, field);
    else w.float(value);
  } else if (typeof value === 'bigint') w.bigInt(value, field);
  else if (typeof value === 'string') w.str(value);
  else if (Array.isArray(value)) {
    w.arrayHeader(value.length);
    for (let i = 0; i < value.length; i++) writeAny(w, value[i], `${field}[${i}]`);
  } else if (typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    const entries = Object.entries(value as Record<string, unknown>);
    w.mapHeader(entries.length);
    for (const [k, v] of entries) {
      w.str(k);
      writeAny(w, v, `${field}.${k}`);
    }
  } else {
    throw new RS_ERR_VLLM_BAD_FIELD(field, `cannot encode a ${typeof value}`);
  }
}

/** An array of free-form values (a tuple in vLLM's Python). */
export function readAnyArgs(r: MsgReader, field: string): unknown[] {
  const out: unknown[] = [];
  for (let n = r.arrayHeader(field); n > 0; n--) out.push(r.any(field));
  return out;
}
