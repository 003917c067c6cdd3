import type { MsgReader } from './msgpack-reader.js';
import type { MsgWriter } from './msgpack-writer.js';

/**
 * vLLM's ndarray on the wire (vllm/v1/serial_utils.py): `[dtype.str, shape, data]`, data being an
 * ext of type 3 holding the raw C-order bytes when they are under 256 bytes
 * (VLLM_MSGPACK_ZERO_COPY_THRESHOLD), else the index of an extra frame of the message (frame 0 is
 * the body, so the first out-of-band array is 1). Any other ext type (vLLM's pickle ones) is
 * refused, as vLLM refuses it.
 */

/** msgspec's ext type for raw ndarray bytes. */
export const RAW_VIEW_EXT = 3;
/**
 * Arrays of at least this many bytes go in their own frame: vLLM's VLLM_MSGPACK_ZERO_COPY_THRESHOLD
 * (vllm/envs.py, default 256), read from the environment as vLLM reads it, so the headless engine
 * frames its outputs as a vLLM engine started with the same setting does. A routing row of
 * Qwen3-30B-A3B is 384 bytes: at the default, each output's rows travel in a frame of their own.
 */
export const INLINE_LIMIT = zeroCopyThreshold(process.env.VLLM_MSGPACK_ZERO_COPY_THRESHOLD);

/** The threshold an environment value sets: a non-negative integer, else vLLM's default. */
export function zeroCopyThreshold(value: string | undefined): number {
  const n = value === undefined || value === '' ? Number.NaN : Number(value);
  return Number.isSafeInteger(n) && n >= 0 ? n : 256;
}

/** The dtypes this codec reads and writes, by the numpy `dtype.str` it writes. */
export const Dtype = {
  f4: '<f4',
  i4: '<i4',
  i8: '<i8',
  u1: '|u1',
  u2: '<u2',
} as const;
export type Dtype = (typeof Dtype)[keyof typeof Dtype];

/**
 * torch's names for the dtypes of a tensor: vLLM writes a torch.Tensor with
 * `str(tensor.dtype).removeprefix("torch.")` where an ndarray gets numpy's `dtype.str`
 * (vllm/v1/serial_utils.py `_encode_tensor`), so LogprobsTensors (prompt logprobs) go out as
 * `int32` / `float32` (docs/vllm-protocol.md, "Outputs").
 */
export const TorchDtype = {
  i4: 'int32',
  i8: 'int64',
  f4: 'float32',
} as const;
export type TorchDtype = (typeof TorchDtype)[keyof typeof TorchDtype];

const DTYPE_WIDTH: Readonly<Record<Dtype, number>> = {
  '<f4': 4,
  '<i4': 4,
  '<i8': 8,
  '|u1': 1,
  '<u2': 2,
};

/** The shape of an array to write: up to three dimensions, without an array per call. */
export interface Shape {
  dims: number;
  d0: number;
  d1: number;
  d2: number;
}

/**
 * The out-of-band arrays of one message (its frames after the body), copied one after another into
 * one arena that the next message reuses: a step's routing rows are a frame each at vLLM's default
 * threshold, and a Buffer per row was most of what encoding a step allocated. A FrameSource
 * (zmtp.ts), so the wire message is written from it directly.
 */
export class AuxFrames {
  #arena = new Uint8Array(1 << 16);
  /** Where frame i ends in the arena (it starts where frame i - 1 ends). */
  #ends = new Int32Array(256);
  #count = 0;

  /** Frames added since the last reset. */
  get count(): number {
    return this.#count;
  }

  /** Forgets every frame (the next message's start). */
  reset(): void {
    this.#count = 0;
  }

  /** Copies `src[start .. start + n)` as the next frame; returns its frame index (1 for the first). */
  add(src: Uint8Array, start: number, n: number): number {
    const from = this.#end(this.#count);
    if (from + n > this.#arena.length) {
      const grown = new Uint8Array(Math.max(from + n, this.#arena.length * 2));
      grown.set(this.#arena.subarray(0, from));
      this.#arena = grown;
    }
    if (this.#count === this.#ends.length) {
      const grown = new Int32Array(this.#ends.length * 2);
      grown.set(this.#ends);
      this.#ends = grown;
    }
    // Buffer's copy takes any Uint8Array as its source and makes no view of it.
    Buffer.prototype.copy.call(src, this.#arena, from, start, start + n);
    this.#ends[this.#count++] = from + n;
    return this.#count;
  }

  lengthOf(i: number): number {
    return this.#end(i + 1) - this.#end(i);
  }

  copyTo(i: number, out: Uint8Array, at: number): void {
    Buffer.prototype.copy.call(this.#arena, out, at, this.#end(i), this.#end(i + 1));
  }

  /** Each frame as a Buffer of its own (copies), for callers that keep the frames. */
  copies(): Buffer[] {
    const out: Buffer[] = [];
    for (let i = 0; i < this.#count; i++) {
      const frame = Buffer.allocUnsafe(this.lengthOf(i));
      this.copyTo(i, frame, 0);
      out.push(frame);
    }
    return out;
  }

  /** Where the first `k` frames end. */
  #end(k: number): number {
    return k === 0 ? 0 : (this.#ends[k - 1] as number);
  }
}

/**
 * Writes one ndarray (or tensor: a torch dtype name) of `shape` whose bytes are
 * `src[start .. start + n)`; n of INLINE_LIMIT or more go onto `aux` as a frame of their own (a
 * copy), referenced by index.
 */
export function writeNdarray(
  w: MsgWriter,
  dtype: Dtype | TorchDtype,
  shape: Shape,
  src: Uint8Array,
  start: number,
  n: number,
  aux: AuxFrames,
): void {
  w.arrayHeader(3);
  w.str(dtype);
  w.arrayHeader(shape.dims);
  if (shape.dims > 0) w.int(shape.d0, 'ndarray.shape');
  if (shape.dims > 1) w.int(shape.d1, 'ndarray.shape');
  if (shape.dims > 2) w.int(shape.d2, 'ndarray.shape');
  if (n < INLINE_LIMIT) {
    w.extFrom(RAW_VIEW_EXT, src, start, n);
  } else {
    w.int(aux.add(src, start, n), 'ndarray.data');
  }
}

/**
 * Where one decoded ndarray is, without copying: its bytes are `data[offset .. offset + length)`
 * (the body or an aux frame). One instance is reused for every array a decoder reads.
 */
export class NdarrayView {
  dtype: Dtype = Dtype.u1;
  /** Bytes per element. */
  width = 1;
  dims = 0;
  /** The first three dimensions (1 where the array has fewer). */
  shape0 = 1;
  shape1 = 1;
  shape2 = 1;
  data: Uint8Array = new Uint8Array(0);
  offset = 0;
  length = 0;

  get elements(): number {
    return this.shape0 * this.shape1 * this.shape2;
  }
}

/**
 * The spellings of each dtype an engine may send, after an optional byte-order prefix: numpy's
 * `dtype.str` codes (`<i4`, `|u1`, `=u2`: vLLM's ndarrays) and torch's names (`int64`,
 * `float32`: vLLM's tensors, e.g. prompt logprobs), as vLLM's Rust client accepts them
 * (protocol/dtype.rs). Data is little-endian on every platform vLLM runs on, so `<`, `=`, `|`
 * and no prefix read alike; `>` (big-endian) is refused for multi-byte types.
 */
const SPELLINGS: readonly (readonly [string, Dtype])[] = [
  ['u1', Dtype.u1],
  ['uint8', Dtype.u1],
  ['u2', Dtype.u2],
  ['uint16', Dtype.u2],
  ['i4', Dtype.i4],
  ['int32', Dtype.i4],
  ['i8', Dtype.i8],
  ['int64', Dtype.i8],
  ['f4', Dtype.f4],
  ['float32', Dtype.f4],
];
const SPELLING_BYTES = SPELLINGS.map(
  ([text, dtype]) => [Buffer.from(text, 'latin1'), dtype] as const,
);
const LITTLE = 0x3c; // '<'
const NATIVE = 0x3d; // '='
const NOT_APPLICABLE = 0x7c; // '|'
const BIG = 0x3e; // '>'

/**
 * Reads an ndarray into `out`; `frames` are the message's frames (frame 0 the body). `field` is
 * passed through as is (sub-field names are built only for an error), so reading makes no string.
 */
export function readNdarray(
  r: MsgReader,
  field: string,
  frames: readonly Uint8Array[],
  out: NdarrayView,
): NdarrayView {
  if (r.arrayHeader(field) !== 3) r.fail(field, 'an ndarray is [dtype, shape, data]');
  r.strRange(field);
  out.dtype = matchDtype(r, field);
  out.width = DTYPE_WIDTH[out.dtype];
  const dims = r.arrayHeader(field);
  if (dims > 3) r.fail(`${field}.shape`, `${dims} dimensions; at most 3 are read`);
  out.dims = dims;
  out.shape0 = dims > 0 ? nonNegative(r, field) : 1;
  out.shape1 = dims > 1 ? nonNegative(r, field) : 1;
  out.shape2 = dims > 2 ? nonNegative(r, field) : 1;
  const want = out.elements * out.width;
  const b = r.peek(field);
  if ((b >= 0xd4 && b <= 0xd8) || (b >= 0xc7 && b <= 0xc9)) {
    r.ext(field);
    if (r.extType !== RAW_VIEW_EXT) r.fail(`${field}.data`, `ext type ${r.extType} is refused`);
    out.data = r.buf;
    out.offset = r.extStart;
    out.length = r.extLength;
  } else {
    const index = r.int(field);
    const frame = frames[index];
    if (index < 1 || frame === undefined) {
      r.fail(`${field}.data`, `aux frame ${index} is not in the message`);
    }
    out.data = frame;
    out.offset = 0;
    out.length = frame.length;
  }
  if (out.length !== want) {
    r.fail(`${field}.data`, `${out.length} bytes for ${out.elements} x ${out.dtype}`);
  }
  return out;
}

function nonNegative(r: MsgReader, field: string): number {
  const n = r.int(field);
  if (n < 0) r.fail(`${field}.shape`, `negative dimension ${n}`);
  return n;
}

/** The Dtype whose spelling equals the string just read (no string is made). */
function matchDtype(r: MsgReader, field: string): Dtype {
  const { buf, strStart, strLength } = r;
  let at = strStart;
  const first = buf[at];
  const big = first === BIG;
  if (first === LITTLE || first === NATIVE || first === NOT_APPLICABLE || big) at++;
  const n = strStart + strLength - at;
  for (const [bytes, dtype] of SPELLING_BYTES) {
    if (bytes.length !== n) continue;
    let k = 0;
    while (k < n && buf[at + k] === bytes[k]) k++;
    if (k === n && !(big && DTYPE_WIDTH[dtype] > 1)) return dtype;
  }
  const text = Buffer.from(buf.buffer, buf.byteOffset + strStart, strLength).toString('latin1');
  return r.fail(`${field}.dtype`, `unsupported dtype "${text}"`);
}

/** The bytes of a whole typed array, as a view (no copy). */
export function bytesOf(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}
