import { base64Length, encodeBase64Into } from './base64.js';
import { ByteWriter, checkPacked, type PackedDtype, type PackedView } from './byte-writer.js';
import { MAX_NUMBER_TEXT, writeFloat32Text, writeIntText } from './number-text.js';
import { sequenceAt } from './utf8.js';

/**
 * Builds a JSON document as bytes, without JS objects: the caller writes the punctuation and keys
 * with raw(), values with the typed methods. Per-token arrays go through intArray() and
 * packedArray(), which loop over typed arrays writing bytes, so a 30k-token response costs no
 * per-element string or object. Reuse and hand-over: see ByteWriter.
 */

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const HEX = '0123456789abcdef';

export class JsonWriter extends ByteWriter {
  /** ASCII text as is: punctuation, keys with their quotes, literals. */
  raw(ascii: string): this {
    const n = ascii.length;
    this.reserve(n);
    const buf = this.buf;
    let o = this.len;
    for (let i = 0; i < n; i++) buf[o++] = ascii.charCodeAt(i);
    this.len = o;
    return this;
  }

  /** A JSON string literal: quotes, escapes (as JSON.stringify makes them), UTF-8. */
  string(s: string): this {
    // Worst case: every UTF-16 unit becomes a 6-byte \uXXXX escape.
    this.reserve(s.length * 6 + 2);
    const buf = this.buf;
    let o = this.len;
    buf[o++] = QUOTE;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x20 && c < 0x80 && c !== QUOTE && c !== BACKSLASH) {
        buf[o++] = c;
      } else if (c < 0x80) {
        o = writeEscape(buf, o, c);
      } else if (c < 0x800) {
        buf[o++] = 0xc0 | (c >> 6);
        buf[o++] = 0x80 | (c & 63);
      } else if (c >= 0xd800 && c <= 0xdfff) {
        const next = s.charCodeAt(i + 1);
        if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
          const cp = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00);
          buf[o++] = 0xf0 | (cp >> 18);
          buf[o++] = 0x80 | ((cp >> 12) & 63);
          buf[o++] = 0x80 | ((cp >> 6) & 63);
          buf[o++] = 0x80 | (cp & 63);
          i++;
        } else {
          o = writeUnicodeEscape(buf, o, c); // a lone surrogate, escaped like JSON.stringify
        }
      } else {
        buf[o++] = 0xe0 | (c >> 12);
        buf[o++] = 0x80 | ((c >> 6) & 63);
        buf[o++] = 0x80 | (c & 63);
      }
    }
    buf[o++] = QUOTE;
    this.len = o;
    return this;
  }

  /**
   * A JSON string literal of the UTF-8 bytes `src[from..to)` (text detokenized from token bytes),
   * escaped as string() escapes, with each ill-formed subpart written as one U+FFFD.
   */
  utf8String(src: Uint8Array, from: number, to: number): this {
    // Worst case: every byte becomes a 6-byte escape or a 3-byte U+FFFD.
    this.reserve((to - from) * 6 + 2);
    const buf = this.buf;
    let o = this.len;
    buf[o++] = QUOTE;
    let at = from;
    while (at < to) {
      const c = src[at]!;
      if (c >= 0x20 && c < 0x80 && c !== QUOTE && c !== BACKSLASH) {
        buf[o++] = c;
        at++;
        continue;
      }
      if (c < 0x80) {
        o = writeEscape(buf, o, c);
        at++;
        continue;
      }
      const n = sequenceAt(src, at, to);
      if (n > 0) {
        for (let k = 0; k < n; k++) buf[o++] = src[at + k]!;
        at += n;
      } else {
        buf[o++] = 0xef;
        buf[o++] = 0xbf;
        buf[o++] = 0xbd;
        at -= n;
      }
    }
    buf[o++] = QUOTE;
    this.len = o;
    return this;
  }

  /** A safe integer. */
  int(n: number): this {
    this.reserve(MAX_NUMBER_TEXT);
    this.len = writeIntText(this.buf, this.len, n);
    return this;
  }

  /**
   * A number. Float32 values (what Float32Array elements read as) get the shortest text that reads
   * back to the same float32; other doubles get JavaScript's shortest round-trip text (this path
   * allocates a string, and is meant for rare non-float32 figures); NaN and ±Infinity become null.
   */
  number(f: number): this {
    if (Math.fround(f) === f || !Number.isFinite(f)) {
      this.reserve(MAX_NUMBER_TEXT);
      this.len = writeFloat32Text(this.buf, this.len, f);
      return this;
    }
    return this.raw(String(f));
  }

  bool(b: boolean): this {
    return this.raw(b ? 'true' : 'false');
  }

  null(): this {
    return this.raw('null');
  }

  /**
   * A JSON array of the decimal integers of an Int32Array view, e.g. `[11,42,3]`; `start`/`end`
   * select a range without making a subarray (the legacy mask writes one per position).
   */
  intArray(view: Int32Array, start = 0, end = view.length): this {
    // "-2147483648," is 12 bytes: the most one element can take.
    this.reserve((end - start) * 12 + 2);
    const buf = this.buf;
    let o = this.len;
    buf[o++] = 0x5b; // [
    for (let i = start; i < end; i++) {
      if (i > start) buf[o++] = 0x2c; // ,
      o = writeIntText(buf, o, view[i] as number);
    }
    buf[o++] = 0x5d; // ]
    this.len = o;
    return this;
  }

  /** `{"data":"<base64>","shape":[..],"dtype":".."}` of a view's raw little-endian bytes. */
  packedArray(view: PackedView, shape: readonly number[], dtype: PackedDtype): this {
    this.raw('{');
    this.packedArrayFields(view, shape, dtype);
    return this.raw('}');
  }

  /** The members of packedArray without the braces, for objects that add fields (`start`). */
  packedArrayFields(view: PackedView, shape: readonly number[], dtype: PackedDtype): this {
    checkPacked(view, shape, dtype);
    this.raw('"data":"');
    const size = base64Length(view.byteLength);
    this.reserve(size);
    this.len += encodeBase64Into(view, this.buf, this.len);
    this.raw('","shape":[');
    for (let i = 0; i < shape.length; i++) {
      if (i > 0) this.raw(',');
      this.int(shape[i] as number);
    }
    return this.raw('],"dtype":"').raw(dtype).raw('"');
  }

  /** Any JSON value the slow way (JSON.stringify), for rare pass-through fields. */
  value(v: unknown): this {
    const text = JSON.stringify(v);
    return text === undefined ? this.null() : this.utf8(text);
  }

  /** Already-encoded JSON text, possibly non-ASCII. */
  private utf8(text: string): this {
    this.reserve(Buffer.byteLength(text));
    this.len += Buffer.from(this.buf.buffer, this.buf.byteOffset, this.buf.length).write(
      text,
      this.len,
      'utf8',
    );
    return this;
  }
}

const SHORT_ESCAPES: Readonly<Record<number, number>> = {
  8: 0x62, // \b
  9: 0x74, // \t
  10: 0x6e, // \n
  12: 0x66, // \f
  13: 0x72, // \r
  34: 0x22, // \"
  92: 0x5c, // \\
};

function writeEscape(buf: Uint8Array, offset: number, c: number): number {
  const short = SHORT_ESCAPES[c];
  if (short === undefined) return writeUnicodeEscape(buf, offset, c);
  buf[offset] = BACKSLASH;
  buf[offset + 1] = short;
  return offset + 2;
}

function writeUnicodeEscape(buf: Uint8Array, offset: number, c: number): number {
  buf[offset] = BACKSLASH;
  buf[offset + 1] = 0x75; // u
  for (let k = 0; k < 4; k++) buf[offset + 2 + k] = HEX.charCodeAt((c >> (12 - 4 * k)) & 15);
  return offset + 6;
}
