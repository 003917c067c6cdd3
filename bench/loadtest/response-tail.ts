/**
 * The load generator must not decode the responses it counts (decoding a multi-megabyte answer on
 * its event loop would throttle the very load it generates), yet it needs each answer's token count.
 * `usage` sits at the end of every generate answer, in all three forms, so the generator keeps the
 * last TAIL_BYTES of each body in a reused buffer and reads `completion_tokens` from there.
 */

export const TAIL_BYTES = 512;

const KEY = Buffer.from('completion_tokens');
/** msgpack fixstr header of the 17-byte key. */
const FIXSTR_17 = 0xa0 | KEY.length;

/** The last TAIL_BYTES bytes of a body, fed chunk by chunk; one per in-flight request, reused. */
export class BodyTail {
  readonly #buf = Buffer.alloc(TAIL_BYTES);
  #len = 0;

  reset(): void {
    this.#len = 0;
  }

  push(chunk: Uint8Array): void {
    const buf = this.#buf;
    if (chunk.length >= TAIL_BYTES) {
      buf.set(chunk.subarray(chunk.length - TAIL_BYTES));
      this.#len = TAIL_BYTES;
      return;
    }
    const keep = Math.min(this.#len, TAIL_BYTES - chunk.length);
    buf.copyWithin(0, this.#len - keep, this.#len);
    buf.set(chunk, keep);
    this.#len = keep + chunk.length;
  }

  /** The tail's bytes (a view, valid until the next push or reset). */
  bytes(): Buffer {
    return this.#buf.subarray(0, this.#len);
  }
}

/** `usage.completion_tokens` read from a JSON body's tail, or -1 when it is not there. */
export function completionTokensJson(tail: Buffer): number {
  const at = tail.lastIndexOf(KEY);
  if (at < 1 || tail[at - 1] !== 0x22 || tail[at + KEY.length] !== 0x22) return -1;
  let i = at + KEY.length + 1;
  while (tail[i] === 0x20) i++;
  if (tail[i] !== 0x3a) return -1;
  i++;
  while (tail[i] === 0x20) i++;
  let value = 0;
  let digits = 0;
  for (let ch = tail[i]; ch !== undefined && ch >= 0x30 && ch <= 0x39; ch = tail[++i]) {
    value = value * 10 + (ch - 0x30);
    digits++;
  }
  return digits > 0 ? value : -1;
}

/** `usage.completion_tokens` read from a msgpack body's tail, or -1 when it is not there. */
export function completionTokensMsgpack(tail: Buffer): number {
  const at = tail.lastIndexOf(KEY);
  if (at < 1 || tail[at - 1] !== FIXSTR_17) return -1;
  const i = at + KEY.length;
  const tag = tail[i];
  if (tag === undefined) return -1;
  if (tag < 0x80) return tag;
  const need = tag === 0xcc ? 1 : tag === 0xcd ? 2 : tag === 0xce ? 4 : tag === 0xcf ? 8 : 0;
  if (need === 0 || i + 1 + need > tail.length) return -1;
  if (need === 1) return tail.readUInt8(i + 1);
  if (need === 2) return tail.readUInt16BE(i + 1);
  if (need === 4) return tail.readUInt32BE(i + 1);
  return Number(tail.readBigUInt64BE(i + 1));
}
