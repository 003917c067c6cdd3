/**
 * Standard padded base64 (RFC 4648 §4) of the raw bytes of a typed-array view, written straight into
 * a target byte buffer. Node can only produce base64 as a JS string (`buf.toString('base64')`), which
 * for a 12k-token routing array would be a multi-megabyte string made only to be copied again; this
 * encoder writes the ASCII bytes in place instead.
 *
 * The loop takes 12 input bytes (three big-endian 32-bit reads) to 16 output characters (four
 * 32-bit little-endian writes), looking each 12-bit half of a 3-byte group up in a table of
 * character pairs. Measured on the 2-core dev VM (Node 20, 16 MiB input): 1.8-1.9 GB/s, against
 * 0.6-0.8 GB/s for a byte-at-a-time loop and 2.7 GB/s for Node's native encoder plus copying
 * its string into the buffer.
 */

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const PAD = 0x3d; // '='

/** ASCII codes of the 64 characters. */
const CHAR = new Uint8Array(64);
/** PAIR[v]: the two characters of a 12-bit value v, first one in the low byte. */
const PAIR = new Uint16Array(4096);
for (let i = 0; i < 64; i++) CHAR[i] = ALPHABET.charCodeAt(i);
for (let v = 0; v < 4096; v++)
  PAIR[v] = (CHAR[v >>> 6] as number) | ((CHAR[v & 63] as number) << 8);

/** The four characters of a 24-bit group, as a little-endian 32-bit word. */
function quad(group: number): number {
  return (PAIR[group >>> 12] as number) | ((PAIR[group & 0xfff] as number) << 16);
}

/** Bytes of the base64 text of `byteLength` raw bytes (padded to a multiple of 4). */
export function base64Length(byteLength: number): number {
  return Math.ceil(byteLength / 3) * 4;
}

/** A Uint8Array over exactly the bytes of a view (no copy; works on SharedArrayBuffer views). */
export function bytesOf(view: ArrayBufferView): Uint8Array {
  return view instanceof Uint8Array
    ? view
    : new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/**
 * Write the base64 of `view`'s bytes into `target` at `offset`; returns the bytes written
 * (= base64Length(view.byteLength)). The caller makes room first; writing past the end throws.
 */
export function encodeBase64Into(
  view: ArrayBufferView,
  target: Uint8Array,
  offset: number,
): number {
  const src = bytesOf(view);
  const n = src.length;
  const written = base64Length(n);
  if (offset < 0 || offset + written > target.length) {
    throw new RangeError(
      `base64 of ${n} bytes needs ${written} bytes at ${offset}, target has ${target.length}`,
    );
  }
  const out = new DataView(target.buffer, target.byteOffset, target.byteLength);
  const words = new DataView(src.buffer, src.byteOffset, src.byteLength);
  const blocks = n - (n % 12);
  let o = offset;
  let i = 0;
  for (; i < blocks; i += 12) {
    const a = words.getUint32(i);
    const b = words.getUint32(i + 4);
    const c = words.getUint32(i + 8);
    out.setUint32(o, quad(a >>> 8), true);
    out.setUint32(o + 4, quad(((a & 0xff) << 16) | (b >>> 16)), true);
    out.setUint32(o + 8, quad(((b & 0xffff) << 8) | (c >>> 24)), true);
    out.setUint32(o + 12, quad(c & 0xffffff), true);
    o += 16;
  }
  const whole = n - (n % 3);
  for (; i < whole; i += 3) {
    out.setUint32(
      o,
      quad(((src[i] as number) << 16) | ((src[i + 1] as number) << 8) | (src[i + 2] as number)),
      true,
    );
    o += 4;
  }
  writeTail(src, i, n - i, target, o);
  return written;
}

/** The last 1 or 2 bytes, padded with '='. */
function writeTail(src: Uint8Array, i: number, rest: number, target: Uint8Array, o: number): void {
  if (rest === 0) return;
  const b0 = src[i] as number;
  const b1 = rest === 2 ? (src[i + 1] as number) : 0;
  target[o] = CHAR[b0 >>> 2] as number;
  target[o + 1] = CHAR[((b0 & 3) << 4) | (b1 >>> 4)] as number;
  target[o + 2] = rest === 2 ? (CHAR[(b1 & 15) << 2] as number) : PAD;
  target[o + 3] = PAD;
}
