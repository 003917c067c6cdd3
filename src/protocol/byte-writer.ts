import { RS_ERR_PROTOCOL_BAD_COLUMNS } from '../errors.js';

/**
 * A growable byte buffer that the JSON and msgpack encoders write into. It is kept between
 * responses (a packer thread encodes thousands of them), so after warm-up an encode allocates
 * only the Buffer it hands back.
 *
 * finish() returns a copy, not a view: the copy has its own ArrayBuffer (Buffer.allocUnsafeSlow,
 * never Node's shared 8 KiB pool) so the packer can transfer it to the main thread without
 * detaching the writer's own buffer or a pool other Buffers live in. The copy is one memcpy of
 * the finished response, small next to encoding it. view() is the no-copy alternative for a
 * caller that sends the bytes before its next write on the same thread.
 *
 * A writer kept for the life of a thread holds, once warm, as much as its largest response, and
 * the largest keeps rising for as long as responses vary: an idle server would hold the high-water
 * mark of every such writer. Given a WriterScratch (memory whose pages can be given back, e.g. a
 * reservation from the addon), the writer writes into it without ever growing or copying up to
 * its length, and release() gives back the pages it touched; without one, release() drops a
 * grown buffer to the JS heap's garbage collector.
 */

/** Memory a writer keeps between responses and can give back while idle. */
export interface WriterScratch {
  /** The writer's buffer: a response longer than this grows on the heap for that response only. */
  readonly bytes: Uint8Array;
  /** Gives back the pages of bytes[0, upTo) (they read as zeros afterwards); returns the bytes. */
  discard(upTo: number): number;
}

export type PackedDtype = 'float32' | 'int32' | 'uint8' | 'uint16';
export type PackedView = Float32Array | Int32Array | Uint8Array | Uint16Array;

// Past this size a buffer grown by one giant response is dropped at reset(), so one 200 MB
// answer does not pin 200 MB in every packer thread for the rest of the process's life.
const RETAIN_LIMIT_BYTES = 16 * 1024 * 1024;

// The contract's byte order is little-endian, which is also how typed arrays store their
// elements on every platform Node runs on today; refuse to load rather than emit wrong bytes.
if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) {
  throw new Error('ringserve encoders require a little-endian platform');
}

export function dtypeOf(view: PackedView): PackedDtype {
  if (view instanceof Float32Array) return 'float32';
  if (view instanceof Int32Array) return 'int32';
  if (view instanceof Uint16Array) return 'uint16';
  return 'uint8';
}

/** Throws unless `view` holds exactly product(shape) elements of `dtype`. */
export function checkPacked(view: PackedView, shape: readonly number[], dtype: PackedDtype): void {
  let count = 1;
  for (const d of shape) count *= d;
  if (dtypeOf(view) !== dtype || count !== view.length) {
    throw new RS_ERR_PROTOCOL_BAD_COLUMNS(
      `a ${dtypeOf(view)} view of ${view.length} elements cannot be ${dtype} of shape [${shape.join(', ')}]`,
    );
  }
}

export class ByteWriter {
  protected buf: Uint8Array;
  protected len = 0;
  readonly #initialBytes: number;
  readonly #scratch: WriterScratch | null;
  /** Bytes of the scratch written since the last release(). */
  #touched = 0;

  constructor(initialBytes = 64 * 1024, scratch: WriterScratch | null = null) {
    this.#initialBytes = initialBytes;
    this.#scratch = scratch;
    this.buf = scratch?.bytes ?? new Uint8Array(initialBytes);
  }

  /** Bytes written since the last reset. */
  get length(): number {
    return this.len;
  }

  /** Start a new response, keeping the buffer (unless one giant response grew it too far). */
  reset(): this {
    this.#noteTouched();
    this.len = 0;
    if (this.#scratch !== null) this.buf = this.#scratch.bytes;
    else if (this.buf.length > RETAIN_LIMIT_BYTES) this.buf = new Uint8Array(this.#initialBytes);
    return this;
  }

  /**
   * Between responses (an idle thread): gives back what the writer holds beyond its initial size,
   * the scratch's touched pages or a grown heap buffer; returns the bytes given back (a heap
   * buffer's once the GC collects it).
   */
  release(): number {
    this.reset();
    if (this.#scratch !== null) {
      const released = this.#touched > 0 ? this.#scratch.discard(this.#touched) : 0;
      this.#touched = 0;
      return released;
    }
    const held = this.buf.length;
    if (held <= this.#initialBytes) return 0;
    this.buf = new Uint8Array(this.#initialBytes);
    return held - this.#initialBytes;
  }

  #noteTouched(): void {
    const s = this.#scratch;
    if (s === null) return;
    // A response that outgrew the scratch wrote all of it before moving to the heap.
    const inScratch = this.buf === s.bytes ? this.len : s.bytes.length;
    if (inScratch > this.#touched) this.#touched = inScratch;
  }

  /** Make room for `bytes` more bytes, doubling the buffer when it is short. */
  reserve(bytes: number): void {
    const needed = this.len + bytes;
    if (needed <= this.buf.length) return;
    const grown = new Uint8Array(Math.max(needed, this.buf.length * 2));
    grown.set(this.buf.subarray(0, this.len));
    this.buf = grown;
  }

  /** Append raw bytes. */
  bytes(src: Uint8Array): this {
    this.reserve(src.length);
    this.buf.set(src, this.len);
    this.len += src.length;
    return this;
  }

  /** A copy of the bytes written, in a Buffer with its own (transferable) ArrayBuffer. */
  finish(): Buffer {
    const out = Buffer.allocUnsafeSlow(this.len);
    out.set(this.buf.subarray(0, this.len));
    return out;
  }

  /**
   * A copy of the bytes written, in a Buffer from Node's pool (Buffer.allocUnsafe: answers under
   * 4 KiB share an 8 KiB slab), for a caller that sends it from this thread: not transferable, but
   * no ArrayBuffer of its own, which costs 1-5 us to create (finish()).
   */
  copy(): Buffer {
    const out = Buffer.allocUnsafe(this.len);
    out.set(this.buf.subarray(0, this.len));
    return out;
  }

  /** The bytes written, without a copy: valid only until the next write or reset. */
  view(): Buffer {
    return Buffer.from(this.buf.buffer, this.buf.byteOffset, this.len);
  }
}
