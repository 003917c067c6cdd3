/**
 * Integer hashing for the simulator and the answers the API server scripts for it
 * (src/server/main/openai/sim-answer.ts). Everything random in the engine is a hash of what it
 * depends on (never Math.random), so any output can be recomputed from its inputs: after a
 * preemption, in another batch, in another process.
 *
 * Hashes are int32, not uint32: an int32 is a Smi in V8 (x64 Node), while a uint32 above 2^31 is a
 * heap-allocated number wherever it crosses a call boundary or lands in an untyped slot. Measured:
 * returning uint32 here cost ~80 bytes of garbage per generated token. Use `h >>> 0` locally
 * where an unsigned value is needed (modulo), and Int32Array to store hashes.
 */

/** lowbias32 (Chris Wellons' hash-prospector): a full-avalanche 32-bit finaliser. */
export function mix32(x: number): number {
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d);
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b);
  x ^= x >>> 16;
  return x | 0;
}

/** Folds one 32-bit value into a running hash. Order-sensitive, so it serves as a rolling hash. */
export function combine(h: number, v: number): number {
  // `| 0` keeps the argument an int32: a sum past 2^31 would be boxed on a non-inlined call.
  return mix32(((h ^ Math.imul(v, 0x9e3779b1)) + 0x6a09e667) | 0);
}

/** 2^-32: maps a uint32 onto [0, 1). */
export const UINT32_TO_UNIT = 2.3283064365386963e-10;

/** A uniform double in [0, 1) from a 32-bit hash. */
export function unitFloat(h: number): number {
  return (h >>> 0) * UINT32_TO_UNIT;
}

/** A uniform double in (0, 1], safe to take the log of. */
export function unitFloatOpen(h: number): number {
  return ((h >>> 0) + 1) * UINT32_TO_UNIT;
}

const TWO_POW_32 = 4294967296;

/** Low 32 bits of a safe integer (negative seeds wrap like two's complement), as int32. */
export function low32(n: number): number {
  const r = n % TWO_POW_32;
  return (r < 0 ? r + TWO_POW_32 : r) | 0;
}

/** High bits of a safe integer above the low 32, as int32. */
export function high32(n: number): number {
  return Math.floor(n / TWO_POW_32) | 0;
}

/** A 32-bit key for a 53-bit seed: both halves avalanche into it. */
export function seedKey(seed: number): number {
  return combine(mix32(low32(seed) ^ 0x5bd1e995), high32(seed));
}

/** FNV-1a over UTF-16 code units, then mixed: for short strings such as a cache salt. */
export function hashString(s: string, seed: number): number {
  let h = 0x811c9dc5 ^ seed;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return mix32(h);
}
