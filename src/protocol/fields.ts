import { RS_ERR_REQ_INVALID_FIELD } from '../errors.js';

/**
 * Typed readers for one field of a parsed request body (JSON or msgpack, so plain JS values).
 * Each returns the default for an absent or null field, the value when it has the right type and
 * range, and otherwise throws RS_ERR_REQ_INVALID_FIELD (400) naming the field path. The path is
 * only built on failure, so a valid request costs no string work.
 */

export type Body = Readonly<Record<string, unknown>>;

/** A short, safe rendering of a bad value for an error message. */
export function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}...` : value);
    case 'number':
    case 'bigint':
    case 'boolean':
      return String(value);
    case 'object':
      return 'an object';
    default:
      return typeof value;
  }
}

export function fieldPath(prefix: string, key: string): string {
  return prefix === '' ? key : `${prefix}.${key}`;
}

export function fail(path: string, message: string): never {
  throw new RS_ERR_REQ_INVALID_FIELD(path, message);
}

export function isPlainObject(value: unknown): value is Body {
  return (
    typeof value === 'object' &&
    value !== null &&
    !Array.isArray(value) &&
    !ArrayBuffer.isView(value)
  );
}

export function optBool(obj: Body, prefix: string, key: string, dflt: boolean): boolean {
  const v = obj[key];
  if (v === undefined || v === null) return dflt;
  if (typeof v !== 'boolean')
    fail(fieldPath(prefix, key), `must be a boolean, got ${describeValue(v)}`);
  return v;
}

/** A boolean whose absence is kept as null (the server default then applies). */
export function optBoolOrNull(obj: Body, prefix: string, key: string): boolean | null {
  const v = obj[key];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'boolean')
    fail(fieldPath(prefix, key), `must be a boolean, got ${describeValue(v)}`);
  return v;
}

/**
 * A finite number in [min, max]; `minOpen` makes the lower bound exclusive. Integers arriving as
 * msgpack int64 are bigints (msgpackr's default), so those are accepted when they are exact.
 */
export function optNumber(
  obj: Body,
  prefix: string,
  key: string,
  dflt: number,
  min: number,
  max: number,
  minOpen = false,
): number {
  let v = obj[key];
  if (v === undefined || v === null) return dflt;
  if (typeof v === 'bigint') v = bigintToSafeNumber(v);
  if (typeof v === 'bigint') fail(fieldPath(prefix, key), `must be in [${min}, ${max}], got ${v}`);
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    fail(fieldPath(prefix, key), `must be a number, got ${describeValue(obj[key])}`);
  }
  if (v > max || v < min || (minOpen && v === min)) {
    const lower = minOpen ? '>' : '>=';
    const range =
      max === Number.POSITIVE_INFINITY
        ? `${lower} ${min}`
        : `in ${minOpen ? '(' : '['}${min}, ${max}]`;
    fail(fieldPath(prefix, key), `must be ${range}, got ${v}`);
  }
  return v;
}

/** An integer in [min, max]. */
export function optInt(
  obj: Body,
  prefix: string,
  key: string,
  dflt: number,
  min: number,
  max: number,
): number {
  let v = obj[key];
  if (v === undefined || v === null) return dflt;
  if (typeof v === 'bigint') v = bigintToSafeNumber(v);
  if (typeof v === 'bigint') fail(fieldPath(prefix, key), `must be in [${min}, ${max}], got ${v}`);
  if (typeof v !== 'number' || !Number.isInteger(v)) {
    fail(fieldPath(prefix, key), `must be an integer, got ${describeValue(obj[key])}`);
  }
  if (v > max || v < min) fail(fieldPath(prefix, key), `must be in [${min}, ${max}], got ${v}`);
  return v;
}

/** A string of minLen..maxLen UTF-16 units, or null when absent. */
export function optString(
  obj: Body,
  prefix: string,
  key: string,
  minLen: number,
  maxLen: number,
): string | null {
  const v = obj[key];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string')
    fail(fieldPath(prefix, key), `must be a string, got ${describeValue(v)}`);
  if (v.length < minLen || v.length > maxLen) {
    fail(fieldPath(prefix, key), `must be ${minLen}..${maxLen} characters long, got ${v.length}`);
  }
  return v;
}

/** A bigint that is exactly a safe integer becomes a number; anything else stays out of range. */
function bigintToSafeNumber(v: bigint): number | bigint {
  return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)
    ? Number(v)
    : v;
}

/** An element of an integer array: the same rules as optInt, for `token_ids[3]`-style paths. */
export function intElement(
  v: unknown,
  prefix: string,
  key: string,
  index: number,
  min: number,
  maxExclusive: number,
): number {
  let n = v;
  if (typeof n === 'bigint') n = bigintToSafeNumber(n);
  if (typeof n === 'number' && Number.isInteger(n) && n >= min && n < maxExclusive) return n;
  const path = `${fieldPath(prefix, key)}[${index}]`;
  if (typeof n === 'bigint') fail(path, `must be in [${min}, ${maxExclusive}), got ${n}`);
  if (typeof n !== 'number' || !Number.isInteger(n)) {
    fail(path, `must be an integer, got ${describeValue(v)}`);
  }
  return fail(path, `must be in [${min}, ${maxExclusive}), got ${n}`);
}

/** `stream_options` of a generate or OpenAI body (vLLM's fields); an error without `stream`. */
export function readStreamOptions(
  body: Body,
  stream: boolean,
): { includeUsage: boolean; continuousUsageStats: boolean } {
  const so = body.stream_options;
  if (so === undefined || so === null) return { includeUsage: false, continuousUsageStats: false };
  if (!isPlainObject(so)) fail('stream_options', `must be an object, got ${describeValue(so)}`);
  // As vLLM: stream options without streaming are a client mistake worth saying so.
  if (!stream) fail('stream_options', 'is only allowed when stream is true');
  return {
    includeUsage: optBool(so, 'stream_options', 'include_usage', false),
    continuousUsageStats: optBool(so, 'stream_options', 'continuous_usage_stats', false),
  };
}

/** How deep a free-form value may nest (vLLM's own bodies nest a handful of levels). */
export const FREE_FORM_MAX_DEPTH = 32;
/** How many values (containers and leaves) a free-form value may hold. */
export const FREE_FORM_MAX_NODES = 10_000;

/**
 * Checks a free-form value the server carries or hands on (`kv_transfer_params`, a chat template's
 * kwargs, tool schemas) before any engine work: at most FREE_FORM_MAX_DEPTH deep and
 * FREE_FORM_MAX_NODES values, made of JSON's types (msgpack binary is kept as a leaf). A msgpack
 * integer within 2^53 arrives as a bigint and becomes a number in place; one beyond is refused, as
 * are NaN, infinities and extension types, which no JSON answer could carry back. The walk is
 * iterative, so no nesting can exhaust the stack; a failure names the path of the value. Returns
 * the value as checked (a bigint root becomes its number).
 */
export function checkFreeForm(value: unknown, path: string): unknown {
  // The value sits in a holder of its own, so the root is checked as any member is.
  const root: Record<string, unknown> = { [path]: value };
  const containers: unknown[] = [root];
  const paths: string[] = [''];
  const depths: number[] = [0];
  let nodes = 0;
  while (containers.length > 0) {
    const at = containers.pop();
    const atPath = paths.pop() as string;
    const depth = depths.pop() as number;
    if (depth > FREE_FORM_MAX_DEPTH) fail(path, `nests deeper than ${FREE_FORM_MAX_DEPTH} levels`);
    const holder = at as Record<string, unknown>;
    const keys: readonly string[] | null = Array.isArray(at) ? null : Object.keys(holder);
    const count = keys === null ? (at as unknown[]).length : keys.length;
    for (let i = 0; i < count; i++) {
      if (++nodes > FREE_FORM_MAX_NODES)
        fail(path, `holds more than ${FREE_FORM_MAX_NODES} values`);
      const key = keys === null ? i : (keys[i] as string);
      const v = holder[key as string];
      if (v === null || typeof v === 'boolean' || typeof v === 'string') continue;
      const memberPath = (): string =>
        keys === null ? `${atPath}[${key}]` : fieldPath(atPath, key as string);
      if (typeof v === 'number') {
        if (!Number.isFinite(v)) fail(memberPath(), `must be a finite number, got ${v}`);
      } else if (typeof v === 'bigint') {
        const n = bigintToSafeNumber(v);
        if (typeof n === 'bigint') {
          fail(memberPath(), `integers must be within +-2^53 to be carried back in JSON, got ${v}`);
        }
        holder[key as string] = n;
      } else if (ArrayBuffer.isView(v)) {
        // msgpack binary: a leaf, carried as bytes.
      } else if (Array.isArray(v) || isRecord(v)) {
        containers.push(v);
        paths.push(memberPath());
        depths.push(depth + 1);
      } else {
        fail(memberPath(), `must be a JSON value, got ${describeValue(v)}`);
      }
    }
  }
  return root[path];
}

/** An object of JSON's kind: no class instance (a msgpack timestamp's Date, a Map). */
function isRecord(v: unknown): boolean {
  if (typeof v !== 'object' || v === null) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}
