// One growable SharedArrayBuffer per API server holding every request's per-token columns. The
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
// live in worker-private typed arrays (block positions in KiB units); the SAB itself only holds data.
//
// Views made as `new Uint8Array(sab)` (no length) track the buffer's length as it grows, in every
// thread that holds the SAB (Node 20+: growable SharedArrayBuffer, up to 4 GiB). But V8 11 (Node
// 20) does not optimise element access through such length-tracking views: a store costs ~17 ns
// against ~2 ns through a fixed-length view of the same buffer (measured on this machine). So the
// arena hands out fixed-length views of its current length and replaces them when it grows; read
// them from the arena after any alloc (a grow replaces them), never keep them.
import { RS_ERR_OUTPUT_ARENA_FULL } from './errors.js';

export const MIN_BLOCK_BYTES = 1024;
/** Classes 0..30: 1 KiB .. 1 TiB, more than any buffer can hold; the arena's max decides. */
export const CLASS_COUNT = 31;
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
}

export class BlockArena {
  readonly sab: SharedArrayBuffer;
  /** Fixed-length views of the whole arena as it is now: replaced by every growth. */
  bytes: Uint8Array;
  i32: Int32Array;
  f32: Float32Array;
  readonly #growable: GrowableSharedArrayBuffer;
  readonly #growStep: number;
  /** Per class: a stack of free blocks' positions in KiB units. */
  readonly #freeStacks: Int32Array[] = [];
  readonly #freeCounts = new Int32Array(CLASS_COUNT);
  #top = 0;
  #liveBlocks = 0;

  constructor(sab: SharedArrayBuffer, options: BlockArenaOptions = {}) {
    const growable = sab as GrowableSharedArrayBuffer;
    if (growable.growable !== true) {
      throw new TypeError('BlockArena needs a growable SharedArrayBuffer (createArenaBuffer)');
    }
    this.sab = sab;
    this.#growable = growable;
    this.bytes = new Uint8Array(0);
    this.i32 = new Int32Array(0);
    this.f32 = new Float32Array(0);
    this.#refreshViews();
    this.#growStep = options.growStepBytes ?? DEFAULT_GROW_STEP_BYTES;
    for (let c = 0; c < CLASS_COUNT; c++) this.#freeStacks.push(new Int32Array(16));
  }

  /** Bytes handed out by bump allocation so far (free blocks included). */
  get usedBytes(): number {
    return this.#top;
  }

  /** Blocks allocated and not freed. */
  get liveBlocks(): number {
    return this.#liveBlocks;
  }

  /** Free blocks waiting on the stack of one class. */
  freeBlocks(sizeClass: number): number {
    return this.#freeCounts[sizeClass] ?? 0;
  }

  /**
   * A block of class `sizeClass`; returns its byte offset. Reuses a freed block of the class, else
   * bumps, growing the buffer by whole steps. RS_ERR_OUTPUT_ARENA_FULL past maxByteLength.
   */
  allocClass(sizeClass: number): number {
    const count = this.#freeCounts[sizeClass]!;
    this.#liveBlocks++;
    if (count > 0) {
      this.#freeCounts[sizeClass] = count - 1;
      return this.#freeStacks[sizeClass]![count - 1]! * MIN_BLOCK_BYTES;
    }
    const size = classBytes(sizeClass);
    const offset = this.#top;
    if (offset + size > this.sab.byteLength) {
      try {
        this.#grow(offset + size);
      } catch (err) {
        this.#liveBlocks--;
        throw err;
      }
    }
    this.#top = offset + size;
    return offset;
  }

  /** A block of at least `bytes`; its class is classForBytes(bytes). */
  alloc(bytes: number): number {
    return this.allocClass(classForBytes(bytes));
  }

  /** Returns a block to its class's free stack. */
  free(offset: number, sizeClass: number): void {
    const count = this.#freeCounts[sizeClass]!;
    let stack = this.#freeStacks[sizeClass]!;
    if (count === stack.length) {
      const grown = new Int32Array(count * 2);
      grown.set(stack);
      this.#freeStacks[sizeClass] = grown;
      stack = grown;
    }
    stack[count] = offset / MIN_BLOCK_BYTES;
    this.#freeCounts[sizeClass] = count + 1;
    this.#liveBlocks--;
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

  #grow(needed: number): void {
    const max = this.#growable.maxByteLength;
    if (needed > max) {
      throw new RS_ERR_OUTPUT_ARENA_FULL(`${needed} bytes needed, ${max} at most`);
    }
    const target = Math.min(max, Math.max(needed, this.sab.byteLength + this.#growStep));
    this.#growable.grow(target);
    this.#refreshViews();
  }

  #refreshViews(): void {
    const length = this.sab.byteLength;
    this.bytes = new Uint8Array(this.sab, 0, length);
    this.i32 = new Int32Array(this.sab, 0, length >> 2);
    this.f32 = new Float32Array(this.sab, 0, length >> 2);
  }
}
