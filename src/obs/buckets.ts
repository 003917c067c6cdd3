/**
 * Histogram bucket bounds, as vLLM's PrometheusStatLogger declares them (vllm/v1/metrics/loggers.py,
 * vllm-project/vllm), so dashboards and routers that read vLLM's buckets read ours unchanged; the GC
 * buckets are prom-client's for `nodejs_gc_duration_seconds` (lib/metrics/gc.js). Every list fits a
 * histogram's slots in the region, HIST_STRIDE - 2 bounds (the +Inf bucket and the sum follow): the
 * longest, 1-2-5 up to the largest --max-model-len (262144), has 17 (test/metrics/buckets.test.ts).
 */

/** vllm:time_to_first_token_seconds */
export const TTFT_BUCKETS: readonly number[] = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
  40.0, 80.0, 160.0, 640.0, 2560.0,
];

/** vllm:inter_token_latency_seconds (and the deprecated time_per_output_token_seconds). */
export const ITL_BUCKETS: readonly number[] = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
  40.0, 80.0,
];

/** vLLM's request_latency_buckets: e2e, queue, inference, prefill and decode time. */
export const REQUEST_LATENCY_BUCKETS: readonly number[] = [
  0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
  480.0, 960.0, 1920.0, 7680.0,
];

/** prom-client's GC duration buckets (seconds). */
export const GC_BUCKETS: readonly number[] = [0.001, 0.01, 0.1, 1, 2, 5];

/**
 * vLLM's build_1_2_5_buckets(max_model_len): 1, 2, 5, 10, 20, 50, ... up to and including
 * `maxValue` (request_prompt_tokens and request_generation_tokens).
 */
export function build125Buckets(maxValue: number): number[] {
  const buckets: number[] = [];
  for (let scale = 1; ; scale *= 10) {
    for (const mantissa of [1, 2, 5]) {
      const value = mantissa * scale;
      if (value > maxValue) return buckets;
      buckets.push(value);
    }
  }
}
