// What the metrics tests assert on: an exposition read by the one Prometheus text parser
// (bench/loadtest/prom-text.ts, strict: a malformed line fails the test), with look-ups by name and
// labels, and the families docs/contract.md's Metrics section lists.
import { type PromSample, type PromText, parsePromText } from '../../bench/loadtest/prom-text.js';

export type Sample = PromSample;

export interface Exposition extends PromText {
  /** The one sample of `name` whose labels include `labels`; throws if none or several. */
  value(name: string, labels?: Record<string, string>): number;
  find(name: string, labels?: Record<string, string>): Sample | undefined;
  /** Values of every sample named `name`. */
  all(name: string): number[];
}

/** The families docs/contract.md's Metrics section lists, with their type. */
export const CONTRACT_FAMILIES: readonly (readonly [string, string])[] = [
  ['vllm:num_requests_running', 'gauge'],
  ['vllm:num_requests_waiting', 'gauge'],
  ['vllm:kv_cache_usage_perc', 'gauge'],
  ['vllm:cache_config_info', 'gauge'],
  ['vllm:prompt_tokens_total', 'counter'],
  ['vllm:generation_tokens_total', 'counter'],
  ['vllm:request_success_total', 'counter'],
  ['vllm:num_preemptions_total', 'counter'],
  ['vllm:prefix_cache_queries_total', 'counter'],
  ['vllm:prefix_cache_hits_total', 'counter'],
  ['vllm:time_to_first_token_seconds', 'histogram'],
  ['vllm:inter_token_latency_seconds', 'histogram'],
  ['vllm:e2e_request_latency_seconds', 'histogram'],
  ['vllm:request_queue_time_seconds', 'histogram'],
  ['vllm:request_prefill_time_seconds', 'histogram'],
  ['vllm:request_decode_time_seconds', 'histogram'],
  ['vllm:request_prompt_tokens', 'histogram'],
  ['vllm:request_generation_tokens', 'histogram'],
  ['nodejs_gc_duration_seconds', 'histogram'],
  ['ringserve_gc_pause_max_seconds', 'gauge'],
  ['nodejs_eventloop_lag_p50_seconds', 'gauge'],
  ['nodejs_eventloop_lag_p99_seconds', 'gauge'],
  ['nodejs_eventloop_lag_max_seconds', 'gauge'],
  ['nodejs_heap_size_used_bytes', 'gauge'],
  ['process_resident_memory_bytes', 'gauge'],
  ['ringserve_output_ring_used_bytes', 'gauge'],
  ['ringserve_packer_queue_depth', 'gauge'],
  ['ringserve_requests_in_flight', 'gauge'],
];

export function parseExposition(text: string): Exposition {
  const parsed = parsePromText(text);
  const matching = (name: string, labels: Record<string, string>) =>
    parsed.samples.filter(
      (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
    );
  return {
    ...parsed,
    value(name, labels = {}) {
      const found = matching(name, labels);
      if (found.length !== 1) {
        throw new Error(`${found.length} samples of ${name} ${JSON.stringify(labels)}`);
      }
      return found[0]!.value;
    },
    find: (name, labels = {}) => matching(name, labels)[0],
    all: (name) => matching(name, {}).map((s) => s.value),
  };
}
