// The block arena's free blocks (block-arena.ts): per size class, a stack of block positions in KiB
// units, private to the output worker. A block whose pages trim() gave back stays on its stack as
// -(position + 1), below the warm ones, so warm blocks are handed out first and the arena knows
// which reuse brings pages back in.
//
// For a trim pass the stacks are also read as one sorted list of keys, a block per key:
//
//   bit 31 ........ 6 | 5 ...... 1 | 0
//       position KiB  | size class | discarded
//
// (positions below 4 GiB / 1 KiB = 2^22 keep every key a positive int32).

/** Classes 0..30: 1 KiB .. 1 TiB, more than any buffer can hold; the arena's max decides. */
export const CLASS_COUNT = 31;
/** pop() of an empty stack. */
export const NO_BLOCK = 0x7fff_ffff;

export const keyPosition = (key: number): number => key >>> 6;
export const keyClass = (key: number): number => (key >> 1) & 31;
export const keyDiscarded = (key: number): boolean => (key & 1) === 1;

export class FreeBlocks {
  readonly #stacks: Int32Array[] = [];
  readonly #counts = new Int32Array(CLASS_COUNT);

  constructor() {
    for (let c = 0; c < CLASS_COUNT; c++) this.#stacks.push(new Int32Array(16));
  }

  count(sizeClass: number): number {
    return this.#counts[sizeClass] ?? 0;
  }

  /** The top entry of a class: a position (>= 0), -(position + 1) if discarded, or NO_BLOCK. */
  pop(sizeClass: number): number {
    const count = this.#counts[sizeClass]!;
    if (count === 0) return NO_BLOCK;
    this.#counts[sizeClass] = count - 1;
    return this.#stacks[sizeClass]![count - 1]!;
  }

  push(sizeClass: number, position: number, discarded: boolean): void {
    const count = this.#counts[sizeClass]!;
    let stack = this.#stacks[sizeClass]!;
    if (count === stack.length) {
      const grown = new Int32Array(count * 2);
      grown.set(stack);
      this.#stacks[sizeClass] = grown;
      stack = grown;
    }
    stack[count] = discarded ? -(position + 1) : position;
    this.#counts[sizeClass] = count + 1;
  }

  clear(): void {
    this.#counts.fill(0);
  }

  /** Every free block as a key (see the diagram), sorted by position. */
  sortedKeys(): Int32Array {
    let n = 0;
    for (let c = 0; c < CLASS_COUNT; c++) n += this.#counts[c]!;
    const keys = new Int32Array(n);
    let k = 0;
    for (let c = 0; c < CLASS_COUNT; c++) {
      const stack = this.#stacks[c]!;
      for (let i = 0; i < this.#counts[c]!; i++) {
        const entry = stack[i]!;
        keys[k++] = entry >= 0 ? (entry << 6) | (c << 1) : ((-entry - 1) << 6) | (c << 1) | 1;
      }
    }
    return keys.sort();
  }

  /** Replaces the stacks with the blocks of `keys` (entries < 0 skipped), discarded ones at the bottom. */
  restack(keys: Int32Array): void {
    this.clear();
    for (const discarded of [true, false]) {
      for (const key of keys) {
        if (key >= 0 && keyDiscarded(key) === discarded) {
          this.push(keyClass(key), keyPosition(key), discarded);
        }
      }
    }
  }
}
