/**
 * Summary statistics of benchmark samples. Percentiles are nearest-rank (the smallest sample with
 * at least p% of the samples at or below it), so a reported p99 is a latency that was observed.
 */

/** Nearest-rank percentile, p in [0, 100]; null for no samples. */
export function percentile(values: ArrayLike<number>, p: number): number | null {
  if (values.length === 0) return null;
  const sorted = Float64Array.from(values).sort();
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[Math.min(rank, sorted.length) - 1] as number;
}

export function mean(values: ArrayLike<number>): number | null {
  if (values.length === 0) return null;
  let sum = 0;
  for (let i = 0; i < values.length; i++) sum += values[i] as number;
  return sum / values.length;
}

export function max(values: ArrayLike<number>): number | null {
  if (values.length === 0) return null;
  let m = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < values.length; i++) m = Math.max(m, values[i] as number);
  return m;
}

/** Rounds for a report: null stays null, integers above 100 lose their decimals. */
export function round(value: number | null, digits = 2): number | null {
  if (value === null || !Number.isFinite(value)) return value;
  const scale = 10 ** (Math.abs(value) >= 100 ? 0 : digits);
  return Math.round(value * scale) / scale;
}
