/**
 * /metrics for the whole cluster, rendered by whichever API server is scraped from the shared region
 * alone: the engine's stats block (seqlock copy), every API server's request-metrics slots (summed),
 * every process's health slots and output-ring positions. No process is asked anything at scrape
 * time, so a scrape costs the same whatever the other processes are doing (a sibling in a long GC
 * pause, a busy engine) and never waits.
 *
 * The text is written here, not through prom-client (issue 10, item 7; docs/performance.md, "Metrics exposition and scraping"). The
 * figures already sit in the region, so a prom-client Registry (built once, Gauges and Counters
 * whose collect() read the region, custom collectors for the histograms' bucket slots) only copies
 * them into its objects on every scrape, hashes and re-escapes every label set, and awaits its async
 * metrics(), to produce the same samples. bench:exposition measured both over the same populated
 * region (6 runs, 2 shared cores): per render, p50 32-57 us here against 0.8-1.5 ms through
 * prom-client with 2 API servers, 40-76 us against 1.0-1.8 ms with 4; 83 KB allocated against
 * 900 KB, 100 KB against 1,131 KB, garbage on the main thread that also serves /health. Every
 * label text, bucket label and family header is built once here; a scrape is a pass over ~600
 * float64 slots and string appends.
 *
 * An engine core that fronts several data-parallel engine ranks (EngineCore.rankStats) publishes
 * each rank's figures into the region's rank block (layout.ts, DP RANKS); while it has more than
 * one, the families vLLM labels per engine get one sample per rank, engine="<r>" (their labels are
 * built the first time rank r is rendered, then kept), and ringserve_dp_rank_up says which ranks
 * are attached. With one rank the text is what it is without the block.
 */
import type { RingserveConfig } from '../config.js';
import { readRankStats } from '../shm/dp-ranks.js';
import {
  GC_HIST_STRIDE,
  GC_KIND_COUNT,
  HEALTH_GC_HIST,
  HEALTH_GC_MAX,
  HEALTH_PUBLISHED_AT_MS,
  healthIndex,
  MAX_DP_RANKS,
  outputRingOffset,
  RANK_STAT_SLOTS,
  RANK_UP,
  REQ_METRICS_SLOT_COUNT,
  RM_SUCCESS,
  requestMetricsIndex,
  STAT_BLOCK_SIZE,
  STAT_NUM_GPU_BLOCKS,
  TH_PUBLISHED_AT_MS,
  THREAD_SLOT_COUNT,
  THREAD_STRIDE,
  threadHealthIndex,
} from '../shm/layout.js';
import type { Region } from '../shm/region.js';
import { loadWord, readSlot, ringUsedBytes } from '../shm/words.js';
import type { EngineNote } from '../wire/engine-note.js';
import { GC_BUCKETS } from './buckets.js';
import {
  CACHE_CONFIG_INFO,
  DP_RANK_UP,
  ENGINE_COUNTERS,
  ENGINE_GAUGES,
  GC_DURATION,
  GC_PAUSE_MAX,
  HEALTH_AGE,
  HEALTH_COUNTERS,
  HEALTH_GAUGES,
  OUTPUT_RING_USED,
  REQUEST_COUNTERS,
  REQUEST_SUCCESS,
  RESTART_FAMILIES,
  type RequestHistogram,
  requestHistograms,
  THREAD_FAMILIES,
  VLLM_ENGINE_INFO,
  WEIGHT_BROADCASTER_INFO,
} from './families.js';
import { GC_KIND_NAMES } from './process-health.js';
import {
  bucketLabelTexts,
  familyHeader,
  histogramLines,
  labelText,
  sampleLine,
} from './text-format.js';
import { threadLabel } from './thread-health.js';

/** What a scrape reads besides the region: the engine's stats (a consistent copy, STAT_* order). */
export interface ClusterMetricsSources {
  region: Region;
  config: RingserveConfig;
  engineStats: () => Float64Array;
  /** The engine's note (its info labels become ringserve_vllm_engine_info); absent: none. */
  engineNote?: () => EngineNote;
}

/** One process whose health slots are rendered. */
interface HealthSeries {
  /** f64 index of its HEALTH_* slot 0. */
  base: number;
  /** Output ring byte offset (API servers), or -1 (the engine). */
  ring: number;
  labels: string;
  gcLabels: string[];
  gcBucketLabels: string[][];
  /** API servers: f64 index of thread-health entry 0, and each entry's labels; the engine: -1. */
  threads: number;
  threadLabels: string[];
}

export class ClusterMetrics {
  readonly #region: Region;
  readonly #engineStats: () => Float64Array;
  readonly #engineNote: (() => EngineNote) | null;
  readonly #config: RingserveConfig;
  /** `model_name="...",engine="0"`: vLLM's labels on every vllm:* series. */
  readonly #labels: string;
  readonly #histograms: { family: RequestHistogram; header: string; buckets: string[] }[];
  readonly #successLabels: string[];
  readonly #requestSum = new Float64Array(REQ_METRICS_SLOT_COUNT);
  readonly #requestBases: number[] = [];
  readonly #processes: HealthSeries[] = [];
  /** The rank block's figures as this render read them (readRankStats), and how many ranks. */
  readonly #ranks = new Float64Array(MAX_DP_RANKS * RANK_STAT_SLOTS);
  #rankCount = 0;
  /** `model_name="...",engine="<r>"` of rank r, built the first time rank r is rendered. */
  readonly #rankLabels: string[] = [];
  readonly #rankUpHeader = familyHeader(DP_RANK_UP.name, DP_RANK_UP.help, 'gauge');

  constructor(sources: ClusterMetricsSources) {
    this.#region = sources.region;
    this.#engineStats = sources.engineStats;
    this.#engineNote = sources.engineNote ?? null;
    this.#config = sources.config;
    const params = sources.region.params;
    this.#labels = labelText([
      ['model_name', sources.config.servedModelName],
      ['engine', '0'],
    ]);
    this.#histograms = requestHistograms(sources.config.maxModelLen).map((family) => ({
      family,
      header: familyHeader(family.name, family.help, 'histogram'),
      buckets: bucketLabelTexts(this.#labels, family.bounds),
    }));
    this.#successLabels = REQUEST_SUCCESS.reasons.map(
      (reason) => `${this.#labels},finished_reason="${reason}"`,
    );
    for (let k = 0; k < params.apiServerCount; k++) {
      this.#requestBases.push(requestMetricsIndex(params, k));
      const threads = threadHealthIndex(params, k);
      this.#processes.push(
        healthSeries(healthIndex(params, k), outputRingOffset(params, k), `${k}`, threads),
      );
    }
    this.#processes.push(healthSeries(healthIndex(params, -1), -1, 'engine'));
  }

  /** The whole exposition, at this instant. */
  render(): string {
    this.#rankCount = readRankStats(this.#region, this.#ranks);
    return this.#engineText() + this.#requestText() + this.#healthText() + this.#restartText();
  }

  #engineText(): string {
    const stats = this.#engineStats();
    const labels = this.#labels;
    let text = '';
    for (const g of ENGINE_GAUGES) {
      text += familyHeader(g.name, g.help, 'gauge');
      text += this.#perRank(g.name, labels, stats[g.stat]!, g.rankSlot);
    }
    const info = labelText([
      ['model_name', this.#config.servedModelName],
      ['engine', '0'],
      ['block_size', String(stats[STAT_BLOCK_SIZE] || this.#config.blockSize)],
      ['num_gpu_blocks', String(stats[STAT_NUM_GPU_BLOCKS] || this.#config.numGpuBlocks)],
      ['num_cpu_blocks', 'None'],
      ['cache_dtype', 'auto'],
      ['enable_prefix_caching', 'True'],
    ]);
    text += familyHeader(CACHE_CONFIG_INFO.name, CACHE_CONFIG_INFO.help, 'gauge');
    text += sampleLine(CACHE_CONFIG_INFO.name, info, 1);
    text += this.#vllmInfoText();
    text += this.#broadcasterInfoText();
    for (const c of ENGINE_COUNTERS) {
      text += familyHeader(c.name, c.help, 'counter');
      text += this.#perRank(c.name, labels, stats[c.carry]! + stats[c.stat]!, c.rankSlot);
    }
    return text + this.#rankUpText();
  }

  /**
   * A family's samples: the one `labels` sample of `value`, or, for a family with a RANK_* slot
   * while the engine core fronts several ranks, one sample per rank from the rank block.
   */
  #perRank(name: string, labels: string, value: number, rankSlot: number | undefined): string {
    const count = this.#rankCount;
    if (count <= 1 || rankSlot === undefined) return sampleLine(name, labels, value);
    const ranks = this.#ranks;
    let text = '';
    for (let r = 0; r < count; r++) {
      text += sampleLine(name, this.#rankLabel(r), ranks[r * RANK_STAT_SLOTS + rankSlot]!);
    }
    return text;
  }

  /** ringserve_dp_rank_up, one sample per rank, while there are several. */
  #rankUpText(): string {
    const count = this.#rankCount;
    if (count <= 1) return '';
    const ranks = this.#ranks;
    let text = this.#rankUpHeader;
    for (let r = 0; r < count; r++) {
      text += sampleLine(
        DP_RANK_UP.name,
        this.#rankLabel(r),
        ranks[r * RANK_STAT_SLOTS + RANK_UP]!,
      );
    }
    return text;
  }

  #rankLabel(rank: number): string {
    let labels = this.#rankLabels[rank];
    if (labels === undefined) {
      labels = labelText([
        ['model_name', this.#config.servedModelName],
        ['engine', String(rank)],
      ]);
      this.#rankLabels[rank] = labels;
    }
    return labels;
  }

  /** The vLLM engine's release and the layout in use, while a bridge has one attached. */
  #vllmInfoText(): string {
    const info = this.#engineNote?.().info;
    if (info === undefined || info.vllm_layout === undefined) return '';
    const labels = labelText([
      ['model_name', this.#config.servedModelName],
      ['engine', '0'],
      ['vllm_version', info.vllm_version ?? 'unknown'],
      ['vllm_layout', info.vllm_layout],
    ]);
    return (
      familyHeader(VLLM_ENGINE_INFO.name, VLLM_ENGINE_INFO.help, 'gauge') +
      sampleLine(VLLM_ENGINE_INFO.name, labels, 1)
    );
  }

  /** The broadcaster the engine joined, while its note names one. */
  #broadcasterInfoText(): string {
    const info = this.#engineNote?.().info;
    if (info === undefined || info.weight_broadcaster === undefined) return '';
    const labels = labelText([
      ['model_name', this.#config.servedModelName],
      ['engine', '0'],
      ['address', info.weight_broadcaster],
      ['ranks', info.weight_broadcaster_ranks ?? ''],
      ['session', info.weight_broadcaster_session ?? ''],
    ]);
    return (
      familyHeader(WEIGHT_BROADCASTER_INFO.name, WEIGHT_BROADCASTER_INFO.help, 'gauge') +
      sampleLine(WEIGHT_BROADCASTER_INFO.name, labels, 1)
    );
  }

  #requestText(): string {
    const sum = this.#requestSum;
    sum.fill(0);
    const f64 = this.#region.f64;
    for (const base of this.#requestBases) {
      for (let i = 0; i < REQ_METRICS_SLOT_COUNT; i++) sum[i]! += f64[base + i]!;
    }
    const labels = this.#labels;
    let text = '';
    for (const c of REQUEST_COUNTERS) {
      text += familyHeader(c.name, c.help, 'counter');
      text += this.#perRank(c.name, labels, sum[c.slot]!, c.rankSlot);
    }
    text += familyHeader(REQUEST_SUCCESS.name, REQUEST_SUCCESS.help, 'counter');
    for (let r = 0; r < this.#successLabels.length; r++) {
      text += sampleLine(REQUEST_SUCCESS.name, this.#successLabels[r]!, sum[RM_SUCCESS + r]!);
    }
    for (const h of this.#histograms) {
      text += h.header + histogramLines(h.family.name, labels, h.buckets, sum, h.family.slot);
    }
    return text;
  }

  #healthText(): string {
    const f64 = this.#region.f64;
    const live = this.#processes.filter((p) => f64[p.base + HEALTH_PUBLISHED_AT_MS]! > 0);
    let text = familyHeader(GC_DURATION.name, GC_DURATION.help, 'histogram');
    for (const p of live) {
      for (let k = 0; k < GC_KIND_COUNT; k++) {
        const base = p.base + HEALTH_GC_HIST + k * GC_HIST_STRIDE;
        text += histogramLines(GC_DURATION.name, p.gcLabels[k]!, p.gcBucketLabels[k]!, f64, base);
      }
    }
    text += familyHeader(GC_PAUSE_MAX.name, GC_PAUSE_MAX.help, 'gauge');
    for (const p of live) {
      for (let k = 0; k < GC_KIND_COUNT; k++) {
        text += sampleLine(GC_PAUSE_MAX.name, p.gcLabels[k]!, f64[p.base + HEALTH_GC_MAX + k]!);
      }
    }
    for (const g of HEALTH_GAUGES) {
      text += familyHeader(g.name, g.help, 'gauge');
      for (const p of live) {
        if (g.serversOnly !== true || p.ring >= 0) {
          text += sampleLine(g.name, p.labels, f64[p.base + g.slot]!);
        }
      }
    }
    return text + this.#ringText(live) + this.#ageText(live) + this.#wholeProcessText(live);
  }

  /** CPU time of each process (every thread), GC and heap of each thread of each API server. */
  #wholeProcessText(live: readonly HealthSeries[]): string {
    const f64 = this.#region.f64;
    let text = '';
    for (const c of HEALTH_COUNTERS) {
      text += familyHeader(c.name, c.help, 'counter');
      for (const p of live) {
        if (c.serversOnly !== true || p.ring >= 0) {
          text += sampleLine(c.name, p.labels, f64[p.base + c.slot]!);
        }
      }
    }
    for (const family of THREAD_FAMILIES) {
      text += familyHeader(family.name, family.help, family.type);
      for (const p of live) {
        for (let t = 0; t < p.threadLabels.length; t++) {
          const entry = p.threads + t * THREAD_STRIDE;
          if (f64[entry + TH_PUBLISHED_AT_MS]! === 0) continue;
          text += sampleLine(family.name, p.threadLabels[t]!, f64[entry + family.slot]!);
        }
      }
    }
    return text;
  }

  /** The supervisor's restart counters and backoff, by role. */
  #restartText(): string {
    const { i32, f64 } = this.#region;
    let text = '';
    for (const family of RESTART_FAMILIES) {
      text += familyHeader(family.name, family.help, family.type);
      for (const [role, at] of Object.entries(family.slots)) {
        const value = family.width === 'i32' ? loadWord(i32, at) : readSlot(f64, at);
        text += sampleLine(family.name, `role="${role}"`, value);
      }
    }
    return text;
  }

  #ringText(live: readonly HealthSeries[]): string {
    const i32 = this.#region.i32;
    let text = familyHeader(OUTPUT_RING_USED.name, OUTPUT_RING_USED.help, 'gauge');
    for (const p of live) {
      if (p.ring < 0) continue;
      text += sampleLine(OUTPUT_RING_USED.name, p.labels, ringUsedBytes(i32, p.ring));
    }
    return text;
  }

  #ageText(live: readonly HealthSeries[]): string {
    const f64 = this.#region.f64;
    const now = Date.now();
    let text = familyHeader(HEALTH_AGE.name, HEALTH_AGE.help, 'gauge');
    for (const p of live) {
      const age = Math.max(0, now - f64[p.base + HEALTH_PUBLISHED_AT_MS]!) / 1000;
      text += sampleLine(HEALTH_AGE.name, p.labels, age);
    }
    return text;
  }
}

function healthSeries(base: number, ring: number, apiServer: string, threads = -1): HealthSeries {
  const labels = labelText([['api_server', apiServer]]);
  const gcLabels = GC_KIND_NAMES.map((kind) => `${labels},kind="${kind}"`);
  const entries = threads < 0 ? 0 : THREAD_SLOT_COUNT;
  return {
    base,
    ring,
    labels,
    gcLabels,
    gcBucketLabels: gcLabels.map((l) => bucketLabelTexts(l, GC_BUCKETS)),
    threads,
    threadLabels: Array.from({ length: entries }, (_, t) => `${labels},thread="${threadLabel(t)}"`),
  };
}
