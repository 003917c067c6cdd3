/**
 * A shared region filled as a cluster's would be after two hours of RL rollouts, for
 * bench/exposition.ts: per API server 3,000 finished requests (prompts ~2k tokens, answers
 * log-normal around 12.5k, ~300 inter-token gaps observed per request), counters, every request
 * histogram, health figures and GC histograms for every process, output rings partly full; the
 * engine's stats block running 128 requests. Deterministic (a seeded generator), in a
 * SharedArrayBuffer rather than shared memory: a render reads the same float64 slots either way.
 */
import {
  build125Buckets,
  GC_BUCKETS,
  ITL_BUCKETS,
  REQUEST_LATENCY_BUCKETS,
  TTFT_BUCKETS,
} from '../../src/obs/buckets.js';
import { RegionHistogram } from '../../src/obs/region-histogram.js';
import {
  ENGINE_STATS_INDEX,
  GC_HIST_STRIDE,
  GC_KIND_COUNT,
  HEALTH_GC_HIST,
  HEALTH_GC_MAX,
  HEALTH_HEAP_USED,
  HEALTH_IN_FLIGHT,
  HEALTH_LAG_MAX,
  HEALTH_LAG_P50,
  HEALTH_LAG_P99,
  HEALTH_PACKER_QUEUE,
  HEALTH_PID,
  HEALTH_PUBLISHED_AT_MS,
  HEALTH_RSS,
  healthIndex,
  outputRingOffset,
  RING_HEAD,
  RING_TAIL,
  RM_DECODE,
  RM_E2E,
  RM_GENERATION_HIST,
  RM_GENERATION_TOKENS,
  RM_INFERENCE,
  RM_ITL,
  RM_PREFILL,
  RM_PROMPT_HIST,
  RM_PROMPT_TOKENS,
  RM_QUEUE,
  RM_SUCCESS,
  RM_TTFT,
  regionBytes,
  requestMetricsIndex,
  resolveLayoutParams,
  STAT_BLOCK_SIZE,
  STAT_KV_USAGE,
  STAT_NUM_GPU_BLOCKS,
  STAT_NUM_PREEMPTIONS,
  STAT_PREFIX_HITS,
  STAT_PREFIX_QUERIES,
  STAT_RUNNING,
  STAT_WAITING,
  STATS_SLOT_COUNT,
} from '../../src/shm/layout.js';
import type { Region } from '../../src/shm/region.js';
import { slotsView, storeWord, wordsView } from '../../src/shm/words.js';

const REQUESTS_PER_SERVER = 3000;
const GAPS_PER_REQUEST = 300;

/** mulberry32: a small seeded generator, so every run renders the same figures. */
function generator(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function logNormal(random: () => number, mean: number, sigma: number): number {
  const z = Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  return mean * Math.exp(sigma * z - (sigma * sigma) / 2);
}

function fillRequests(
  f64: Float64Array,
  base: number,
  maxModelLen: number,
  random: () => number,
): void {
  const hist = (slot: number, bounds: readonly number[]) =>
    new RegionHistogram(f64, base + slot, bounds);
  const tokens = build125Buckets(maxModelLen);
  const ttft = hist(RM_TTFT, TTFT_BUCKETS);
  const itl = hist(RM_ITL, ITL_BUCKETS);
  const latency = [RM_E2E, RM_QUEUE, RM_INFERENCE, RM_PREFILL, RM_DECODE].map((slot) =>
    hist(slot, REQUEST_LATENCY_BUCKETS),
  );
  const promptHist = hist(RM_PROMPT_HIST, tokens);
  const generationHist = hist(RM_GENERATION_HIST, tokens);
  for (let r = 0; r < REQUESTS_PER_SERVER; r++) {
    const prompt = Math.round(logNormal(random, 2048, 0.4));
    const generated = Math.min(maxModelLen - prompt, Math.round(logNormal(random, 12_500, 0.5)));
    const queue = logNormal(random, 0.4, 1);
    const prefill = logNormal(random, 0.25, 0.5);
    const decode = generated * logNormal(random, 0.03, 0.2);
    ttft.observe(queue + prefill);
    for (let g = 0; g < GAPS_PER_REQUEST; g++) itl.observe(logNormal(random, 0.03, 0.3));
    const times = [queue + prefill + decode, queue, prefill + decode, prefill, decode];
    for (let i = 0; i < times.length; i++) latency[i]!.observe(times[i]!);
    promptHist.observe(prompt);
    generationHist.observe(generated);
    f64[base + RM_PROMPT_TOKENS]! += prompt;
    f64[base + RM_GENERATION_TOKENS]! += generated;
    const u = random();
    f64[base + RM_SUCCESS + (u < 0.85 ? 1 : u < 0.99 ? 0 : 2)]! += 1; // length, stop, abort
  }
}

function fillHealth(region: Region, base: number, random: () => number, now: number): void {
  const f64 = region.f64;
  f64[base + HEALTH_PUBLISHED_AT_MS] = now - random() * 1000;
  f64[base + HEALTH_PID] = 10_000 + Math.floor(random() * 50_000);
  f64[base + HEALTH_HEAP_USED] = Math.round(60e6 + random() * 40e6);
  f64[base + HEALTH_RSS] = Math.round(300e6 + random() * 100e6);
  f64[base + HEALTH_LAG_P50] = 0.0101 + random() * 1e-3;
  f64[base + HEALTH_LAG_P99] = 0.0151 + random() * 5e-3;
  f64[base + HEALTH_LAG_MAX] = 0.05 + random() * 0.2;
  f64[base + HEALTH_IN_FLIGHT] = 64;
  f64[base + HEALTH_PACKER_QUEUE] = Math.floor(random() * 4);
  const pauses = [20_000, 300, 500, 10]; // minor, major, incremental, weakcb, in two hours
  const typical = [0.0008, 0.012, 0.002, 0.0001];
  for (let k = 0; k < GC_KIND_COUNT; k++) {
    const gc = new RegionHistogram(f64, base + HEALTH_GC_HIST + k * GC_HIST_STRIDE, GC_BUCKETS);
    let max = 0;
    for (let i = 0; i < pauses[k]!; i++) {
      const pause = logNormal(random, typical[k]!, 0.8);
      gc.observe(pause);
      max = Math.max(max, pause);
    }
    f64[base + HEALTH_GC_MAX + k] = max;
  }
}

/**
 * A populated region for `servers` API servers (token-count buckets as for `maxModelLen`, as the
 * exposition reads them), and its engine stats as the engine client reads them.
 */
export function populatedRegion(
  servers: number,
  maxModelLen: number,
): { region: Region; stats: () => Float64Array } {
  const params = resolveLayoutParams({
    apiServerCount: servers,
    requestRingBytes: 1024,
    outputRingBytes: 1 << 20,
  });
  const sab = new SharedArrayBuffer(regionBytes(params));
  const region: Region = {
    name: 'bench-exposition',
    sab,
    params,
    i32: wordsView(sab),
    f64: slotsView(sab),
  };
  const random = generator(0x5eed + servers);
  const now = Date.now();
  for (let k = 0; k < servers; k++) {
    fillRequests(region.f64, requestMetricsIndex(params, k), maxModelLen, random);
    fillHealth(region, healthIndex(params, k), random, now);
    const ring = outputRingOffset(params, k);
    const tail = Math.floor(random() * 2 ** 31);
    storeWord(region.i32, ring + RING_TAIL, tail);
    storeWord(region.i32, ring + RING_HEAD, (tail + Math.floor(random() * 65_536)) | 0);
  }
  fillHealth(region, healthIndex(params, -1), random, now);
  const stats = ENGINE_STATS_INDEX;
  const f64 = region.f64;
  f64[stats + STAT_RUNNING] = 128;
  f64[stats + STAT_WAITING] = 5;
  f64[stats + STAT_KV_USAGE] = 0.7341796875;
  f64[stats + STAT_NUM_PREEMPTIONS] = 37;
  f64[stats + STAT_PREFIX_QUERIES] = 2048 * 3000 * servers;
  f64[stats + STAT_PREFIX_HITS] = 16 * 41_000 * servers;
  f64[stats + STAT_NUM_GPU_BLOCKS] = 40_000;
  f64[stats + STAT_BLOCK_SIZE] = 16;
  // The engine client's seqlock copy goes into one preallocated array; so does this one.
  const copy = new Float64Array(STATS_SLOT_COUNT);
  const read = (): Float64Array => {
    copy.set(f64.subarray(stats, stats + STATS_SLOT_COUNT));
    return copy;
  };
  return { region, stats: read };
}
