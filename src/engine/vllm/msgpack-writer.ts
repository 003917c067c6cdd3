import { RS_ERR_VLLM_BAD_FIELD } from '../../errors.js';

/**
 * A msgpack writer that emits exactly what msgspec (vLLM's serializer) emits for the same values:
 * integers in their smallest form, every float as float64, strings as str, fixext when the
 * payload is 1/2/4/8/16 bytes. It writes into one growable buffer, reused across messages, so
 * the bytes of a message are deterministic and golden vectors can pin them.
 */
export class MsgWriter {
  #buf: Buffer;
  #view: DataView;
  length = 0;

  constructor(capacity = 1024) {
    this.#buf = Buffer.alloc(capacity);
    this.#view = new DataView(this.#buf.buffer, this.#buf.byteOffset, this.#buf.length);
  }

  reset(): void {
    this.length = 0;
  }

  /** A copy of the bytes written since reset(), safe to hand to a socket. */
  toBuffer(): Buffer {
    return Buffer.from(this.#buf.subarray(0, this.length));
  }

  nil(): void {
    this.#byte(0xc0);
  }

  bool(value: boolean): void {
    this.#byte(value ? 0xc3 : 0xc2);
  }

  /** A safe integer; `field` names it when it is not one. */
  int(value: number, field = 'int'): void {
    if (!Number.isSafeInteger(value)) {
      throw new RS_ERR_VLLM_BAD_FIELD(field, `expected a safe integer, got ${value}`);
    }
    this.#reserve(9);
    const v = this.#view;
    let p = this.length;
    if (value >= 0) {
      if (value < 0x80) this.#buf[p++] = value;
      else if (value < 0x100) {
        this.#buf[p++] = 0xcc;
        this.#buf[p++] = value;
      } else if (value < 0x10000) {
        this.#buf[p++] = 0xcd;
        v.setUint16(p, value);
        p += 2;
      } else if (value < 0x100000000) {
        this.#buf[p++] = 0xce;
        v.setUint32(p, value);
        p += 4;
      } else {
        this.#buf[p++] = 0xcf;
        v.setBigUint64(p, BigInt(value));
        p += 8;
      }
    } else if (value >= -32) this.#buf[p++] = value & 0xff;
    else if (value >= -0x80) {
      this.#buf[p++] = 0xd0;
      v.setInt8(p++, value);
    } else if (value >= -0x8000) {
      this.#buf[p++] = 0xd1;
      v.setInt16(p, value);
      p += 2;
    } else if (value >= -0x80000000) {
      this.#buf[p++] = 0xd2;
      v.setInt32(p, value);
      p += 4;
    } else {
      this.#buf[p++] = 0xd3;
      v.setBigInt64(p, BigInt(value));
      p += 8;
    }
    this.length = p;
  }

  /**
   * An integer that may not fit a JS number (a uint64 utility call id): a bigint in [-2^63, 2^64)
   * goes out as msgspec writes it (uint64 when non-negative, int64 otherwise), a number as int().
   */
  bigInt(value: number | bigint, field = 'int'): void {
    if (typeof value === 'number') {
      this.int(value, field);
      return;
    }
    if (value >= -MAX_SAFE && value <= MAX_SAFE) {
      this.int(Number(value), field);
      return;
    }
    if (value < INT64_MIN || value > UINT64_MAX) {
      throw new RS_ERR_VLLM_BAD_FIELD(field, `${value} does not fit 64 bits`);
    }
    this.#reserve(9);
    const p = this.length;
    this.#buf[p] = value >= 0n ? 0xcf : 0xd3;
    if (value >= 0n) this.#view.setBigUint64(p + 1, value);
    else this.#view.setBigInt64(p + 1, value);
    this.length = p + 9;
  }

  float(value: number): void {
    this.#reserve(9);
    this.#buf[this.length] = 0xcb;
    this.#view.setFloat64(this.length + 1, value);
    this.length += 9;
  }

  str(value: string): void {
    if (value.length < 32 && this.#asciiFixStr(value)) return;
    const max = value.length * 3;
    this.#reserve(5 + max);
    // Write the bytes after the largest header, then move them if a smaller header fits.
    const written = this.#buf.write(value, this.length + 5, max, 'utf8');
    const header = written < 32 ? 1 : written < 0x100 ? 2 : written < 0x10000 ? 3 : 5;
    if (header !== 5) {
      this.#buf.copyWithin(this.length + header, this.length + 5, this.length + 5 + written);
    }
    const p = this.length;
    if (header === 1) this.#buf[p] = 0xa0 | written;
    else if (header === 2) {
      this.#buf[p] = 0xd9;
      this.#buf[p + 1] = written;
    } else if (header === 3) {
      this.#buf[p] = 0xda;
      this.#view.setUint16(p + 1, written);
    } else {
      this.#buf[p] = 0xdb;
      this.#view.setUint32(p + 1, written);
    }
    this.length = p + header + written;
  }

  /**
   * A short all-ASCII string (dtype names, request ids: several per output) written byte by byte
   * as a fixstr, without Buffer.write's native call; false, with nothing written, otherwise.
   */
  #asciiFixStr(value: string): boolean {
    const n = value.length;
    this.#reserve(1 + n);
    const b = this.#buf;
    const p = this.length;
    for (let k = 0; k < n; k++) {
      const c = value.charCodeAt(k);
      if (c > 0x7f) return false;
      b[p + 1 + k] = c;
    }
    b[p] = 0xa0 | n;
    this.length = p + 1 + n;
    return true;
  }

  arrayHeader(n: number): void {
    this.#header(n, 0x90, 0xdc);
  }

  mapHeader(n: number): void {
    this.#header(n, 0x80, 0xde);
  }

  /** An ext of `type` holding `bytes` (vLLM's raw ndarray data is type 3). */
  ext(type: number, bytes: Uint8Array): void {
    this.extFrom(type, bytes, 0, bytes.length);
  }

  /** An ext of `type` holding `src[start .. start + n)`, copied without making a view. */
  extFrom(type: number, src: Uint8Array, start: number, n: number): void {
    this.#reserve(6 + n);
    const b = this.#buf;
    let p = this.length;
    const fixed = n === 1 ? 0xd4 : n === 2 ? 0xd5 : n === 4 ? 0xd6 : n === 8 ? 0xd7 : 0;
    if (fixed !== 0) b[p++] = fixed;
    else if (n === 16) b[p++] = 0xd8;
    else if (n < 0x100) {
      b[p++] = 0xc7;
      b[p++] = n;
    } else if (n < 0x10000) {
      b[p++] = 0xc8;
      this.#view.setUint16(p, n);
      p += 2;
    } else {
      b[p++] = 0xc9;
      this.#view.setUint32(p, n);
      p += 4;
    }
    b[p++] = type;
    // Short runs by hand; longer ones (an inline routing row is hundreds of bytes) with Buffer's
    // native copy, which takes any Uint8Array as its source and makes no view of it.
    if (n < NATIVE_COPY) for (let i = 0; i < n; i++) b[p + i] = src[start + i] as number;
    else Buffer.prototype.copy.call(src, b, p, start, start + n);
    this.length = p + n;
  }

  /** Bytes already msgpack-encoded (one whole value, checked by the caller), copied as they are. */
  raw(bytes: Uint8Array): void {
    this.#reserve(bytes.length);
    this.#buf.set(bytes, this.length);
    this.length += bytes.length;
  }

  /** The underlying buffer (valid until the next write that grows it). */
  get bytes(): Uint8Array {
    return this.#buf;
  }

  #header(n: number, fix: number, wide: number): void {
    this.#reserve(5);
    const p = this.length;
    if (n < 16) {
      this.#buf[p] = fix | n;
      this.length = p + 1;
    } else if (n < 0x10000) {
      this.#buf[p] = wide;
      this.#view.setUint16(p + 1, n);
      this.length = p + 3;
    } else {
      this.#buf[p] = wide + 1;
      this.#view.setUint32(p + 1, n);
      this.length = p + 5;
    }
  }

  #byte(b: number): void {
    this.#reserve(1);
    this.#buf[this.length++] = b;
  }

  #reserve(n: number): void {
    const need = this.length + n;
    if (need <= this.#buf.length) return;
    const grown = Buffer.alloc(Math.max(need, this.#buf.length * 2));
    grown.set(this.#buf.subarray(0, this.length));
    this.#buf = grown;
    this.#view = new DataView(grown.buffer, grown.byteOffset, grown.length);
  }
}

/** Ext payloads at least this long are copied natively (the call costs about as much as 32 bytes). */
const NATIVE_COPY = 32;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const INT64_MIN = -(2n ** 63n);
const UINT64_MAX = 2n ** 64n - 1n;
