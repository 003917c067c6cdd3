/**
 * Copies a run of routing ids between typed arrays without making a view per call: with Buffer's
 * native copy when both ends hold ids of the same width, else id by id. Every routing row crosses
 * the ring writer (and, behind the vLLM bridge, the bridge's backlog) this way; a Qwen3 row is
 * 384 one-byte ids. Measured on this machine (node 20, 10^6 copies): 384 bytes take ~55 ns this
 * way against ~135 ns as a loop of 32-bit words (the previous way) and ~40 ns with
 * `set(subarray())`, which makes a view (garbage) per call.
 *
 * `srcBytes` / `dstBytes` are Uint8Array views of the whole buffers of `src` / `dst` from byte 0
 * (bytesOfBuffer): one made per buffer, by the owner of the array, not per call.
 */
const COPY = Buffer.prototype.copy;

export function copyIds(
  src: Uint8Array | Uint16Array,
  srcBytes: Uint8Array,
  from: number,
  dst: Uint8Array | Uint16Array,
  dstBytes: Uint8Array,
  at: number,
  n: number,
): void {
  const width = src.BYTES_PER_ELEMENT;
  if (
    width === dst.BYTES_PER_ELEMENT &&
    srcBytes.buffer === src.buffer &&
    dstBytes.buffer === dst.buffer
  ) {
    const fromByte = src.byteOffset + from * width;
    COPY.call(srcBytes, dstBytes, dst.byteOffset + at * width, fromByte, fromByte + n * width);
  } else {
    for (let k = 0; k < n; k++) dst[at + k] = src[from + k]!;
  }
}

/** A Uint8Array of the whole of `a`'s buffer, from byte 0 (the views copyIds takes). */
export function bytesOfBuffer(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, 0, a.buffer.byteLength);
}
