import { mix32 } from '../wire/hash.js';

/**
 * Per-sequence token occurrence counts for the presence / frequency / repetition penalties: an
 * open-addressing hash table in typed arrays plus the list of distinct tokens, so the sampler can
 * visit every penalised token without scanning the vocabulary. Only sequences that ask for a
 * penalty get one; it grows by doubling (per distinct token, never per step).
 */
export class TokenCounts {
  #slots: Int32Array;
  #mask: number;
  /** Distinct tokens in first-seen order; [0, size). */
  ids: Int32Array;
  outputCount: Int32Array;
  /** 1 when the token occurs in the prompt. */
  inPrompt: Uint8Array;
  size = 0;

  constructor(expectedDistinct = 64) {
    let cap = 16;
    while (cap < expectedDistinct * 2) cap *= 2;
    this.#slots = new Int32Array(cap).fill(-1);
    this.#mask = cap - 1;
    this.ids = new Int32Array(cap >> 1);
    this.outputCount = new Int32Array(cap >> 1);
    this.inPrompt = new Uint8Array(cap >> 1);
  }

  /** Index of the token in ids[], or -1. */
  indexOf(id: number): number {
    const mask = this.#mask;
    for (let p = mix32(id) & mask; ; p = (p + 1) & mask) {
      const k = this.#slots[p] as number;
      if (k < 0) return -1;
      if (this.ids[k] === id) return k;
    }
  }

  addPrompt(id: number): void {
    this.inPrompt[this.#indexOrInsert(id)] = 1;
  }

  addOutput(id: number): void {
    const k = this.#indexOrInsert(id);
    this.outputCount[k] = (this.outputCount[k] as number) + 1;
  }

  #indexOrInsert(id: number): number {
    const found = this.indexOf(id);
    if (found >= 0) return found;
    if ((this.size + 1) * 2 > this.#slots.length) this.#grow();
    const k = this.size++;
    this.ids[k] = id;
    this.outputCount[k] = 0;
    this.inPrompt[k] = 0;
    const mask = this.#mask;
    let p = mix32(id) & mask;
    while ((this.#slots[p] as number) >= 0) p = (p + 1) & mask;
    this.#slots[p] = k;
    return k;
  }

  #grow(): void {
    const cap = this.#slots.length * 2;
    this.#slots = new Int32Array(cap).fill(-1);
    this.#mask = cap - 1;
    const ids = new Int32Array(cap >> 1);
    ids.set(this.ids);
    this.ids = ids;
    const counts = new Int32Array(cap >> 1);
    counts.set(this.outputCount);
    this.outputCount = counts;
    const prompt = new Uint8Array(cap >> 1);
    prompt.set(this.inPrompt);
    this.inPrompt = prompt;
    for (let k = 0; k < this.size; k++) {
      let p = mix32(this.ids[k] as number) & this.#mask;
      while ((this.#slots[p] as number) >= 0) p = (p + 1) & this.#mask;
      this.#slots[p] = k;
    }
  }
}
