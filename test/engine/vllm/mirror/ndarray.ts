/**
 * vLLM's ndarray/tensor triple `[dtype, shape, data]` (VM §7, from vllm/v1/serial_utils.py @
 * 02754b7f and @ 61894fbd; VE §1). dtype is numpy's `dtype.str` ('<i4', '|u1') for ndarrays or the
 * torch name ('int64', 'float32') for tensors; data is an ext type 3 holding the raw little-endian
 * bytes when the array is 0-d or under 256 bytes (VLLM_MSGPACK_ZERO_COPY_THRESHOLD), else the int
 * index of an extra frame (frame 0 is the body, so the first extra frame is 1).
 */
import { Ext } from './msgpack.js';
import { array, arrayOf, int, MirrorDecodeError, str } from './wire-types.js';

/** A decoded array: its dtype as sent, its shape, and its values flat in C order. */
export interface Tensor {
  dtype: string;
  shape: number[];
  values: number[];
}

/** Extra frames of one message: collected while encoding, read while decoding. */
export interface Frames {
  aux: Buffer[];
}

export const RAW_VIEW_EXT = 3;
export const INLINE_THRESHOLD = 256;

interface Scalar {
  size: number;
  read(b: Buffer, at: number): number;
  write(b: Buffer, v: number, at: number): void;
}

const SCALARS: Readonly<Record<string, Scalar>> = {
  b1: {
    size: 1,
    read: (b, at) => b.readUInt8(at),
    write: (b, v, at) => b.writeUInt8(v ? 1 : 0, at),
  },
  u1: { size: 1, read: (b, at) => b.readUInt8(at), write: (b, v, at) => b.writeUInt8(v, at) },
  i1: { size: 1, read: (b, at) => b.readInt8(at), write: (b, v, at) => b.writeInt8(v, at) },
  u2: { size: 2, read: (b, at) => b.readUInt16LE(at), write: (b, v, at) => b.writeUInt16LE(v, at) },
  i2: { size: 2, read: (b, at) => b.readInt16LE(at), write: (b, v, at) => b.writeInt16LE(v, at) },
  u4: { size: 4, read: (b, at) => b.readUInt32LE(at), write: (b, v, at) => b.writeUInt32LE(v, at) },
  i4: { size: 4, read: (b, at) => b.readInt32LE(at), write: (b, v, at) => b.writeInt32LE(v, at) },
  u8: {
    size: 8,
    read: (b, at) => Number(b.readBigUInt64LE(at)),
    write: (b, v, at) => b.writeBigUInt64LE(BigInt(v), at),
  },
  i8: {
    size: 8,
    read: (b, at) => Number(b.readBigInt64LE(at)),
    write: (b, v, at) => b.writeBigInt64LE(BigInt(v), at),
  },
  f4: { size: 4, read: (b, at) => b.readFloatLE(at), write: (b, v, at) => b.writeFloatLE(v, at) },
  f8: { size: 8, read: (b, at) => b.readDoubleLE(at), write: (b, v, at) => b.writeDoubleLE(v, at) },
};

const TORCH_NAMES: Readonly<Record<string, string>> = {
  bool: 'b1',
  uint8: 'u1',
  int8: 'i1',
  uint16: 'u2',
  int16: 'i2',
  uint32: 'u4',
  int32: 'i4',
  uint64: 'u8',
  int64: 'i8',
  float32: 'f4',
  float64: 'f8',
};

/**
 * The scalar of a dtype spelling: numpy codes with an optional '<', '=', '|' prefix (native order
 * is little-endian here) and torch names, the spellings vLLM's Rust client accepts (VM §7,
 * dtype.rs @ 5492559d). Big-endian '>' and half floats are refused: no engine sends them.
 */
export function scalarOf(dtype: string): Scalar | null {
  const code = TORCH_NAMES[dtype] ?? dtype.replace(/^[<=|]/, '');
  return SCALARS[code] ?? null;
}

export function nbytesOf(t: Tensor): number {
  const s = scalarOf(t.dtype);
  if (s === null) throw new TypeError(`mirror: no encoder for dtype ${t.dtype}`);
  return s.size * t.values.length;
}

/** A tensor as its wire triple; big data goes to `frames.aux` and is referred to by index. */
export function encodeTensor(t: Tensor, frames: Frames): unknown[] {
  const s = scalarOf(t.dtype);
  if (s === null) throw new TypeError(`mirror: no encoder for dtype ${t.dtype}`);
  const count = t.shape.reduce((a, b) => a * b, 1);
  if (count !== t.values.length) {
    throw new RangeError(
      `mirror: shape [${t.shape}] holds ${count} values, not ${t.values.length}`,
    );
  }
  const data = Buffer.alloc(s.size * count);
  for (const [i, v] of t.values.entries()) s.write(data, v, i * s.size);
  if (t.shape.length === 0 || data.length < INLINE_THRESHOLD) {
    return [t.dtype, t.shape, new Ext(RAW_VIEW_EXT, data)];
  }
  frames.aux.push(data);
  return [t.dtype, t.shape, frames.aux.length];
}

function tensorBytes(data: unknown, frames: Frames, where: string): Buffer {
  if (data instanceof Ext) {
    if (data.type !== RAW_VIEW_EXT) {
      // ext 1 and 2 are pickle / cloudpickle (VLLM_ALLOW_INSECURE_SERIALIZATION), never accepted.
      throw new MirrorDecodeError(where, `ext type ${data.type}, not ${RAW_VIEW_EXT} (raw view)`);
    }
    return data.data;
  }
  const index = int(data, where);
  const frame = frames.aux[index - 1];
  if (index < 1 || frame === undefined) {
    throw new MirrorDecodeError(where, `frame ${index} is not among ${frames.aux.length} extra`);
  }
  return frame;
}

/** A wire triple back as a Tensor; data inline (ext 3) or in an extra frame. */
export function decodeTensor(v: unknown, frames: Frames, where: string): Tensor {
  const triple = array(v, where);
  if (triple.length !== 3) {
    throw new MirrorDecodeError(where, `tensor of ${triple.length} elements, not 3`);
  }
  const dtype = str(triple[0], `${where}.dtype`);
  const shape = arrayOf(int)(triple[1], `${where}.shape`);
  const s = scalarOf(dtype);
  if (s === null) throw new MirrorDecodeError(`${where}.dtype`, `unknown dtype ${dtype}`);
  const data = tensorBytes(triple[2], frames, `${where}.data`);
  const count = shape.reduce((a, b) => a * b, 1);
  if (data.length !== count * s.size) {
    throw new MirrorDecodeError(where, `${data.length} bytes for shape [${shape}] of ${dtype}`);
  }
  const values: number[] = [];
  for (let i = 0; i < count; i++) values.push(s.read(data, i * s.size));
  return { dtype, shape, values };
}

/** Rows of a 2-d tensor. */
export function rowsOf(t: Tensor, where: string): number[][] {
  if (t.shape.length !== 2) throw new MirrorDecodeError(where, `rank ${t.shape.length}, not 2`);
  const [rows, cols] = t.shape as [number, number];
  return Array.from({ length: rows }, (_, r) => t.values.slice(r * cols, (r + 1) * cols));
}

/** A 2-d tensor of rows that all have the same width. */
export function fromRows(dtype: string, rows: readonly (readonly number[])[]): Tensor {
  const cols = rows[0]?.length ?? 0;
  if (rows.some((r) => r.length !== cols)) throw new RangeError('mirror: ragged rows');
  return { dtype, shape: [rows.length, cols], values: rows.flat() };
}
