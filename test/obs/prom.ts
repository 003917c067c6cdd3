// A strict reader of the Prometheus text format for the metrics tests: it refuses lines it does not
// understand, so a malformed exposition fails the test rather than being skipped.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  help: Set<string>;
  types: Map<string, string>;
  samples: Sample[];
  /** The one sample of `name` whose labels include `labels`; throws if none or several. */
  value(name: string, labels?: Record<string, string>): number;
  find(name: string, labels?: Record<string, string>): Sample | undefined;
  /** Values of every sample named `name`. */
  all(name: string): number[];
}

/** The families CONTRACT.md's Metrics section lists, with their type. */
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

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)/y;

function parseLabels(text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  LABEL.lastIndex = 0;
  while (LABEL.lastIndex < text.length) {
    const m = LABEL.exec(text);
    if (m === null) throw new Error(`bad labels: ${line}`);
    labels[m[1]!] = m[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
  }
  return labels;
}

function parseValue(text: string, line: string): number {
  if (text === '+Inf') return Number.POSITIVE_INFINITY;
  if (text === '-Inf') return Number.NEGATIVE_INFINITY;
  if (text === 'NaN') return Number.NaN;
  const value = Number(text);
  if (Number.isNaN(value)) throw new Error(`bad value: ${line}`);
  return value;
}

export function parseExposition(text: string): Exposition {
  const help = new Set<string>();
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  if (!text.endsWith('\n')) throw new Error('exposition does not end with a newline');
  for (const line of text.slice(0, -1).split('\n')) {
    if (line.startsWith('# HELP ')) help.add(line.split(' ')[2]!);
    else if (line.startsWith('# TYPE ')) {
      const [, , name, type] = line.split(' ');
      if (types.has(name!)) throw new Error(`TYPE twice for ${name}`);
      types.set(name!, type!);
    } else {
      const m = SAMPLE.exec(line);
      if (m === null) throw new Error(`bad line: ${line}`);
      samples.push({
        name: m[1]!,
        labels: m[3] === undefined ? {} : parseLabels(m[3], line),
        value: parseValue(m[4]!, line),
      });
    }
  }
  const matching = (name: string, labels: Record<string, string>) =>
    samples.filter(
      (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
    );
  return {
    help,
    types,
    samples,
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
