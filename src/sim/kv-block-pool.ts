import { BlockHashTable } from './block-hash-table.js';
import type { OffloadTier } from './offload-tier.js';

/**
 * The KV cache as vLLM v1's BlockPool: num_gpu_blocks blocks with reference counts, a free queue
 * in LRU order (doubly linked in typed arrays: allocation pops the head, a freed block goes to
 * the tail, a cache hit takes a block out of the middle in O(1)), and the prefix cache: a full
 * block keeps its hash while free, so a later request with the same prefix can take it back until
 * the block is reallocated (evicted). An evicted cached block spills to the CPU tier when there is
 * one (offload-tier.ts). A block whose KV came from outside (a P/D import, the CPU tier) is
 * rowless: this instance never computed its routing rows (external-kv.ts).
 *
 *   free queue:  head -> [least recently freed] <-> ... <-> [most recently freed] <- tail
 */
export class KvBlockPool {
  readonly numBlocks: number;
  readonly refCount: Int32Array;
  readonly #hashHi: Int32Array;
  readonly #hashLo: Int32Array;
  readonly #hashed: Uint8Array;
  readonly #rowless: Uint8Array;
  readonly #prev: Int32Array;
  readonly #next: Int32Array;
  #head = -1;
  #tail = -1;
  numFree = 0;
  readonly #table: BlockHashTable;
  /** Where evicted cached blocks go (--kv-offload-gib), or null. */
  spill: OffloadTier | null = null;

  constructor(numBlocks: number) {
    this.numBlocks = numBlocks;
    this.refCount = new Int32Array(numBlocks);
    this.#hashHi = new Int32Array(numBlocks);
    this.#hashLo = new Int32Array(numBlocks);
    this.#hashed = new Uint8Array(numBlocks);
    this.#rowless = new Uint8Array(numBlocks);
    this.#prev = new Int32Array(numBlocks);
    this.#next = new Int32Array(numBlocks);
    this.#table = new BlockHashTable(numBlocks);
    for (let b = 0; b < numBlocks; b++) this.#pushTail(b);
  }

  get numUsed(): number {
    return this.numBlocks - this.numFree;
  }

  /** Number of blocks in the prefix-cache index. */
  get numCached(): number {
    return this.#table.size;
  }

  /** Takes the least recently freed block (evicting its cached hash). Caller checks numFree. */
  allocate(): number {
    const b = this.#head;
    this.#unlink(b);
    if (this.#hashed[b] === 1) {
      const hi = this.#hashHi[b] as number;
      const lo = this.#hashLo[b] as number;
      this.#table.delete(hi, lo, b);
      this.#hashed[b] = 0;
      this.spill?.store(hi, lo);
    }
    this.#rowless[b] = 0;
    this.refCount[b] = 1;
    return b;
  }

  /** Takes a reference on a cached block (a prefix-cache hit). */
  touch(b: number): void {
    if (this.refCount[b] === 0) this.#unlink(b);
    this.refCount[b] = (this.refCount[b] as number) + 1;
  }

  /** Drops a reference; at zero the block joins the free queue, keeping its hash. */
  release(b: number): void {
    const n = (this.refCount[b] as number) - 1;
    this.refCount[b] = n;
    if (n === 0) this.#pushTail(b);
  }

  /** Its KV came from outside: this instance has no routing rows for its positions. */
  markRowless(b: number): void {
    this.#rowless[b] = 1;
  }

  isRowless(b: number): boolean {
    return this.#rowless[b] === 1;
  }

  /** The block cached under this hash, or -1. */
  lookup(hi: number, lo: number): number {
    return this.#table.get(hi, lo);
  }

  /** Registers a full block under its hash, unless it is hashed already or the hash is taken. */
  cache(b: number, hi: number, lo: number): void {
    if (this.#hashed[b] === 1 || this.#table.get(hi, lo) >= 0) return;
    this.#hashHi[b] = hi;
    this.#hashLo[b] = lo;
    this.#hashed[b] = 1;
    this.#table.set(hi, lo, b);
  }

  /** Forgets every cached hash; refused (false) while any block is in use, as vLLM does. */
  resetPrefixCache(): boolean {
    if (this.numFree !== this.numBlocks) return false;
    this.#table.clear();
    this.#hashed.fill(0);
    return true;
  }

  #pushTail(b: number): void {
    this.#prev[b] = this.#tail;
    this.#next[b] = -1;
    if (this.#tail >= 0) this.#next[this.#tail] = b;
    else this.#head = b;
    this.#tail = b;
    this.numFree++;
  }

  #unlink(b: number): void {
    const p = this.#prev[b] as number;
    const n = this.#next[b] as number;
    if (p >= 0) this.#next[p] = n;
    else this.#head = n;
    if (n >= 0) this.#prev[n] = p;
    else this.#tail = p;
    this.numFree--;
  }
}
