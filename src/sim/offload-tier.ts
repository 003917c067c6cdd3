import { BlockHashTable } from './block-hash-table.js';

/**
 * The CPU tier of `--kv-offload-gib`: hashes of prefix blocks evicted from the GPU pool, kept in
 * LRU order up to a capacity in blocks, so a later request with that prefix loads them back over
 * PCIe instead of recomputing them (vLLM's CPU offloading connector). It holds hashes only: the
 * simulator's KV carries no data, and routing rows never travel with it (external-kv.ts).
 *
 *   lru:  head -> [least recently stored or hit] <-> ... <-> [most recently] <- tail
 */
export class OffloadTier {
  readonly capacity: number;
  readonly #table: BlockHashTable;
  readonly #hi: Int32Array;
  readonly #lo: Int32Array;
  readonly #prev: Int32Array;
  readonly #next: Int32Array;
  #head = -1;
  #tail = -1;
  size = 0;
  /** Blocks stored since start (a counter: a block spilled twice counts twice). */
  numStored = 0;

  constructor(capacityBlocks: number) {
    this.capacity = capacityBlocks;
    this.#table = new BlockHashTable(capacityBlocks);
    this.#hi = new Int32Array(capacityBlocks);
    this.#lo = new Int32Array(capacityBlocks);
    this.#prev = new Int32Array(capacityBlocks);
    this.#next = new Int32Array(capacityBlocks);
  }

  /** Keeps a block evicted from the GPU pool (the least recently used one goes when full). */
  store(hi: number, lo: number): void {
    this.numStored++;
    const at = this.#table.get(hi, lo);
    if (at >= 0) {
      this.#moveToTail(at);
      return;
    }
    let slot = this.size;
    if (this.size === this.capacity) {
      slot = this.#head;
      this.#unlink(slot);
      this.#table.delete(this.#hi[slot] as number, this.#lo[slot] as number, slot);
    } else {
      this.size++;
    }
    this.#hi[slot] = hi;
    this.#lo[slot] = lo;
    this.#table.set(hi, lo, slot);
    this.#pushTail(slot);
  }

  /** Whether the block is in the tier; a hit makes it the most recently used. */
  has(hi: number, lo: number): boolean {
    const at = this.#table.get(hi, lo);
    if (at < 0) return false;
    this.#moveToTail(at);
    return true;
  }

  clear(): void {
    this.#table.clear();
    this.size = 0;
    this.#head = -1;
    this.#tail = -1;
  }

  #moveToTail(slot: number): void {
    if (slot === this.#tail) return;
    this.#unlink(slot);
    this.#pushTail(slot);
  }

  #pushTail(slot: number): void {
    this.#prev[slot] = this.#tail;
    this.#next[slot] = -1;
    if (this.#tail >= 0) this.#next[this.#tail] = slot;
    else this.#head = slot;
    this.#tail = slot;
  }

  #unlink(slot: number): void {
    const p = this.#prev[slot] as number;
    const n = this.#next[slot] as number;
    if (p >= 0) this.#next[p] = n;
    else this.#head = n;
    if (n >= 0) this.#prev[n] = p;
    else this.#tail = p;
  }
}
