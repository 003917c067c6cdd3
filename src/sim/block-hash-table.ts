/**
 * The prefix cache's index: 64-bit block hash (hi, lo) -> block id, open addressing with linear
 * probing in typed arrays, deletion by backward shift (no tombstones, so lookups stay short after
 * heavy eviction). Sized for one entry per KV block at load factor <= 1/2.
 */
export class BlockHashTable {
  readonly #hi: Int32Array;
  readonly #lo: Int32Array;
  readonly #value: Int32Array;
  readonly #mask: number;
  size = 0;

  constructor(maxEntries: number) {
    let cap = 16;
    while (cap < maxEntries * 2) cap *= 2;
    this.#hi = new Int32Array(cap);
    this.#lo = new Int32Array(cap);
    this.#value = new Int32Array(cap).fill(-1);
    this.#mask = cap - 1;
  }

  /** The block id cached under (hi, lo), or -1. */
  get(hi: number, lo: number): number {
    const mask = this.#mask;
    for (let p = lo & mask; ; p = (p + 1) & mask) {
      const v = this.#value[p] as number;
      if (v < 0) return -1;
      if (this.#lo[p] === lo && this.#hi[p] === hi) return v;
    }
  }

  /** Inserts (hi, lo) -> block; the key must be absent. */
  set(hi: number, lo: number, block: number): void {
    const mask = this.#mask;
    let p = lo & mask;
    while ((this.#value[p] as number) >= 0) p = (p + 1) & mask;
    this.#hi[p] = hi;
    this.#lo[p] = lo;
    this.#value[p] = block;
    this.size++;
  }

  /** Removes (hi, lo) if it maps to `block`. */
  delete(hi: number, lo: number, block: number): void {
    const mask = this.#mask;
    let p = lo & mask;
    for (;;) {
      const v = this.#value[p] as number;
      if (v < 0) return;
      if (v === block && this.#lo[p] === lo && this.#hi[p] === hi) break;
      p = (p + 1) & mask;
    }
    this.#value[p] = -1;
    this.size--;
    // Backward shift: pull later entries of the probe run into the gap when their home slot
    // does not lie cyclically in (gap, j].
    let gap = p;
    for (let j = (p + 1) & mask; (this.#value[j] as number) >= 0; j = (j + 1) & mask) {
      const home = (this.#lo[j] as number) & mask;
      const between = gap <= j ? home > gap && home <= j : home > gap || home <= j;
      if (between) continue;
      this.#hi[gap] = this.#hi[j] as number;
      this.#lo[gap] = this.#lo[j] as number;
      this.#value[gap] = this.#value[j] as number;
      this.#value[j] = -1;
      gap = j;
    }
  }

  clear(): void {
    this.#value.fill(-1);
    this.size = 0;
  }
}
