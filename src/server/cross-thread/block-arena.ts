// One SharedArrayBuffer per API server holding every request's per-token columns. The
// output worker is its only writer (alloc, free, regrow and the column bytes); packers and the main
// thread only read bytes at offsets the worker published, after a postMessage that orders them.
//
//   0                                                        top        byteLength    maxByteLength
//   +----------+--------------------+------+----------------+-----------+- - - - - - -+
//   | 1 KiB    | 8 KiB              | 2 KiB| ...            | (unused)  | grown later |
//   +----------+--------------------+------+----------------+-----------+- - - - - - -+
//     blocks of power-of-two classes (class c = 1 KiB << c), bump-allocated at `top`;
//     a freed block goes on its class's free stack and is handed out again before `top` moves.
//
// Sizes are powers of two so a freed block of one request always fits the next request that asks
// the same class, and a column that outgrows its block moves to a block twice the size (amortised
// O(1) copying per element, like a growing vector). Blocks are never split or merged: the classes a
// workload uses stay on their free stacks, which is what a steady RL rollout load wants. Free stacks
// live in worker-private typed arrays (free-blocks.ts); the SAB itself only holds data.
//
// Views made as `new Uint8Array(sab)` (no length) track the buffer's length as it grows, in every
// thread that holds the SAB (Node 20+: growable SharedArrayBuffer, up to 4 GiB). But V8 11 (Node
// 20) does not optimise element access through such length-tracking views: a store costs ~17 ns
// against ~2 ns through a fixed-length view of the same buffer (measured on this machine). So the
// arena hands out fixed-length views of its current length and replaces them when it grows; read
// them from the arena after any alloc (a grow replaces them), never keep them.
//
// Giving memory back: the pages of a growable SAB stay committed for the life of the process (the
// rl profile's API server kept its 1.9 GB peak). reserveArenaBuffer() instead takes the whole
// maximum as private anonymous memory from the addon: its length never changes (pages are committed
// on first touch), and trim() gives the pages of free blocks back with MADV_DONTNEED. A discarded
// block stays on its free stack below the warm ones; reused, it reads as zeros, which no column
// relies on (every byte is written before it is read).
import { shmAddon } from '../../shm/native.js';
import { RS_ERR_OUTPUT_ARENA_FULL } from './errors.js';
import { FreeBlocks, keyClass, keyDiscarded, keyPosition, NO_BLOCK } from './free-blocks.js';

export { CLASS_COUNT } from './free-blocks.js';

export const MIN_BLOCK_BYTES = 1024;
/** The buffer grows by at least this much at a time (a grow is a syscall and a page-table walk). */
export const DEFAULT_GROW_STEP_BYTES = 64 * 1024 * 1024;
export const DEFAULT_MAX_ARENA_BYTES = 4 * 1024 * 1024 * 1024 - 64 * 1024;

/** ES2024's growable SharedArrayBuffer, not in the ES2023 lib this project compiles against. */
interface GrowableSharedArrayBuffer extends SharedArrayBuffer {
  readonly growable: boolean;
  readonly maxByteLength: number;
  grow(newByteLength: number): void;
}
type GrowableSabConstructor = new (
  byteLength: number,
  options: { maxByteLength: number },
) => GrowableSharedArrayBuffer;

/** A new growable SAB for an arena (the main thread makes it and hands it to the worker and packers). */
export function createArenaBuffer(
  initialBytes = DEFAULT_GROW_STEP_BYTES,
  maxBytes = DEFAULT_MAX_ARENA_BYTES,
): SharedArrayBuffer {
  const ctor = SharedArrayBuffer as unknown as GrowableSabConstructor;
  return new ctor(Math.min(initialBytes, maxBytes), { maxByteLength: maxBytes });
}

/**
 * The production arena buffer: `maxBytes` of address space from the addon (reserve()), committed
 * page by page as blocks are touched, and returnable by trim(). Falls back to a growable SAB (which
 * never returns memory) where the addon cannot reserve that much address space.
 */
export function reserveArenaBuffer(maxBytes = DEFAULT_MAX_ARENA_BYTES): SharedArrayBuffer {
  try {
    return shmAddon().reserve(maxBytes);
  } catch {
    return createArenaBuffer(DEFAULT_GROW_STEP_BYTES, maxBytes);
  }
}

/** True when `sab` came from the addon's reserve(), so trim() can give its pages back. */
function isReserved(sab: SharedArrayBuffer): boolean {
  try {
    shmAddon().discard(sab, 0, 0);
    return true;
  } catch {
    return false;
  }
}

/** The size class whose blocks hold `bytes` (class c holds 1 KiB << c). */
export function classForBytes(bytes: number): number {
  if (bytes <= MIN_BLOCK_BYTES) return 0;
  return 32 - Math.clz32(Math.ceil(bytes / MIN_BLOCK_BYTES) - 1);
}

export function classBytes(sizeClass: number): number {
  return MIN_BLOCK_BYTES * 2 ** sizeClass;
}

export interface BlockArenaOptions {
  growStepBytes?: number;
  /** Free bytes trim() keeps resident while blocks are live (default 64 MiB, or half the live bytes). */
  retainBytes?: number;
}

/** Free bytes kept resident for reuse while requests are in flight: one steady load's churn. */
export const DEFAULT_RETAIN_BYTES = 64 * 1024 * 1024;
/** Smallest block trim() discards on its own: 8 KiB always holds a whole 4 KiB page. */
const MIN_DISCARD_CLASS = 3;

export class BlockArena {
  readonly sab: SharedArrayBuffer;
  /** Fixed-length views of the whole arena as it is now: replaced by every growth. */
  bytes: Uint8Array;
  i32: Int32Array;
  f32: Float32Array;
  readonly #growable: GrowableSharedArrayBuffer | null;
  readonly #releasable: boolean;
  readonly #growStep: number;
  readonly #retain: number;
  readonly #free = new FreeBlocks();
  #top = 0;
  #liveBlocks = 0;
  #liveBytes = 0;
  /** Bytes of free blocks below `top` whose pages were given back. */
  #discardedBytes = 0;
  #releasedBytes = 0;

  constructor(sab: SharedArrayBuffer, options: BlockArenaOptions = {}) {
    const growable = sab as GrowableSharedArrayBuffer;
    this.#releasable = growable.growable !== true && isReserved(sab);
    if (growable.growable !== true && !this.#releasable) {
      throw new TypeError(
        'BlockArena needs a growable SharedArrayBuffer (createArenaBuffer) or a reserved one (reserveArenaBuffer)',
      );
    }
    this.sab = sab;
    this.#growable = this.#releasable ? null : growable;
    this.#retain = options.retainBytes ?? DEFAULT_RETAIN_BYTES;
    this.bytes = new Uint8Array(0);
    this.i32 = new Int32Array(0);
    this.f32 = new Float32Array(0);
    this.#refreshViews();
    this.#growStep = options.growStepBytes ?? DEFAULT_GROW_STEP_BYTES;
  }

  /** Bytes handed out by bump allocation so far (free blocks included). */
  get usedBytes(): number {
    return this.#top;
  }

  /** Blocks allocated and not freed. */
  get liveBlocks(): number {
    return this.#liveBlocks;
  }

  /** Bytes of the blocks allocated and not freed. */
  get liveBytes(): number {
    return this.#liveBytes;
  }

  /** Bytes that may be resident: everything below `top` but the free blocks trim() gave back. */
  get residentBytes(): number {
    return this.#top - this.#discardedBytes;
  }

  /** Bytes given back to the kernel by trim() so far (whole pages). */
  get releasedBytes(): number {
    return this.#releasedBytes;
  }

  /** True when trim() can give memory back (the buffer came from reserveArenaBuffer). */
  get releasable(): boolean {
    return this.#releasable;
  }

  /** Free blocks waiting on the stack of one class. */
  freeBlocks(sizeClass: number): number {
    return this.#free.count(sizeClass);
  }

  /**
   * A block of class `sizeClass`; returns its byte offset. Reuses a freed block of the class, else
   * bumps, growing the buffer by whole steps. RS_ERR_OUTPUT_ARENA_FULL past maxByteLength.
   */
  allocClass(sizeClass: number): number {
    const size = classBytes(sizeClass);
    const entry = this.#free.pop(sizeClass);
    if (entry !== NO_BLOCK) {
      this.#liveBlocks++;
      this.#liveBytes += size;
      if (entry >= 0) return entry * MIN_BLOCK_BYTES;
      this.#discardedBytes -= size;
      return (-entry - 1) * MIN_BLOCK_BYTES;
    }
    const offset = this.#top;
    if (offset + size > this.sab.byteLength) this.#grow(offset + size);
    this.#top = offset + size;
    this.#liveBlocks++;
    this.#liveBytes += size;
    return offset;
  }

  /** A block of at least `bytes`; its class is classForBytes(bytes). */
  alloc(bytes: number): number {
    return this.allocClass(classForBytes(bytes));
  }

  /** Returns a block to its class's free stack. */
  free(offset: number, sizeClass: number): void {
    this.#free.push(sizeClass, offset / MIN_BLOCK_BYTES, false);
    this.#liveBlocks--;
    this.#liveBytes -= classBytes(sizeClass);
  }

  /**
   * Moves a block's first `usedBytes` to a block of at least `minBytes` (and at least twice the
   * old size, so repeated growth is amortised), frees the old one; returns the new offset. The new
   * class is classForBytes of the result's size: read it back with classForBytes(newBytes) or use
   * regrowClass().
   */
  regrow(offset: number, sizeClass: number, usedBytes: number, minBytes: number): number {
    const newClass = this.regrowClass(sizeClass, minBytes);
    const to = this.allocClass(newClass);
    if (usedBytes > 0) this.bytes.copyWithin(to, offset, offset + usedBytes);
    this.free(offset, sizeClass);
    return to;
  }

  /** The class regrow() moves a block of `sizeClass` to when it must hold `minBytes`. */
  regrowClass(sizeClass: number, minBytes: number): number {
    return Math.max(sizeClass + 1, classForBytes(minBytes));
  }

  /** Free bytes above the retained ones that trim() would give back now (0: nothing to do). */
  get excessBytes(): number {
    if (!this.#releasable) return 0;
    return Math.max(0, this.residentBytes - this.#liveBytes - this.#keepBytes());
  }

  /**
   * Gives the pages of free blocks back to the kernel until no more than the retained free bytes
   * (DEFAULT_RETAIN_BYTES or half the live bytes; none once no block is live) stay resident:
   * first the free blocks at the top (`top` comes down to the highest live block, to 0 when none
   * is live), then free blocks of 8 KiB or more from the highest address down. Live blocks never
   * move. Returns the bytes given back. The output worker calls it between passes when its ring
   * is empty (output-loop.ts).
   */
  trim(): number {
    if (this.excessBytes === 0) return 0;
    const keys = this.#free.sortedKeys();
    let released = this.#trimTop(keys);
    for (let i = keys.length - 1; i >= 0 && this.excessBytes > 0; i--) {
      const key = keys[i]!;
      if (key < 0 || keyDiscarded(key) || keyClass(key) < MIN_DISCARD_CLASS) continue;
      const size = classBytes(keyClass(key));
      released += this.#discard(keyPosition(key) * MIN_BLOCK_BYTES, size);
      this.#discardedBytes += size;
      keys[i] = key | 1;
    }
    this.#free.restack(keys);
    return released;
  }

  #keepBytes(): number {
    return this.#liveBlocks === 0 ? 0 : Math.max(this.#retain, this.#liveBytes >> 1);
  }

  /** Lowers `top` past the free blocks that end it (marking their keys -1); gives their pages back. */
  #trimTop(keys: Int32Array): number {
    let released = 0;
    let runEnd = this.#top;
    for (let i = keys.length - 1; i >= 0; i--) {
      const key = keys[i]!;
      const offset = keyPosition(key) * MIN_BLOCK_BYTES;
      const size = classBytes(keyClass(key));
      if (offset + size !== this.#top) break;
      this.#top = offset;
      keys[i] = -1;
      if (keyDiscarded(key)) {
        // Already given back: give back the run of warm blocks above it, start a new run below.
        this.#discardedBytes -= size;
        released += this.#discard(offset + size, runEnd - offset - size);
        runEnd = offset;
      }
    }
    return released + this.#discard(this.#top, runEnd - this.#top);
  }

  #discard(offset: number, length: number): number {
    if (length <= 0) return 0;
    const released = shmAddon().discard(this.sab, offset, length);
    this.#releasedBytes += released;
    return released;
  }

  #grow(needed: number): void {
    const growable = this.#growable;
    const max = growable === null ? this.sab.byteLength : growable.maxByteLength;
    if (needed > max || growable === null) {
      throw new RS_ERR_OUTPUT_ARENA_FULL(`${needed} bytes needed, ${max} at most`);
    }
    const target = Math.min(max, Math.max(needed, this.sab.byteLength + this.#growStep));
    growable.grow(target);
    this.#refreshViews();
  }

  #refreshViews(): void {
    const length = this.sab.byteLength;
    this.bytes = new Uint8Array(this.sab, 0, length);
    this.i32 = new Int32Array(this.sab, 0, length >>> 2);
    this.f32 = new Float32Array(this.sab, 0, length >>> 2);
  }
}
