/**
 * /metrics text from a region filled by hand: every family of the contract with HELP and TYPE, the
 * request figures summed over API servers, engine counters carried across a restart, histograms
 * cumulative with _count equal to the +Inf bucket, health series only for processes that published;
 * the per-engine families once per data-parallel rank while the engine core fronts several.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { buildConfig } from '../../src/config.js';
import { TTFT_BUCKETS } from '../../src/obs/buckets.js';
import { ClusterMetrics } from '../../src/obs/exposition.js';
import { RegionHistogram } from '../../src/obs/region-histogram.js';
import { writeRankStats } from '../../src/shm/dp-ranks.js';
import {
  ENGINE_STATS,
  HEALTH_CPU_SYSTEM,
  HEALTH_CPU_USER,
  HEALTH_GC_HIST,
  HEALTH_GC_MAX,
  HEALTH_HEAP_USED,
  HEALTH_INLINE_ANSWERS,
  HEALTH_POOL_IN_USE,
  HEALTH_POOL_ONE_OFF,
  HEALTH_POOL_POOLED,
  HEALTH_PUBLISHED_AT_MS,
  healthIndex,
  MAX_DP_RANKS,
  outputRingOffset,
  RANK_GENERATION_TOKENS,
  RANK_KV_USAGE,
  RANK_PREFIX_HITS,
  RANK_PREFIX_QUERIES,
  RANK_PROMPT_TOKENS,
  RANK_RUNNING,
  RANK_STAT_SLOTS,
  RANK_UP,
  RANK_WAITING,
  RING_HEAD,
  RING_TAIL,
  RM_GENERATION_TOKENS,
  RM_SUCCESS,
  RM_TTFT,
  regionBytes,
  requestMetricsIndex,
  resolveLayoutParams,
  STAT_CARRY_PREEMPTIONS,
  STAT_CARRY_PREFIX_HITS,
  STAT_NUM_PREEMPTIONS,
  STAT_PREFIX_HITS,
  STAT_RUNNING,
  STATS_SLOT_COUNT,
  TH_GC_COUNT,
  TH_GC_MAX,
  TH_GC_SECONDS,
  TH_HEAP_USED,
  TH_PUBLISHED_AT_MS,
  THREAD_FIRST_PACKER,
  THREAD_MAIN,
  THREAD_OUTPUT,
  THREAD_STRIDE,
  threadHealthIndex,
} from '../../src/shm/layout.js';
import type { Region } from '../../src/shm/region.js';
import { beginStatsWrite, endStatsWrite } from '../../src/shm/words.js';
import { hasTool } from '../ops/tools.js';
import { CONTRACT_FAMILIES, parseExposition } from './prom.js';

function fakeRegion(servers: number): Region {
  const params = resolveLayoutParams({
    apiServerCount: servers,
    requestRingBytes: 1024,
    outputRingBytes: 4096,
  });
  const sab = new SharedArrayBuffer(regionBytes(params));
  return {
    name: 'fake',
    sab,
    params,
    i32: new Int32Array(sab, 0, sab.byteLength >> 2),
    f64: new Float64Array(sab, 0, sab.byteLength >> 3),
  };
}

function metricsFor(region: Region, modelName = 'sim-tiny'): ClusterMetrics {
  const config = buildConfig({ model: 'tiny', servedModelName: modelName, apiServerCount: 2 });
  const stats = () => region.f64.slice(ENGINE_STATS >> 3, (ENGINE_STATS >> 3) + STATS_SLOT_COUNT);
  return new ClusterMetrics({ region, config, engineStats: stats });
}

/** What the core loop's publish writes into the rank block: `count` ranks of `rows`, seqlocked. */
function publishRanks(region: Region, count: number, rows: Float64Array): void {
  beginStatsWrite(region.i32);
  writeRankStats(region, count, rows);
  endStatsWrite(region.i32);
}

/** A region with engine, request and health figures in it, as a running cluster has. */
function populated(): Region {
  const region = fakeRegion(2);
  const f64 = region.f64;
  const stats = ENGINE_STATS >> 3;
  f64[stats + STAT_RUNNING] = 5;
  f64[stats + STAT_PREFIX_HITS] = 40;
  f64[stats + STAT_CARRY_PREFIX_HITS] = 2;
  f64[stats + STAT_NUM_PREEMPTIONS] = 3;
  f64[requestMetricsIndex(region.params, 0) + RM_GENERATION_TOKENS] = 300;
  f64[requestMetricsIndex(region.params, 1) + RM_SUCCESS] = 4;
  new RegionHistogram(f64, requestMetricsIndex(region.params, 0) + RM_TTFT, TTFT_BUCKETS).observe(
    0.02,
  );
  // Published "in the future": its age reads 0 in every render, so two renders compare equal.
  f64[healthIndex(region.params, 0) + HEALTH_PUBLISHED_AT_MS] = Date.now() + 3_600_000;
  f64[healthIndex(region.params, 0) + HEALTH_HEAP_USED] = 1234;
  return region;
}

/** Three ranks' figures: rank r's slot s is 100 * r + s + 1 (rank 1 detached). */
function threeRanks(): Float64Array {
  const rows = new Float64Array(MAX_DP_RANKS * RANK_STAT_SLOTS);
  for (let r = 0; r < 3; r++) {
    for (let s = 0; s < RANK_STAT_SLOTS; s++) rows[r * RANK_STAT_SLOTS + s] = 100 * r + s + 1;
    rows[r * RANK_STAT_SLOTS + RANK_UP] = r === 1 ? 0 : 1;
  }
  return rows;
}

/** The families vLLM labels per engine rank, and the RANK_* slot each is read from. */
const PER_RANK: readonly (readonly [string, number])[] = [
  ['vllm:num_requests_running', RANK_RUNNING],
  ['vllm:num_requests_waiting', RANK_WAITING],
  ['vllm:kv_cache_usage_perc', RANK_KV_USAGE],
  ['vllm:prompt_tokens_total', RANK_PROMPT_TOKENS],
  ['vllm:generation_tokens_total', RANK_GENERATION_TOKENS],
  ['vllm:prefix_cache_queries_total', RANK_PREFIX_QUERIES],
  ['vllm:prefix_cache_hits_total', RANK_PREFIX_HITS],
];

describe('cluster metrics exposition', () => {
  it('has every contract family with HELP and TYPE, and vLLM labels on every vllm:* series', () => {
    const region = fakeRegion(2);
    const parsed = parseExposition(metricsFor(region).render());
    for (const [name, type] of CONTRACT_FAMILIES) {
      expect(parsed.help.has(name), `HELP ${name}`).toBe(true);
      expect(parsed.types.get(name), `TYPE ${name}`).toBe(type);
    }
    const vllm = parsed.samples.filter((s) => s.name.startsWith('vllm:'));
    expect(vllm.length).toBeGreaterThan(100);
    for (const s of vllm) {
      expect(s.labels.model_name).toBe('sim-tiny');
      expect(s.labels.engine).toBe('0');
    }
  });

  it('sums request counters and histograms over API servers; engine figures appear once', () => {
    const region = fakeRegion(2);
    const f64 = region.f64;
    const base0 = requestMetricsIndex(region.params, 0);
    const base1 = requestMetricsIndex(region.params, 1);
    f64[base0 + RM_GENERATION_TOKENS] = 300;
    f64[base1 + RM_GENERATION_TOKENS] = 200;
    f64[base0 + RM_SUCCESS + 1] = 6;
    f64[base1 + RM_SUCCESS + 1] = 4;
    new RegionHistogram(f64, base0 + RM_TTFT, TTFT_BUCKETS).observe(0.003);
    new RegionHistogram(f64, base1 + RM_TTFT, TTFT_BUCKETS).observe(0.003);
    new RegionHistogram(f64, base1 + RM_TTFT, TTFT_BUCKETS).observe(5000);
    f64[(ENGINE_STATS >> 3) + STAT_RUNNING] = 3;
    const p = parseExposition(metricsFor(region).render());
    expect(p.value('vllm:generation_tokens_total')).toBe(500);
    expect(p.value('vllm:request_success_total', { finished_reason: 'length' })).toBe(10);
    expect(p.value('vllm:request_success_total', { finished_reason: 'stop' })).toBe(0);
    expect(p.all('vllm:num_requests_running')).toEqual([3]);
    const ttft = 'vllm:time_to_first_token_seconds';
    expect(p.value(`${ttft}_bucket`, { le: '0.001' })).toBe(0);
    expect(p.value(`${ttft}_bucket`, { le: '0.005' })).toBe(2);
    expect(p.value(`${ttft}_bucket`, { le: '2560.0' })).toBe(2);
    expect(p.value(`${ttft}_bucket`, { le: '+Inf' })).toBe(3);
    expect(p.value(`${ttft}_count`)).toBe(3);
    expect(p.value(`${ttft}_sum`)).toBeCloseTo(5000.006, 9);
    // Buckets are cumulative, in order, ending at +Inf.
    const les = p.samples.filter((s) => s.name === `${ttft}_bucket`).map((s) => s.labels.le);
    expect(les).toEqual([
      ...TTFT_BUCKETS.map((b) => (Number.isInteger(b) ? `${b}.0` : `${b}`)),
      '+Inf',
    ]);
  });

  it("adds a restarted engine's carried totals to its counters", () => {
    const region = fakeRegion(1);
    const stats = ENGINE_STATS >> 3;
    region.f64[stats + STAT_CARRY_PREEMPTIONS] = 7;
    region.f64[stats + STAT_NUM_PREEMPTIONS] = 2;
    const p = parseExposition(metricsFor(region).render());
    expect(p.value('vllm:num_preemptions_total')).toBe(9);
  });

  it('renders health only for processes that published, with the engine as api_server="engine"', () => {
    const region = fakeRegion(2);
    const f64 = region.f64;
    const h0 = healthIndex(region.params, 0);
    const he = healthIndex(region.params, -1);
    f64[h0 + HEALTH_PUBLISHED_AT_MS] = Date.now();
    f64[h0 + HEALTH_HEAP_USED] = 1234;
    f64[h0 + HEALTH_GC_MAX + 1] = 0.25; // major
    f64[h0 + HEALTH_GC_HIST + 8 * 1 + 4] = 1; // one major pause in the le=2 bucket
    f64[he + HEALTH_PUBLISHED_AT_MS] = Date.now();
    f64[he + HEALTH_HEAP_USED] = 99;
    const ring = outputRingOffset(region.params, 0);
    Atomics.store(region.i32, (ring + RING_TAIL) >> 2, 0x7fff_ff00);
    Atomics.store(region.i32, (ring + RING_HEAD) >> 2, 0x7fff_ff00 + 0x200); // wrapped past 2^31
    const p = parseExposition(metricsFor(region).render());
    expect(p.value('nodejs_heap_size_used_bytes', { api_server: '0' })).toBe(1234);
    expect(p.value('nodejs_heap_size_used_bytes', { api_server: 'engine' })).toBe(99);
    expect(p.find('nodejs_heap_size_used_bytes', { api_server: '1' })).toBeUndefined();
    expect(p.value('ringserve_gc_pause_max_seconds', { api_server: '0', kind: 'major' })).toBe(
      0.25,
    );
    const gc = { api_server: '0', kind: 'major' };
    expect(p.value('nodejs_gc_duration_seconds_count', gc)).toBe(1);
    expect(p.value('nodejs_gc_duration_seconds_bucket', { ...gc, le: '1.0' })).toBe(0);
    expect(p.value('nodejs_gc_duration_seconds_bucket', { ...gc, le: '2.0' })).toBe(1);
    expect(p.value('ringserve_output_ring_used_bytes', { api_server: '0' })).toBe(0x200);
    expect(p.find('ringserve_output_ring_used_bytes', { api_server: 'engine' })).toBeUndefined();
    expect(p.find('ringserve_requests_in_flight', { api_server: 'engine' })).toBeUndefined();
    expect(p.value('ringserve_health_age_seconds', { api_server: '0' })).toBeLessThan(5);
    // The response pool: an API server's, counters and a gauge; the engine has none.
    f64[h0 + HEALTH_POOL_IN_USE] = 65_536;
    f64[h0 + HEALTH_POOL_POOLED] = 7;
    f64[h0 + HEALTH_POOL_ONE_OFF] = 2;
    f64[h0 + HEALTH_INLINE_ANSWERS] = 5;
    const q = parseExposition(metricsFor(region).render());
    expect(q.value('ringserve_response_pool_in_use_bytes', { api_server: '0' })).toBe(65_536);
    expect(q.value('ringserve_response_pool_answers_total', { api_server: '0' })).toBe(7);
    expect(q.value('ringserve_response_pool_one_off_answers_total', { api_server: '0' })).toBe(2);
    expect(q.value('ringserve_inline_answers_total', { api_server: '0' })).toBe(5);
    expect(q.types.get('ringserve_response_pool_answers_total')).toBe('counter');
    expect(q.types.get('ringserve_inline_answers_total')).toBe('counter');
    expect(q.types.get('ringserve_response_pool_in_use_bytes')).toBe('gauge');
    for (const name of [
      'ringserve_response_pool_in_use_bytes',
      'ringserve_response_pool_answers_total',
      'ringserve_response_pool_one_off_answers_total',
      'ringserve_inline_answers_total',
    ]) {
      expect(q.find(name, { api_server: 'engine' }), name).toBeUndefined();
    }
  });

  it("renders every process's CPU and each API server's published threads, by thread label", () => {
    const region = fakeRegion(2);
    const f64 = region.f64;
    const h1 = healthIndex(region.params, 1);
    f64[h1 + HEALTH_PUBLISHED_AT_MS] = Date.now();
    f64[h1 + HEALTH_CPU_USER] = 12.5;
    f64[h1 + HEALTH_CPU_SYSTEM] = 1.5;
    const threads = threadHealthIndex(region.params, 1);
    const packer2 = threads + (THREAD_FIRST_PACKER + 1) * THREAD_STRIDE;
    for (const [entry, heap] of [
      [threads + THREAD_MAIN * THREAD_STRIDE, 10e6],
      [threads + THREAD_OUTPUT * THREAD_STRIDE, 4e6],
      [packer2, 3e6],
    ] as const) {
      f64[entry + TH_PUBLISHED_AT_MS] = Date.now();
      f64[entry + TH_HEAP_USED] = heap;
    }
    f64[packer2 + TH_GC_SECONDS] = 0.75;
    f64[packer2 + TH_GC_COUNT] = 30;
    f64[packer2 + TH_GC_MAX] = 0.125;
    const p = parseExposition(metricsFor(region).render());
    expect(p.types.get('process_cpu_user_seconds_total')).toBe('counter');
    expect(p.value('process_cpu_user_seconds_total', { api_server: '1' })).toBe(12.5);
    expect(p.value('process_cpu_system_seconds_total', { api_server: '1' })).toBe(1.5);
    expect(p.find('process_cpu_user_seconds_total', { api_server: '0' })).toBeUndefined();
    const heap = 'ringserve_thread_heap_used_bytes';
    expect(p.types.get(heap)).toBe('gauge');
    expect(p.samples.filter((s) => s.name === heap).map((s) => s.labels)).toEqual([
      { api_server: '1', thread: 'main' },
      { api_server: '1', thread: 'output' },
      { api_server: '1', thread: 'packer-2' },
    ]);
    const packer = { api_server: '1', thread: 'packer-2' };
    expect(p.types.get('ringserve_thread_gc_seconds_total')).toBe('counter');
    expect(p.value('ringserve_thread_gc_seconds_total', packer)).toBe(0.75);
    expect(p.value('ringserve_thread_gc_pauses_total', packer)).toBe(30);
    expect(p.value('ringserve_thread_gc_pause_max_seconds', packer)).toBe(0.125);
    expect(p.value(heap, packer)).toBe(3e6);
  });

  it('escapes a served model name in label values', () => {
    const region = fakeRegion(1);
    const text = metricsFor(region, 'a"b\\c').render();
    expect(text).toContain('model_name="a\\"b\\\\c"');
    expect(parseExposition(text).samples[0]!.labels.model_name).toBe('a"b\\c');
  });

  it('renders one rank (or a block never published) as the single engine="0" sample', () => {
    const region = populated();
    const metrics = metricsFor(region);
    const before = metrics.render(); // count 0: no engine has published
    const rows = threeRanks();
    publishRanks(region, 1, rows); // an engine core with one engine: figures ignored
    expect(metrics.render()).toBe(before);
    expect(metricsFor(region).render()).toBe(before);
    const p = parseExposition(before);
    expect(p.types.has('ringserve_dp_rank_up')).toBe(false);
    expect(p.all('vllm:num_requests_running')).toEqual([5]);
    expect(p.all('vllm:generation_tokens_total')).toEqual([300]);
    expect(p.all('vllm:prefix_cache_hits_total')).toEqual([42]);
  });

  it('renders the per-engine families once per rank, engine="<r>", while there are several', () => {
    const region = populated();
    const metrics = metricsFor(region);
    const single = metrics.render();
    publishRanks(region, 3, threeRanks());
    const text = metrics.render();
    const p = parseExposition(text);
    for (const [name, slot] of PER_RANK) {
      const samples = p.samples.filter((s) => s.name === name);
      expect(
        samples.map((s) => s.labels),
        name,
      ).toEqual([0, 1, 2].map((r) => ({ model_name: 'sim-tiny', engine: `${r}` })));
      expect(
        samples.map((s) => s.value),
        name,
      ).toEqual([0, 1, 2].map((r) => 100 * r + slot + 1));
    }
    expect(p.types.get('ringserve_dp_rank_up')).toBe('gauge');
    expect(p.help.get('ringserve_dp_rank_up')).toContain('data-parallel engine rank is attached');
    expect(p.samples.filter((s) => s.name === 'ringserve_dp_rank_up')).toEqual(
      [1, 0, 1].map((up, r) => ({
        name: 'ringserve_dp_rank_up',
        labels: { model_name: 'sim-tiny', engine: `${r}` },
        value: up,
      })),
    );
    // Every other vllm:* family keeps its single engine="0" series.
    const perRank = new Set(PER_RANK.map(([name]) => name));
    for (const s of p.samples) {
      if (s.name.startsWith('vllm:') && !perRank.has(s.name)) expect(s.labels.engine).toBe('0');
    }
    expect(p.value('vllm:num_preemptions_total')).toBe(3);
    expect(p.value('vllm:request_success_total', { finished_reason: 'stop' })).toBe(4);
    expect(p.value('vllm:time_to_first_token_seconds_count')).toBe(1);
    // The rest of the text is unchanged: only the per-rank samples and the new family differ.
    const strip = (t: string) =>
      t
        .split('\n')
        .filter((line) => ![...perRank, 'ringserve_dp_rank_up'].some((n) => line.startsWith(n)))
        .filter((line) => !line.includes('ringserve_dp_rank_up'))
        .join('\n');
    expect(strip(text)).toBe(strip(single));
    // Back to one rank: today's text again.
    publishRanks(region, 1, threeRanks());
    expect(metrics.render()).toBe(single);
  });

  it.skipIf(!hasTool('promtool'))('writes per-rank text that promtool accepts', () => {
    const region = populated();
    publishRanks(region, 3, threeRanks());
    const text = metricsFor(region).render();
    // promtool parses it (exit 1 and "error while linting" otherwise); the one lint problem it
    // reports, exit 3, is vLLM's own naming: a colon in every vllm:* name.
    const result = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    const said = `${result.stdout}${result.stderr}`;
    expect(result.status, said).not.toBe(1);
    const problems = said.split('\n').filter((line) => line.trim() !== '');
    for (const line of problems)
      expect(line).toMatch(/^vllm:\S+ metric names should not contain ':'$/);
    expect(problems.some((line) => line.startsWith('vllm:num_requests_running '))).toBe(true);
  });
});
