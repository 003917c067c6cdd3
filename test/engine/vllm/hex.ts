/**
 * Hand assembly of msgpack bytes from the spec (msgpack/spec.md), independent of the codec under
 * test: each helper returns hex for one value of one msgpack format.
 */

/** fixstr (< 32 bytes) of ASCII text. */
export function s(text: string): string {
  if (text.length >= 32) throw new Error('fixstr only');
  return (0xa0 | text.length).toString(16) + Buffer.from(text, 'latin1').toString('hex');
}

/** float64: 0xcb + 8 bytes big-endian. */
export function f64(x: number): string {
  const b = Buffer.alloc(8);
  b.writeDoubleBE(x);
  return `cb${b.toString('hex')}`;
}

/** Little-endian bytes of int32 values (numpy '<i4'). */
export function i32le(...values: number[]): string {
  const b = Buffer.alloc(values.length * 4);
  for (const [i, v] of values.entries()) b.writeInt32LE(v, i * 4);
  return b.toString('hex');
}

/** Little-endian bytes of float32 values (numpy '<f4'). */
export function f32le(...values: number[]): string {
  const b = Buffer.alloc(values.length * 4);
  for (const [i, v] of values.entries()) b.writeFloatLE(v, i * 4);
  return b.toString('hex');
}

/** Joins hex pieces (spaces allowed) into bytes. */
export function hex(...parts: string[]): Buffer {
  return Buffer.from(parts.join('').replace(/\s+/g, ''), 'hex');
}
