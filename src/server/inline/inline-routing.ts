/**
 * A request's routed experts as the inline baseline keeps them: every routing row appended into one
 * growing typed array, as vLLM's routed-experts capturer keeps a narrow numpy buffer per request
 * (one byte per id when the model has at most 256 experts), grown by doubling like a resized numpy
 * array. A Python frontend keeps per-token objects for logprobs and masks, not for routing: no JS
 * array per row exists here, and the answer base64-encodes the buffer once.
 *
 * The rules are the worker path's (output-worker/column-writer.ts, appendRouting): rows before
 * routed_experts_prompt_start are skipped, and a row is stored at its sequence position, so a row
 * sent again (a recompute after preemption) is written over in place. A row past the end leaves
 * the rows between as zeros; the worker path refuses such a step, the engine never sends one.
 */

/** Rows of the first buffer when the first append brings fewer. */
const MIN_ROWS = 64;

export class RoutingBuffer {
  /** Absolute sequence position of row 0 (meaningful once a row is held). */
  start = -1;
  /** Rows held, from `start` on. */
  rows = 0;
  layers = 0;
  topk = 0;
  #ids: Uint8Array | Uint16Array = new Uint8Array(0);

  /**
   * Stores `rows` rows of `layers * topk` ids read from `ids` at element `at`, row r being the
   * routing of sequence position `firstPos + r`. Rows before `promptStart` are skipped.
   */
  append(
    ids: Uint8Array | Uint16Array,
    at: number,
    firstPos: number,
    rows: number,
    layers: number,
    topk: number,
    promptStart: number,
  ): void {
    if (this.rows === 0) {
      this.start = Math.max(firstPos, promptStart);
      this.layers = layers;
      this.topk = topk;
    }
    const width = this.layers * this.topk;
    const skip = Math.max(0, this.start - firstPos);
    if (skip >= rows) return;
    const to = firstPos + skip - this.start;
    const end = to + rows - skip;
    this.#reserve(end * width, ids instanceof Uint16Array);
    this.#ids.set(ids.subarray(at + skip * width, at + rows * width), to * width);
    if (end > this.rows) this.rows = end;
  }

  /** Rows the buffer has room for before it grows again. */
  get capacityRows(): number {
    const width = this.layers * this.topk;
    return width === 0 ? 0 : this.#ids.length / width;
  }

  /** The ids of rows [fromRow, rows), row-major: a view of the buffer, valid until the next append. */
  ids(fromRow = 0): Uint8Array | Uint16Array {
    const width = this.layers * this.topk;
    return this.#ids.subarray(Math.min(fromRow, this.rows) * width, this.rows * width);
  }

  /** Room for `length` ids, doubling the buffer (and widening it to 16 bits if `wide`). */
  #reserve(length: number, wide: boolean): void {
    const old = this.#ids;
    const grow = length > old.length;
    if (!grow && !(wide && old instanceof Uint8Array)) return;
    const width = this.layers * this.topk;
    const capacity = grow ? Math.max(length, old.length * 2, MIN_ROWS * width) : old.length;
    const next =
      wide || old instanceof Uint16Array ? new Uint16Array(capacity) : new Uint8Array(capacity);
    next.set(old.subarray(0, this.rows * width));
    this.#ids = next;
  }
}
