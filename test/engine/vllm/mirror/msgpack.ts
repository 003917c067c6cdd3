/**
 * A small msgpack encoder and decoder (msgpack spec, github.com/msgpack/msgpack/blob/master/spec.md),
 * written for the mirror so that it shares no code with ringserve's codec and no global state with
 * anyone: msgpackr registers extension types process-wide (its `addExtension`), and it turns a
 * float64 1.0 into the number 1, which would hide a float sent where msgspec wants an int.
 *
 * Encoding picks the shortest form of every value, as msgspec does: positive ints as fixint/uint*,
 * negative as negative fixint/int*, fixext for 1/2/4/8/16 data bytes. A JS number that is not an
 * integer goes out as float64; wrap an integral float in `f64()` to keep it a float.
 *
 * Decoding keeps floats apart from ints (`MsgFloat`), ints as numbers while they are safe and as
 * bigints past 2^53, bin and ext data as copies, and fails on truncated input or trailing bytes.
 */

/** A msgpack float: what the decoder returns for float32/float64, and what `f64()` encodes. */
export class MsgFloat {
  constructor(
    readonly value: number,
    readonly bits: 32 | 64 = 64,
  ) {}
}

/** A msgpack extension value: `type` -128..127 and its raw bytes. */
export class Ext {
  constructor(
    readonly type: number,
    readonly data: Buffer,
  ) {}
}

/** A float64 on the wire even when `x` is integral (msgspec float fields, timestamps). */
export function f64(x: number): MsgFloat {
  return new MsgFloat(x, 64);
}

const MAX_DEPTH = 64;
/** Strict UTF-8, as msgspec's: invalid text is an error, not U+FFFD. */
const UTF8 = new TextDecoder('utf-8', { fatal: true });

class Writer {
  #buf = Buffer.alloc(256);
  #len = 0;

  #room(n: number): void {
    if (this.#len + n <= this.#buf.length) return;
    const next = Buffer.alloc(Math.max(this.#buf.length * 2, this.#len + n));
    this.#buf.copy(next, 0, 0, this.#len);
    this.#buf = next;
  }

  byte(b: number): void {
    this.#room(1);
    this.#buf[this.#len++] = b;
  }

  head(code: number, width: 0 | 1 | 2 | 4 | 8, n: number | bigint): void {
    this.byte(code);
    this.#room(width);
    if (width === 1) this.#buf.writeUInt8(Number(n), this.#len);
    else if (width === 2) this.#buf.writeUInt16BE(Number(n), this.#len);
    else if (width === 4) this.#buf.writeUInt32BE(Number(n), this.#len);
    else if (width === 8) this.#buf.writeBigUInt64BE(BigInt.asUintN(64, BigInt(n)), this.#len);
    this.#len += width;
  }

  bytes(b: Uint8Array): void {
    this.#room(b.length);
    this.#buf.set(b, this.#len);
    this.#len += b.length;
  }

  float(x: number, bits: 32 | 64): void {
    this.byte(bits === 32 ? 0xca : 0xcb);
    this.#room(8);
    if (bits === 32) this.#buf.writeFloatBE(x, this.#len);
    else this.#buf.writeDoubleBE(x, this.#len);
    this.#len += bits / 8;
  }

  done(): Buffer {
    return Buffer.from(this.#buf.subarray(0, this.#len));
  }
}

function writeInt(w: Writer, n: bigint): void {
  if (n >= 0n) {
    if (n < 128n) w.byte(Number(n));
    else if (n < 0x100n) w.head(0xcc, 1, n);
    else if (n < 0x10000n) w.head(0xcd, 2, n);
    else if (n < 0x100000000n) w.head(0xce, 4, n);
    else if (n < 1n << 64n) w.head(0xcf, 8, n);
    else throw new RangeError(`int ${n} does not fit msgpack (uint64)`);
    return;
  }
  if (n >= -32n) w.byte(Number(n) & 0xff);
  else if (n >= -0x80n) w.head(0xd0, 1, Number(n) & 0xff);
  else if (n >= -0x8000n) w.head(0xd1, 2, Number(n) & 0xffff);
  else if (n >= -0x80000000n) w.head(0xd2, 4, Number(BigInt.asUintN(32, n)));
  else if (n >= -(1n << 63n)) w.head(0xd3, 8, n);
  else throw new RangeError(`int ${n} does not fit msgpack (int64)`);
}

/** The length forms of one msgpack family: its fix form (if any) and its 8/16/32-bit heads. */
interface LengthForms {
  fix: number;
  fixMax: number;
  u8: number | null;
  u16: number;
  u32: number;
}
const STR: LengthForms = { fix: 0xa0, fixMax: 32, u8: 0xd9, u16: 0xda, u32: 0xdb };
const BIN: LengthForms = { fix: 0, fixMax: 0, u8: 0xc4, u16: 0xc5, u32: 0xc6 };
const EXT: LengthForms = { fix: 0, fixMax: 0, u8: 0xc7, u16: 0xc8, u32: 0xc9 };
const ARRAY: LengthForms = { fix: 0x90, fixMax: 16, u8: null, u16: 0xdc, u32: 0xdd };
const MAP: LengthForms = { fix: 0x80, fixMax: 16, u8: null, u16: 0xde, u32: 0xdf };

function writeLength(w: Writer, n: number, forms: LengthForms): void {
  if (n < forms.fixMax) w.byte(forms.fix | n);
  else if (forms.u8 !== null && n < 0x100) w.head(forms.u8, 1, n);
  else if (n < 0x10000) w.head(forms.u16, 2, n);
  else w.head(forms.u32, 4, n);
}

const FIXEXT: Readonly<Record<number, number>> = { 1: 0xd4, 2: 0xd5, 4: 0xd6, 8: 0xd7, 16: 0xd8 };

function writeValue(w: Writer, v: unknown, depth: number): void {
  if (depth > MAX_DEPTH) throw new RangeError('msgpack: nested too deep');
  if (v === null || v === undefined) w.byte(0xc0);
  else if (v === false) w.byte(0xc2);
  else if (v === true) w.byte(0xc3);
  else if (typeof v === 'bigint') writeInt(w, v);
  else if (typeof v === 'number') {
    if (Number.isSafeInteger(v)) writeInt(w, BigInt(v));
    else w.float(v, 64);
  } else if (v instanceof MsgFloat) w.float(v.value, v.bits);
  else if (typeof v === 'string') {
    const b = Buffer.from(v, 'utf8');
    writeLength(w, b.length, STR);
    w.bytes(b);
  } else if (v instanceof Uint8Array) {
    writeLength(w, v.length, BIN);
    w.bytes(v);
  } else if (v instanceof Ext) {
    const fix = FIXEXT[v.data.length];
    if (fix !== undefined) w.byte(fix);
    else writeLength(w, v.data.length, EXT);
    w.byte(v.type & 0xff);
    w.bytes(v.data);
  } else if (Array.isArray(v)) {
    writeLength(w, v.length, ARRAY);
    for (const x of v) writeValue(w, x, depth + 1);
  } else if (typeof v === 'object') {
    const entries = v instanceof Map ? [...v.entries()] : Object.entries(v);
    writeLength(w, entries.length, MAP);
    for (const [k, x] of entries) {
      writeValue(w, k, depth + 1);
      writeValue(w, x, depth + 1);
    }
  } else throw new TypeError(`msgpack: cannot encode a ${typeof v}`);
}

/** One value as msgpack bytes. */
export function pack(value: unknown): Buffer {
  const w = new Writer();
  writeValue(w, value, 0);
  return w.done();
}

class Reader {
  #pos = 0;
  constructor(readonly buf: Buffer) {}

  get pos(): number {
    return this.#pos;
  }

  take(n: number): Buffer {
    if (this.#pos + n > this.buf.length) {
      throw new RangeError(`msgpack: truncated at byte ${this.#pos} (need ${n} more)`);
    }
    const b = this.buf.subarray(this.#pos, this.#pos + n);
    this.#pos += n;
    return b;
  }

  uint(width: 1 | 2 | 4): number {
    const b = this.take(width);
    return width === 1 ? b.readUInt8(0) : width === 2 ? b.readUInt16BE(0) : b.readUInt32BE(0);
  }
}

/** A 64-bit int as a number while it is exact, else as a bigint. */
function int64(x: bigint): number | bigint {
  return x >= BigInt(Number.MIN_SAFE_INTEGER) && x <= BigInt(Number.MAX_SAFE_INTEGER)
    ? Number(x)
    : x;
}

function readMap(r: Reader, n: number, depth: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (let i = 0; i < n; i++) {
    const at = r.pos;
    const k = readValue(r, depth + 1);
    // Int keys (logit_bias is dict[int, float]) become their decimal text, as JS keys are.
    if (typeof k !== 'string' && typeof k !== 'number' && typeof k !== 'bigint') {
      throw new TypeError(`msgpack: map key at byte ${at} is neither a str nor an int`);
    }
    Object.defineProperty(out, String(k), {
      value: readValue(r, depth + 1),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

function readArray(r: Reader, n: number, depth: number): unknown[] {
  const out: unknown[] = [];
  for (let i = 0; i < n; i++) out.push(readValue(r, depth + 1));
  return out;
}

function readExt(r: Reader, n: number): Ext {
  const type = r.take(1).readInt8(0);
  return new Ext(type, Buffer.from(r.take(n)));
}

function readValue(r: Reader, depth: number): unknown {
  if (depth > MAX_DEPTH) throw new RangeError('msgpack: nested too deep');
  const at = r.pos;
  const c = r.take(1)[0]!;
  if (c < 0x80) return c;
  if (c >= 0xe0) return c - 0x100;
  if (c < 0x90) return readMap(r, c & 0x0f, depth);
  if (c < 0xa0) return readArray(r, c & 0x0f, depth);
  if (c < 0xc0) return UTF8.decode(r.take(c & 0x1f));
  switch (c) {
    case 0xc0:
      return null;
    case 0xc2:
      return false;
    case 0xc3:
      return true;
    case 0xc4:
    case 0xc5:
    case 0xc6:
      return Buffer.from(r.take(r.uint(c === 0xc4 ? 1 : c === 0xc5 ? 2 : 4)));
    case 0xc7:
    case 0xc8:
    case 0xc9:
      return readExt(r, r.uint(c === 0xc7 ? 1 : c === 0xc8 ? 2 : 4));
    case 0xca:
      return new MsgFloat(r.take(4).readFloatBE(0), 32);
    case 0xcb:
      return new MsgFloat(r.take(8).readDoubleBE(0), 64);
    case 0xcc:
      return r.uint(1);
    case 0xcd:
      return r.uint(2);
    case 0xce:
      return r.uint(4);
    case 0xcf:
      return int64(r.take(8).readBigUInt64BE(0));
    case 0xd0:
      return r.take(1).readInt8(0);
    case 0xd1:
      return r.take(2).readInt16BE(0);
    case 0xd2:
      return r.take(4).readInt32BE(0);
    case 0xd3:
      return int64(r.take(8).readBigInt64BE(0));
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8:
      return readExt(r, 1 << (c - 0xd4));
    case 0xd9:
    case 0xda:
    case 0xdb:
      return UTF8.decode(r.take(r.uint(c === 0xd9 ? 1 : c === 0xda ? 2 : 4)));
    case 0xdc:
    case 0xdd:
      return readArray(r, r.uint(c === 0xdc ? 2 : 4), depth);
    case 0xde:
    case 0xdf:
      return readMap(r, r.uint(c === 0xde ? 2 : 4), depth);
    default:
      throw new TypeError(`msgpack: byte 0x${c.toString(16)} at ${at} starts no value`);
  }
}

/** The one value `buf` holds; trailing bytes are an error, as in msgspec. */
export function unpack(buf: Buffer): unknown {
  const r = new Reader(buf);
  const v = readValue(r, 0);
  if (r.pos !== buf.length) {
    throw new RangeError(`msgpack: ${buf.length - r.pos} trailing byte(s) after the value`);
  }
  return v;
}
