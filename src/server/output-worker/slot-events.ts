/**
 * A list of (slot, generation) events gathered during one drain pass, in preallocated typed arrays
 * (a slot appears at most once per kind per pass, so `slots` entries always suffice). toArrays()
 * copies the pass's events out for the one message the worker posts per pass.
 */
export class SlotEventList {
  readonly slots: Int32Array;
  readonly generations: Int32Array;
  count = 0;
  readonly #listed: Uint8Array;

  constructor(slotCount: number) {
    this.slots = new Int32Array(slotCount);
    this.generations = new Int32Array(slotCount);
    this.#listed = new Uint8Array(slotCount);
  }

  /** Lists the slot unless it is listed already this pass. */
  push(slot: number, generation: number): void {
    if (this.#listed[slot] === 1) return;
    this.#listed[slot] = 1;
    this.slots[this.count] = slot;
    this.generations[this.count] = generation;
    this.count++;
  }

  has(slot: number): boolean {
    return this.#listed[slot] === 1;
  }

  remove(slot: number): void {
    if (this.#listed[slot] !== 1) return;
    this.#listed[slot] = 0;
    for (let i = 0; i < this.count; i++) {
      if (this.slots[i] !== slot) continue;
      this.count--;
      this.slots.copyWithin(i, i + 1, this.count + 1);
      this.generations.copyWithin(i, i + 1, this.count + 1);
      return;
    }
  }

  clear(): void {
    for (let i = 0; i < this.count; i++) this.#listed[this.slots[i]!] = 0;
    this.count = 0;
  }

  /** Copies of this pass's events (slots, then their generations), ready to transfer. */
  toArrays(): { slots: Int32Array; generations: Int32Array } {
    return {
      slots: this.slots.slice(0, this.count),
      generations: this.generations.slice(0, this.count),
    };
  }
}
