/**
 * Hand assembly of expected bytes for the byte-level tests: hex text, spaces and comments-free,
 * plus the little-endian scalars numpy writes. Independent of the encoder under test.
 */

/** Joins hex pieces (whitespace allowed) into bytes. */
export function hex(...parts: string[]): Buffer {
  return Buffer.from(parts.join('').replace(/\s+/g, ''), 'hex');
}

/** fixstr (< 32 bytes) of ASCII text. */
export function fixstr(text: string): string {
  if (text.length >= 32) throw new Error('fixstr holds < 32 bytes');
  return (0xa0 | text.length).toString(16) + Buffer.from(text, 'latin1').toString('hex');
}

/** float64: 0xcb and 8 bytes big-endian. */
export function f64hex(x: number): string {
  const b = Buffer.alloc(8);
  b.writeDoubleBE(x);
  return `cb${b.toString('hex')}`;
}

function le(
  width: number,
  write: (b: Buffer, v: number, at: number) => void,
  vs: number[],
): string {
  const b = Buffer.alloc(vs.length * width);
  for (const [i, v] of vs.entries()) write(b, v, i * width);
  return b.toString('hex');
}

export const i32le = (...vs: number[]) => le(4, (b, v, at) => b.writeInt32LE(v, at), vs);
export const i64le = (...vs: number[]) => le(8, (b, v, at) => b.writeBigInt64LE(BigInt(v), at), vs);
export const f32le = (...vs: number[]) => le(4, (b, v, at) => b.writeFloatLE(v, at), vs);
