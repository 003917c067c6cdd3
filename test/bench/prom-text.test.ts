import { describe, expect, it } from 'vitest';
import {
  hasServerFigures,
  metricsSnapshot,
  parsePromText,
} from '../../bench/loadtest/prom-text.js';

// A canned /metrics answer in the shape ringserve serves: two API servers, the engine's own
// process series (api_server="engine", not an API server), histograms, escapes, comments.
const CANNED = `# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="sim-glm-4.5-air",engine="0"} 123456
vllm:cache_config_info{block_size="16",note="a \\"quoted\\" value, with a comma\\nand a newline"} 1
# TYPE nodejs_gc_duration_seconds histogram
nodejs_gc_duration_seconds_bucket{api_server="0",kind="minor",le="0.001"} 10
nodejs_gc_duration_seconds_count{api_server="0",kind="minor"} 40
nodejs_gc_duration_seconds_sum{api_server="0",kind="minor"} 0.25
nodejs_gc_duration_seconds_count{api_server="0",kind="major"} 3
nodejs_gc_duration_seconds_sum{api_server="0",kind="major"} 0.5
nodejs_gc_duration_seconds_count{api_server="1",kind="incremental"} 7
nodejs_gc_duration_seconds_sum{api_server="1",kind="incremental"} 0.125
nodejs_gc_duration_seconds_count{api_server="engine",kind="major"} 99
nodejs_gc_duration_seconds_sum{api_server="engine",kind="major"} 9
ringserve_gc_pause_max_seconds{api_server="0",kind="major"} 0.3
ringserve_gc_pause_max_seconds{api_server="0",kind="minor"} 0.02
ringserve_gc_pause_max_seconds{api_server="1",kind="weakcb"} 0.001
nodejs_eventloop_lag_p99_seconds{api_server="0"} 0.0123
nodejs_eventloop_lag_max_seconds{api_server="0"} 1.5
nodejs_eventloop_lag_max_seconds{api_server="engine"} 7
nodejs_heap_size_used_bytes{api_server="0"} 16777216
nodejs_heap_size_used_bytes{api_server="1"} 8388608
process_resident_memory_bytes{api_server="1"} 4.5e8
process_resident_memory_bytes 1000
nodejs_eventloop_lag_p99_seconds{api_server="0"} NaN 1700000000000
`;

describe('parsePromText', () => {
  it('reads names with colons, labels with escapes, values and optional timestamps', () => {
    const { samples } = parsePromText(CANNED);
    expect(samples[0]).toEqual({
      name: 'vllm:generation_tokens_total',
      labels: { model_name: 'sim-glm-4.5-air', engine: '0' },
      value: 123456,
    });
    expect(samples[1]?.labels.note).toBe('a "quoted" value, with a comma\nand a newline');
    expect(
      samples.find((s) => s.name === 'process_resident_memory_bytes' && s.labels.api_server === '1')
        ?.value,
    ).toBe(4.5e8);
    expect(Number.isNaN(samples[samples.length - 1]?.value)).toBe(true);
    expect(parsePromText('a_total +Inf\nb -Inf\n\n# only a comment\nc Nan\n').samples).toEqual([
      { name: 'a_total', labels: {}, value: Number.POSITIVE_INFINITY },
      { name: 'b', labels: {}, value: Number.NEGATIVE_INFINITY },
      { name: 'c', labels: {}, value: Number.NaN },
    ]);
    expect(parsePromText('').samples).toEqual([]);
  });

  it('reads HELP (unescaped) and TYPE per family, and keeps every labelled histogram series', () => {
    const text = [
      '# HELP h A \\\\ backslash\\nand a newline.',
      '# TYPE h histogram',
      'h_bucket{s="0",le="1.0"} 1',
      'h_bucket{s="0",le="+Inf"} 2',
      'h_count{s="0"} 2',
      'h_sum{s="0"} 0.5',
      'h_bucket{s="1",le="1.0"} 3',
      'h_bucket{s="1",le="+Inf"} 4',
      'h_count{s="1"} 4',
      'h_sum{s="1"} 0.75',
      '',
    ].join('\n');
    const parsed = parsePromText(text);
    expect(parsed.help.get('h')).toBe('A \\ backslash\nand a newline.');
    expect(parsed.types.get('h')).toBe('histogram');
    const value = (name: string, s: string) =>
      parsed.samples.filter((x) => x.name === name && x.labels.s === s).map((x) => x.value);
    expect(value('h_bucket', '0')).toEqual([1, 2]);
    expect(value('h_bucket', '1')).toEqual([3, 4]);
    expect([value('h_count', '0'), value('h_sum', '0')]).toEqual([[2], [0.5]]);
    expect([value('h_count', '1'), value('h_sum', '1')]).toEqual([[4], [0.75]]);
  });

  it('refuses malformed text with a coded error naming the line', () => {
    expect(() => parsePromText('ok 1\nbad{a="x" 1\n')).toThrow(/line 2/);
    expect(() => parsePromText('x{a=1} 2\n')).toThrow(
      expect.objectContaining({ code: 'RS_ERR_BENCH_METRICS' }),
    );
    expect(() => parsePromText('x notanumber\n')).toThrow(/not a sample value/);
    expect(() => parsePromText('x 0x10\n')).toThrow(/not a sample value/);
    expect(() => parsePromText('x 1 2 3\n')).toThrow(/at most a timestamp/);
    expect(() => parsePromText('9x 1\n')).toThrow(/no metric name/);
    expect(() => parsePromText('x{a="\\t"} 1\n')).toThrow(/bad escape/);
    expect(() => parsePromText('x{a="1",a="2"} 1\n')).toThrow(/label a twice/);
    expect(() => parsePromText('# TYPE x gauge\n# TYPE x counter\n')).toThrow(/TYPE twice/);
    expect(() => parsePromText('# TYPE x gauged\n')).toThrow(/unknown type/);
    expect(() => parsePromText('x 1')).toThrow(/does not end with a newline/);
  });
});

describe('metricsSnapshot', () => {
  it('groups the fixed series per API server, leaving out unlabelled and engine series', () => {
    const snap = metricsSnapshot(CANNED, 42);
    expect(snap.atMs).toBe(42);
    expect(snap.generationTokensTotal).toBe(123456);
    expect(snap.servers.map((s) => s.server)).toEqual([0, 1]);
    const [s0, s1] = snap.servers;
    expect(s0?.gcCount).toEqual({ minor: 40, major: 3, incremental: 0, weakcb: 0 });
    expect(s0?.gcSeconds).toEqual({ minor: 0.25, major: 0.5, incremental: 0, weakcb: 0 });
    expect(s0?.gcPauseMaxSeconds.major).toBe(0.3);
    // The last sample of a gauge wins (here a NaN scrape of the same series).
    expect(Number.isNaN(s0?.eventLoopLagP99Seconds)).toBe(true);
    expect(s0?.eventLoopLagMaxSeconds).toBe(1.5);
    expect(s0?.heapUsedBytes).toBe(16777216);
    expect(s0?.rssBytes).toBeNull();
    expect(s1?.gcCount.incremental).toBe(7);
    expect(s1?.gcPauseMaxSeconds.weakcb).toBe(0.001);
    expect(s1?.rssBytes).toBe(4.5e8);
    expect(s1?.eventLoopLagMaxSeconds).toBeNull();
    expect(hasServerFigures(snap)).toBe(true);
  });

  it('reports absent series as null, not zero', () => {
    const snap = metricsSnapshot('# nothing yet\nvllm:num_requests_running 3\n', 1);
    expect(snap.generationTokensTotal).toBeNull();
    expect(snap.servers).toEqual([]);
    expect(hasServerFigures(snap)).toBe(false);
  });
});
