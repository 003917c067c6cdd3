/**
 * The kv_transfer_params an engine answered, gathered during one drain pass of the output worker
 * (scatter.ts) as (slot, generation, bytes) and posted with the pass's batch, so that the main
 * thread sets them on the request before it encodes the answer. Only a prefill leg through a vLLM
 * engine has them, once per request: a copy per entry, none per token.
 */
import type { KvParamsBatch } from '../cross-thread/messages.js';

export class KvParamsList {
  #slots: number[] = [];
  #generations: number[] = [];
  #blobs: Uint8Array[] = [];

  get count(): number {
    return this.#slots.length;
  }

  /** Keeps a copy of `bytes[from, from + length)` for (slot, generation). */
  push(slot: number, generation: number, bytes: Uint8Array, from: number, length: number): void {
    this.#slots.push(slot);
    this.#generations.push(generation);
    this.#blobs.push(bytes.slice(from, from + length));
  }

  clear(): void {
    if (this.#slots.length === 0) return;
    this.#slots = [];
    this.#generations = [];
    this.#blobs = [];
  }

  /** The pass's entries as one message part (their bytes end to end), or null when none. */
  toBatch(): KvParamsBatch | null {
    const n = this.#slots.length;
    if (n === 0) return null;
    const ends = new Int32Array(n);
    let total = 0;
    for (let i = 0; i < n; i++) {
      total += this.#blobs[i]!.length;
      ends[i] = total;
    }
    const bytes = new Uint8Array(total);
    for (let i = 0; i < n; i++) bytes.set(this.#blobs[i]!, i === 0 ? 0 : ends[i - 1]!);
    return {
      slots: Int32Array.from(this.#slots),
      generations: Int32Array.from(this.#generations),
      ends,
      bytes,
    };
  }
}
