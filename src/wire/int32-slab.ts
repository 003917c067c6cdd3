/**
 * Small Int32Arrays carved from shared slabs, as Node's Buffer.allocUnsafe carves small Buffers from
 * an 8 KiB pool. V8 keeps the memory of a typed array over 64 bytes outside its heap, and creating
 * one with a buffer of its own costs 1-5 us of CPU on the development machine (an allocation, the
 * buffer's bookkeeping, the external-memory accounting that paces the garbage collector), against
 * ~50 ns for a view of an existing buffer. A short request made several: its prompt on each side
 * of the request ring (the API server's parse, the engine's read), the simulator's token and block
 * tables.
 *
 * A slab is a plain ArrayBuffer that the garbage collector frees once no array carved from it is
 * reachable; a range is never handed out twice, so an array is zero-filled and its own. The cost is
 * that a long-lived array keeps its whole slab: only arrays of at most MAX_CARVED_INTS are carved
 * (a longer one gets its own buffer, whose cost is small next to filling it), so what one array can
 * keep alive beyond itself is bounded by SLAB_INTS (16 KiB).
 */

/** A slab's length in ints (16 KiB). */
export const SLAB_INTS = 4096;
/** The longest array carved from a slab (4 KiB); longer ones get a buffer of their own. */
export const MAX_CARVED_INTS = SLAB_INTS >> 2;

let slab = new Int32Array(SLAB_INTS);
let used = 0;

/** A zero-filled Int32Array of `length` ints: a view of a shared slab when it is short. */
export function int32Array(length: number): Int32Array {
  if (length > MAX_CARVED_INTS) return new Int32Array(length);
  if (used + length > SLAB_INTS) {
    slab = new Int32Array(SLAB_INTS);
    used = 0;
  }
  const out = slab.subarray(used, used + length);
  used += length;
  return out;
}

/** A copy of `src[from, to)` in an array from int32Array(). */
export function int32Copy(src: Int32Array, from: number, to: number): Int32Array {
  const out = int32Array(to - from);
  out.set(src.subarray(from, to));
  return out;
}
