/**
 * Pieces of the Prometheus text exposition format 0.0.4, written the way Python's prometheus_client
 * writes them for vLLM (counters named with `_total` on their HELP and TYPE lines, bucket bounds as
 * Go-style floats: le="1.0"), so that tools comparing against a vLLM scrape see the same strings.
 * prom-client's would differ (its Histogram writes le="1", with `le` first; NaN as "Nan"; a blank
 * line between families): one reason it is not used (exposition.ts).
 */

export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

export type MetricType = 'counter' | 'gauge' | 'histogram';

/** `# HELP` and `# TYPE` lines of one family. */
export function familyHeader(name: string, help: string, type: MetricType): string {
  const escaped = help.replaceAll('\\', '\\\\').replaceAll('\n', '\\n');
  return `# HELP ${name} ${escaped}\n# TYPE ${name} ${type}\n`;
}

export function escapeLabelValue(value: string): string {
  return value.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('\n', '\\n');
}

/** `a="x",b="y"` (no braces) from pairs, values escaped. */
export function labelText(pairs: readonly (readonly [string, string])[]): string {
  return pairs.map(([k, v]) => `${k}="${escapeLabelValue(v)}"`).join(',');
}

/** A sample value: integers without a fraction, +Inf/-Inf/NaN spelled as Prometheus reads them. */
export function sampleValue(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Number.POSITIVE_INFINITY) return '+Inf';
  if (value === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(value);
}

/** A bucket bound as prometheus_client's floatToGoString writes it: 1 -> "1.0", 0.25 -> "0.25". */
export function bucketBound(bound: number): string {
  if (bound === Number.POSITIVE_INFINITY) return '+Inf';
  return Number.isInteger(bound) ? `${bound}.0` : String(bound);
}

/** `name{labels} value\n`, or `name value\n` without labels. */
export function sampleLine(name: string, labels: string, value: number): string {
  return labels === ''
    ? `${name} ${sampleValue(value)}\n`
    : `${name}{${labels}} ${sampleValue(value)}\n`;
}

/**
 * The `_bucket`, `_count` and `_sum` lines of one histogram series from its slots (bucket counts not
 * cumulative, then +Inf, then the sum; see region-histogram.ts). `bucketLabels[i]` is the label
 * text with `le` for bucket i (the last one +Inf); `labels` is the text without it.
 */
export function histogramLines(
  name: string,
  labels: string,
  bucketLabels: readonly string[],
  slots: Float64Array,
  base: number,
): string {
  let text = '';
  let cumulative = 0;
  const buckets = bucketLabels.length;
  for (let i = 0; i < buckets; i++) {
    cumulative += slots[base + i]!;
    text += `${name}_bucket{${bucketLabels[i]}} ${sampleValue(cumulative)}\n`;
  }
  text += sampleLine(`${name}_count`, labels, cumulative);
  text += sampleLine(`${name}_sum`, labels, slots[base + buckets]!);
  return text;
}

/** Label texts with `le` for each bound and +Inf, `labels` first. */
export function bucketLabelTexts(labels: string, bounds: readonly number[]): string[] {
  const prefix = labels === '' ? '' : `${labels},`;
  return [...bounds, Number.POSITIVE_INFINITY].map((b) => `${prefix}le="${bucketBound(b)}"`);
}
