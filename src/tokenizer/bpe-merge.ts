import type { PairTable } from './pair-table.js';

/**
 * Byte-pair merging of one pre-token, as Hugging Face tokenizers' BPE (word.rs merge_all): the
 * adjacent pair of lowest rank merges first, the leftmost among equals, until no pair merges.
 * Symbols form a linked list over reused typed arrays and candidate merges wait in a binary heap
 keyed rank * 2^32 + position (at most 3n entries: n - 1 pairs, then two per merge), so a pre-token of n bytes costs O(n log n), and nothing is
 * allocated per call once the arrays have grown to the longest pre-token seen.
 */
export class BpeMerger {
  readonly #pairs: PairTable;
  #ids = new Int32Array(64);
  #next = new Int32Array(64);
  #prev = new Int32Array(64);
  #heap = new Float64Array(3 * 64);
  #heapLen = 0;

  constructor(pairs: PairTable) {
    this.#pairs = pairs;
  }

  /**
   * Merges symbols `ids[0..n)` (set with symbols() first) and appends the result to `out` at
   * `at`; returns the new end. `out` must have room for n more.
   */
  merge(n: number, out: Int32Array, at: number): number {
    const ids = this.#ids;
    const next = this.#next;
    const prev = this.#prev;
    const pairs = this.#pairs;
    for (let i = 0; i < n; i++) {
      next[i] = i + 1 < n ? i + 1 : -1;
      prev[i] = i - 1;
    }
    this.#heapLen = 0;
    for (let i = 0; i + 1 < n; i++) this.#offer(i, ids[i]!, ids[i + 1]!);
    while (this.#heapLen > 0) {
      const key = this.#pop();
      const pos = key % 4294967296;
      const rank = (key - pos) / 4294967296;
      const right = next[pos]!;
      // Stale: the symbol was merged away, or its pair changed since it was offered.
      if (ids[pos]! < 0 || right < 0 || !pairs.joins(rank, ids[pos]!, ids[right]!)) continue;
      ids[pos] = pairs.merged(rank);
      ids[right] = -1;
      const after = next[right]!;
      next[pos] = after;
      if (after >= 0) prev[after] = pos;
      const before = prev[pos]!;
      if (before >= 0) this.#offer(before, ids[before]!, ids[pos]!);
      if (after >= 0) this.#offer(pos, ids[pos]!, ids[after]!);
    }
    for (let i = 0; i >= 0; i = next[i]!) out[at++] = ids[i]!;
    return at;
  }

  /** The symbol array to fill before merge(), with room for n symbols. */
  symbols(n: number): Int32Array {
    if (n > this.#ids.length) {
      const size = Math.max(n, this.#ids.length * 2);
      this.#ids = new Int32Array(size);
      this.#next = new Int32Array(size);
      this.#prev = new Int32Array(size);
      this.#heap = new Float64Array(3 * size);
    }
    return this.#ids;
  }

  #offer(pos: number, left: number, right: number): void {
    const rank = this.#pairs.rank(left, right);
    if (rank < 0) return;
    const key = rank * 4294967296 + pos;
    const heap = this.#heap;
    let i = this.#heapLen++;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent]! <= key) break;
      heap[i] = heap[parent]!;
      i = parent;
    }
    heap[i] = key;
  }

  #pop(): number {
    const heap = this.#heap;
    const top = heap[0]!;
    const last = heap[--this.#heapLen]!;
    const n = this.#heapLen;
    let i = 0;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && heap[child + 1]! < heap[child]!) child++;
      if (heap[child]! >= last) break;
      heap[i] = heap[child]!;
      i = child;
    }
    heap[i] = last;
    return top;
  }
}
