/**
 * BPE merges in typed arrays: an open-addressing hash (left id, right id) -> rank, its three
 * words per entry side by side so a probe touches one cache line, and by rank the pair and the id
 * it merges into. 151k merges take ~7 MB that the garbage collector never walks (a Map of "a b"
 * strings, as JavaScript tokenizers keep it, is ~300k heap objects: measured 48 MB of heap and
 * 250-500 ms full GCs for Qwen3's tokenizer in @huggingface/tokenizers).
 */
export class PairTable {
  /** Entry i: [left, right, rank] at 3i; left -1 marks an empty entry. */
  readonly #hash: Int32Array;
  readonly #mask: number;
  readonly #left: Int32Array;
  readonly #right: Int32Array;
  readonly #merged: Int32Array;

  constructor(merges: number) {
    let capacity = 16;
    while (capacity < merges * 2) capacity *= 2;
    this.#hash = new Int32Array(3 * capacity).fill(-1);
    this.#mask = capacity - 1;
    this.#left = new Int32Array(merges);
    this.#right = new Int32Array(merges);
    this.#merged = new Int32Array(merges);
  }

  /** Adds merge `rank`; a pair already present keeps its first (lower) rank, as tokenizers does. */
  add(left: number, right: number, rank: number, merged: number): void {
    this.#left[rank] = left;
    this.#right[rank] = right;
    this.#merged[rank] = merged;
    const h = this.#hash;
    let i = hash(left, right) & this.#mask;
    while (h[3 * i] !== -1) {
      if (h[3 * i] === left && h[3 * i + 1] === right) return;
      i = (i + 1) & this.#mask;
    }
    h[3 * i] = left;
    h[3 * i + 1] = right;
    h[3 * i + 2] = rank;
  }

  /** The rank of merging (left, right), or -1 when they do not merge. */
  rank(left: number, right: number): number {
    const h = this.#hash;
    let i = hash(left, right) & this.#mask;
    for (;;) {
      const l = h[3 * i]!;
      if (l === -1) return -1;
      if (l === left && h[3 * i + 1] === right) return h[3 * i + 2]!;
      i = (i + 1) & this.#mask;
    }
  }

  /** Whether merge `rank` joins exactly (left, right). */
  joins(rank: number, left: number, right: number): boolean {
    return this.#left[rank] === left && this.#right[rank] === right;
  }

  /** The id merge `rank` produces. */
  merged(rank: number): number {
    return this.#merged[rank]!;
  }
}

function hash(left: number, right: number): number {
  let h = Math.imul(left, 0x9e3779b1) ^ right;
  h = Math.imul(h ^ (h >>> 15), 0x85ebca6b);
  return h ^ (h >>> 13);
}
