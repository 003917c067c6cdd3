import { RS_ERR_VLLM_DECODE } from '../../errors.js';

/**
 * A cursor over one msgpack message, read the way msgspec decodes vLLM's structs: type-strict
 * (a bool is never an int, a float never an int where an int is required; an int passes for a
 * float), every read names the field it is for, so a malformed message ends in RS_ERR_VLLM_DECODE
 * naming that field. msgpackr is not used here because it turns float64 1.0 into the number 1 and
 * cannot tell the two apart. Strings can be read as byte ranges (strStart/strLength) so the hot
 * path decodes no string it does not need.
 */
export class MsgReader {
  buf: Uint8Array = EMPTY;
  view: DataView = new DataView(EMPTY.buffer);
  pos = 0;
  end = 0;
  /** Set by strRange(): where the last string's bytes are. */
  strStart = 0;
  strLength = 0;
  /** Set by ext(): the last ext's type and payload. */
  extType = 0;
  extStart = 0;
  extLength = 0;

  reset(buf: Uint8Array): this {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    this.buf = buf;
    this.pos = 0;
    this.end = buf.length;
    return this;
  }

  fail(field: string, what: string): never {
    throw new RS_ERR_VLLM_DECODE(field, `${what} (byte ${this.pos})`);
  }

  /** The type byte of the next value, without consuming it. */
  peek(field: string): number {
    if (this.pos >= this.end) this.fail(field, 'message ends early');
    return this.buf[this.pos] as number;
  }

  /** Consumes a nil and returns true, or returns false and leaves the next value in place. */
  nil(field: string): boolean {
    if (this.peek(field) !== 0xc0) return false;
    this.pos++;
    return true;
  }

  bool(field: string): boolean {
    const b = this.peek(field);
    if (b === 0xc2 || b === 0xc3) {
      this.pos++;
      return b === 0xc3;
    }
    return this.fail(field, `expected bool, got ${typeName(b)}`);
  }

  /** An integer (not a bool, not a float) that fits a JS safe integer. */
  int(field: string): number {
    const b = this.peek(field);
    const p = this.pos + 1;
    if (b < 0x80) {
      this.pos = p;
      return b;
    }
    if (b >= 0xe0) {
      this.pos = p;
      return b - 0x100;
    }
    const v = this.view;
    let value: number;
    let size: number;
    switch (b) {
      case 0xcc:
        size = 1;
        this.#need(field, p, size);
        value = v.getUint8(p);
        break;
      case 0xcd:
        size = 2;
        this.#need(field, p, size);
        value = v.getUint16(p);
        break;
      case 0xce:
        size = 4;
        this.#need(field, p, size);
        value = v.getUint32(p);
        break;
      case 0xcf:
        size = 8;
        this.#need(field, p, size);
        value = v.getUint32(p) * 4294967296 + v.getUint32(p + 4);
        if (v.getUint32(p) >= 0x200000) this.fail(field, 'integer above 2^53');
        break;
      case 0xd0:
        size = 1;
        this.#need(field, p, size);
        value = v.getInt8(p);
        break;
      case 0xd1:
        size = 2;
        this.#need(field, p, size);
        value = v.getInt16(p);
        break;
      case 0xd2:
        size = 4;
        this.#need(field, p, size);
        value = v.getInt32(p);
        break;
      case 0xd3: {
        size = 8;
        this.#need(field, p, size);
        const big = v.getBigInt64(p);
        if (big > BigInt(Number.MAX_SAFE_INTEGER) || big < BigInt(Number.MIN_SAFE_INTEGER)) {
          this.fail(field, 'integer beyond 2^53');
        }
        value = Number(big);
        break;
      }
      default:
        return this.fail(field, `expected int, got ${typeName(b)}`);
    }
    this.pos = p + size;
    return value;
  }

  /** A float; an int passes (msgspec's rule), a bool does not. */
  float(field: string): number {
    const b = this.peek(field);
    const p = this.pos + 1;
    if (b === 0xcb) {
      this.#need(field, p, 8);
      this.pos = p + 8;
      return this.view.getFloat64(p);
    }
    if (b === 0xca) {
      this.#need(field, p, 4);
      this.pos = p + 4;
      return this.view.getFloat32(p);
    }
    if (b < 0x80 || b >= 0xe0 || (b >= 0xcc && b <= 0xd3)) return this.int(field);
    return this.fail(field, `expected float, got ${typeName(b)}`);
  }

  /** Reads a string's position into strStart/strLength without decoding it. */
  strRange(field: string): void {
    const b = this.peek(field);
    let p = this.pos + 1;
    let n: number;
    if ((b & 0xe0) === 0xa0) n = b & 0x1f;
    else if (b === 0xd9) {
      this.#need(field, p, 1);
      n = this.view.getUint8(p);
      p += 1;
    } else if (b === 0xda) {
      this.#need(field, p, 2);
      n = this.view.getUint16(p);
      p += 2;
    } else if (b === 0xdb) {
      this.#need(field, p, 4);
      n = this.view.getUint32(p);
      p += 4;
    } else this.fail(field, `expected str, got ${typeName(b)}`);
    this.#need(field, p, n);
    this.strStart = p;
    this.strLength = n;
    this.pos = p + n;
  }

  str(field: string): string {
    this.strRange(field);
    return Buffer.from(
      this.buf.buffer,
      this.buf.byteOffset + this.strStart,
      this.strLength,
    ).toString('utf8');
  }

  arrayHeader(field: string): number {
    return this.#header(field, 0x90, 0xdc, 'array');
  }

  mapHeader(field: string): number {
    return this.#header(field, 0x80, 0xde, 'map');
  }

  /** Reads an ext into extType/extStart/extLength. */
  ext(field: string): void {
    const b = this.peek(field);
    let p = this.pos + 1;
    let n: number;
    if (b >= 0xd4 && b <= 0xd8) n = 1 << (b - 0xd4);
    else if (b === 0xc7) {
      this.#need(field, p, 1);
      n = this.view.getUint8(p);
      p += 1;
    } else if (b === 0xc8) {
      this.#need(field, p, 2);
      n = this.view.getUint16(p);
      p += 2;
    } else if (b === 0xc9) {
      this.#need(field, p, 4);
      n = this.view.getUint32(p);
      p += 4;
    } else this.fail(field, `expected ext, got ${typeName(b)}`);
    this.#need(field, p, 1 + n);
    this.extType = this.view.getInt8(p);
    this.extStart = p + 1;
    this.extLength = n;
    this.pos = p + 1 + n;
  }

  /**
   * An integer of any msgpack width: a number when it fits a JS safe integer, else a bigint (vLLM's
   * Python frontend draws utility call ids from a uuid: often >= 2^63, echoed as uint64).
   */
  intOrBig(field: string): number | bigint {
    const b = this.peek(field);
    if (b !== 0xcf && b !== 0xd3) return this.int(field);
    const p = this.pos + 1;
    this.#need(field, p, 8);
    this.pos = p + 8;
    const big = b === 0xcf ? this.view.getBigUint64(p) : this.view.getBigInt64(p);
    return big <= MAX_SAFE && big >= MIN_SAFE ? Number(big) : big;
  }

  /** Skips one value of any type (an integer of any width, safe or not). */
  skip(field: string): void {
    const b = this.peek(field);
    if (b === 0xcf || b === 0xd3) this.intOrBig(field);
    else if (b < 0x80 || b >= 0xe0 || (b >= 0xcc && b <= 0xd3)) this.int(field);
    else if (b === 0xc0 || b === 0xc2 || b === 0xc3) this.pos++;
    else if (b === 0xca || b === 0xcb) this.float(field);
    else if ((b & 0xe0) === 0xa0 || (b >= 0xd9 && b <= 0xdb)) this.strRange(field);
    else if (b >= 0xc4 && b <= 0xc6) this.#bin(field);
    else if ((b >= 0xd4 && b <= 0xd8) || (b >= 0xc7 && b <= 0xc9)) this.ext(field);
    else if ((b & 0xf0) === 0x90 || b === 0xdc || b === 0xdd) {
      for (let n = this.arrayHeader(field); n > 0; n--) this.skip(field);
    } else if ((b & 0xf0) === 0x80 || b === 0xde || b === 0xdf) {
      for (let n = this.mapHeader(field) * 2; n > 0; n--) this.skip(field);
    } else this.fail(field, `reserved type byte 0x${b.toString(16)}`);
  }

  /**
   * Any value as plain JS (maps become objects, bin a Uint8Array, an integer beyond 2^53 a bigint,
   * ext an error): for the cold free-form parts (utility arguments and results, kv_transfer_params).
   */
  any(field: string): unknown {
    const b = this.peek(field);
    if (b < 0x80 || b >= 0xe0 || (b >= 0xcc && b <= 0xd3)) return this.intOrBig(field);
    if (b === 0xc0) {
      this.pos++;
      return null;
    }
    if (b === 0xc2 || b === 0xc3) return this.bool(field);
    if (b === 0xca || b === 0xcb) return this.float(field);
    if ((b & 0xe0) === 0xa0 || (b >= 0xd9 && b <= 0xdb)) return this.str(field);
    if (b >= 0xc4 && b <= 0xc6) {
      this.#bin(field);
      return this.buf.slice(this.strStart, this.strStart + this.strLength);
    }
    if ((b & 0xf0) === 0x90 || b === 0xdc || b === 0xdd) {
      const n = this.arrayHeader(field);
      const out: unknown[] = [];
      for (let i = 0; i < n; i++) out.push(this.any(`${field}[${i}]`));
      return out;
    }
    if ((b & 0xf0) === 0x80 || b === 0xde || b === 0xdf) {
      const n = this.mapHeader(field);
      const out: Record<string, unknown> = {};
      for (let i = 0; i < n; i++) {
        const key = this.str(`${field} key`);
        out[key] = this.any(`${field}.${key}`);
      }
      return out;
    }
    return this.fail(field, `unexpected ${typeName(b)}`);
  }

  /** msgspec refuses trailing bytes after the message. */
  done(field: string): void {
    if (this.pos !== this.end) this.fail(field, `${this.end - this.pos} trailing bytes`);
  }

  #bin(field: string): void {
    const b = this.peek(field);
    const p = this.pos + 1;
    const size = b === 0xc4 ? 1 : b === 0xc5 ? 2 : 4;
    this.#need(field, p, size);
    const n =
      size === 1
        ? this.view.getUint8(p)
        : size === 2
          ? this.view.getUint16(p)
          : this.view.getUint32(p);
    this.#need(field, p + size, n);
    this.strStart = p + size;
    this.strLength = n;
    this.pos = p + size + n;
  }

  #header(field: string, fix: number, wide16: number, what: string): number {
    const b = this.peek(field);
    const p = this.pos + 1;
    if ((b & 0xf0) === fix) {
      this.pos = p;
      return b & 0x0f;
    }
    if (b === wide16) {
      this.#need(field, p, 2);
      this.pos = p + 2;
      return this.view.getUint16(p);
    }
    if (b === wide16 + 1) {
      this.#need(field, p, 4);
      this.pos = p + 4;
      return this.view.getUint32(p);
    }
    return this.fail(field, `expected ${what}, got ${typeName(b)}`);
  }

  #need(field: string, at: number, n: number): void {
    if (at + n > this.end) this.fail(field, 'message ends early');
  }
}

/** msgpack's name for the family of a type byte, for error messages. */
export function typeName(b: number): string {
  if (b < 0x80 || b >= 0xe0 || (b >= 0xcc && b <= 0xd3)) return 'int';
  if ((b & 0xf0) === 0x80 || b === 0xde || b === 0xdf) return 'map';
  if ((b & 0xf0) === 0x90 || b === 0xdc || b === 0xdd) return 'array';
  if ((b & 0xe0) === 0xa0 || (b >= 0xd9 && b <= 0xdb)) return 'str';
  if (b === 0xc0) return 'nil';
  if (b === 0xc2 || b === 0xc3) return 'bool';
  if (b === 0xca || b === 0xcb) return 'float';
  if (b >= 0xc4 && b <= 0xc6) return 'bin';
  if ((b >= 0xd4 && b <= 0xd8) || (b >= 0xc7 && b <= 0xc9)) return 'ext';
  return 'reserved';
}

const EMPTY = new Uint8Array(0);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
