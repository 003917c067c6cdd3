/**
 * A Prometheus histogram kept as plain float64 slots of the shared region (layout.ts, HIST_*):
 * bucket counts (not cumulative), the +Inf count, then the sum. One writer per histogram (a thread
 * of one process); any process reads it at scrape time without a lock. An aligned float64 store is
 * one machine store, so a reader sees each slot either before or after an observation, never torn;
 * the count it renders is the sum of the buckets it read, so `_count` always equals the `+Inf` bucket.
 *
 * observe() is on the per-token path of the output worker: a scan of at most ~20 bounds and two
 * stores, nothing allocated.
 */
export class RegionHistogram {
  readonly #slots: Float64Array;
  readonly #base: number;
  readonly #bounds: Float64Array;
  readonly #sumIndex: number;

  /** `base`: f64 index of the histogram's first slot in `slots`. */
  constructor(slots: Float64Array, base: number, bounds: readonly number[]) {
    this.#slots = slots;
    this.#base = base;
    this.#bounds = Float64Array.from(bounds);
    this.#sumIndex = base + bounds.length + 1;
  }

  observe(value: number): void {
    const bounds = this.#bounds;
    const n = bounds.length;
    let i = 0;
    while (i < n && value > bounds[i]!) i++;
    this.#slots[this.#base + i]!++;
    this.#slots[this.#sumIndex]! += value;
  }
}

/**
 * Adds histogram slots `from` (bucket counts, +Inf, sum of `bucketCount` bounds) into `into` at the
 * same positions: the cluster-wide figure is the sum of every API server's.
 */
export function addHistogramSlots(
  into: Float64Array,
  intoBase: number,
  from: Float64Array,
  fromBase: number,
  bucketCount: number,
): void {
  for (let i = 0; i <= bucketCount + 1; i++) into[intoBase + i]! += from[fromBase + i]!;
}
