/**
 * The sequences of one request and how far they have come. n = 1 has one; `n > 1` fans out into
 * n engine requests (vLLM v1's parallel sampling), answered together once every one has finished,
 * or with the first error as soon as one fails. Choice i runs in slots[i] under generation gens[i].
 * Both output paths report each choice's end to the coordinator, which completes the group here:
 * the one place that decides when a request can be answered.
 */
export class ChoiceGroup {
  readonly slots: number[] = [];
  readonly gens: number[] = [];
  /** Per choice: 1 once it finished (well or not), so a late duplicate report changes nothing. */
  readonly #finished: Uint8Array;
  #remaining: number;
  #failed = false;

  constructor(n: number) {
    this.#finished = new Uint8Array(n);
    this.#remaining = n;
  }

  /** Choices the request asked for (slots are added as they are taken). */
  get size(): number {
    return this.#finished.length;
  }

  /** One choice failed: the request is answered with that error and the others are stopped. */
  get failed(): boolean {
    return this.#failed;
  }

  /** Adds the next choice's sequence. */
  add(slot: number, gen: number): void {
    this.slots.push(slot);
    this.gens.push(gen);
  }

  /** The choice that runs in (slot, gen), or -1. */
  indexOf(slot: number, gen: number): number {
    for (let i = 0; i < this.slots.length; i++) {
      if (this.slots[i] === slot && this.gens[i] === gen) return i;
    }
    return -1;
  }

  /** Choice `index` finished well; true when it was the last one and none failed: answer now. */
  succeeded(index: number): boolean {
    if (!this.#finish(index)) return false;
    return !this.#failed && --this.#remaining === 0;
  }

  /** Choice `index` failed; true for the group's first failure: answer with it, stop the others. */
  fail(index: number): boolean {
    if (!this.#finish(index) || this.#failed) return false;
    this.#failed = true;
    return true;
  }

  #finish(index: number): boolean {
    if (!(index >= 0 && index < this.#finished.length) || this.#finished[index] === 1) return false;
    this.#finished[index] = 1;
    return true;
  }
}
