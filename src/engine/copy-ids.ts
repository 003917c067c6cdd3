/**
 * Copies a run of routing ids between typed arrays without making a view per call: as 32-bit
 * words when both ends and the length are word-aligned, else id by id. Every routing row crosses
 * the ring writer (and, behind the vLLM bridge, the bridge's backlog) this way; a Qwen3 row is
 * 384 one-byte ids, 96 words. Profiled under `npm run bench:bridge`, the byte loops were ~23% of
 * the bridge process (bridge-backlog copyRow) and ~8-10% of the engine process (#writeServer).
 *
 * `srcWords` / `dstWords` are Int32Array views of the whole buffers of `src` / `dst` from byte 0
 * (Int32, not Uint32: words past 2^31 stay small integers in V8 and their bits are copied as is).
 */
export function copyIds(
  src: Uint8Array | Uint16Array,
  srcWords: Int32Array,
  from: number,
  dst: Uint8Array | Uint16Array,
  dstWords: Int32Array,
  at: number,
  n: number,
): void {
  const width = src.BYTES_PER_ELEMENT;
  const fromByte = src.byteOffset + from * width;
  const atByte = dst.byteOffset + at * width;
  const bytes = n * width;
  if (
    width === dst.BYTES_PER_ELEMENT &&
    ((fromByte | atByte | bytes) & 3) === 0 &&
    srcWords.buffer === src.buffer &&
    dstWords.buffer === dst.buffer
  ) {
    const s = fromByte >> 2;
    const d = atByte >> 2;
    const words = bytes >> 2;
    for (let w = 0; w < words; w++) dstWords[d + w] = srcWords[s + w]!;
  } else {
    for (let k = 0; k < n; k++) dst[at + k] = src[from + k]!;
  }
}

/** An Int32Array of every whole word of `a`'s buffer, from byte 0 (the views copyIds takes). */
export function wordsOf(a: ArrayBufferView): Int32Array {
  return new Int32Array(a.buffer, 0, a.buffer.byteLength >> 2);
}
