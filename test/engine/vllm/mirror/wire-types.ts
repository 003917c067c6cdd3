/**
 * Type checks for decoded msgpack values, as strict as msgspec's decoder (its docs, "Supported
 * Types"): an int passes where a float is wanted, a float never passes for an int, a bool is
 * neither. Every failure names the field path, so a test says which field ringserve got wrong.
 */
import { Ext, MsgFloat } from './msgpack.js';

export class MirrorDecodeError extends Error {
  constructor(
    readonly where: string,
    message: string,
  ) {
    super(`${where}: ${message}`);
    this.name = 'MirrorDecodeError';
  }
}

/** A decoded msgpack map: a plain object (the decoder makes no other kind). */
function isMap(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && v.constructor === Object;
}

function kind(v: unknown): string {
  if (v === null) return 'nil';
  if (v instanceof MsgFloat) return 'float';
  if (typeof v === 'number' || typeof v === 'bigint') return 'int';
  if (typeof v === 'boolean') return 'bool';
  if (typeof v === 'string') return 'str';
  if (Buffer.isBuffer(v)) return 'bin';
  if (v instanceof Ext) return 'ext';
  if (Array.isArray(v)) return 'array';
  if (isMap(v)) return 'map';
  return typeof v;
}

function fail(where: string, want: string, v: unknown): never {
  throw new MirrorDecodeError(where, `expected ${want}, got ${kind(v)}`);
}

/** An int that fits a JS number exactly. */
export function int(v: unknown, where: string): number {
  if (typeof v === 'number') return v;
  if (typeof v === 'bigint') {
    throw new MirrorDecodeError(where, `int ${v} is past 2^53 where a small int is expected`);
  }
  return fail(where, 'int', v);
}

/** Any int, as a bigint (utility call ids: uint64 or negative). */
export function bigInt(v: unknown, where: string): bigint {
  if (typeof v === 'number' || typeof v === 'bigint') return BigInt(v);
  return fail(where, 'int', v);
}

/** A float; an int is accepted, as msgspec accepts one for a float field. */
export function float(v: unknown, where: string): number {
  if (v instanceof MsgFloat) return v.value;
  if (typeof v === 'number') return v;
  return fail(where, 'float', v);
}

export function str(v: unknown, where: string): string {
  return typeof v === 'string' ? v : fail(where, 'str', v);
}

export function bool(v: unknown, where: string): boolean {
  return typeof v === 'boolean' ? v : fail(where, 'bool', v);
}

export function array(v: unknown, where: string): unknown[] {
  return Array.isArray(v) ? v : fail(where, 'array', v);
}

export function map(v: unknown, where: string): Record<string, unknown> {
  return isMap(v) ? v : fail(where, 'map', v);
}

/** `check(v)` unless v is nil. */
export function nullable<T>(
  check: (v: unknown, where: string) => T,
): (v: unknown, where: string) => T | null {
  return (v, where) => (v === null ? null : check(v, where));
}

export function arrayOf<T>(
  check: (v: unknown, where: string) => T,
): (v: unknown, where: string) => T[] {
  return (v, where) => array(v, where).map((x, i) => check(x, `${where}[${i}]`));
}

/** A str -> str map (trace_headers). */
export function strMap(v: unknown, where: string): Record<string, string> {
  const m = map(v, where);
  for (const [k, x] of Object.entries(m)) str(x, `${where}.${k}`);
  return m as Record<string, string>;
}

/** A decoded value with every MsgFloat turned into a number: for maps passed through untouched. */
export function plain(v: unknown): unknown {
  if (v instanceof MsgFloat) return v.value;
  if (Array.isArray(v)) return v.map(plain);
  if (isMap(v)) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) {
      Object.defineProperty(out, k, {
        value: plain(x),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return out;
  }
  return v;
}

/** A map, its values plain. */
export function plainMap(v: unknown, where: string): Record<string, unknown> {
  return plain(map(v, where)) as Record<string, unknown>;
}
