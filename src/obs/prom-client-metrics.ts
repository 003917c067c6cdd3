/**
 * EXPERIMENT (issue 10, item 7): the same cluster-wide /metrics as exposition.ts, rendered through
 * prom-client. One Registry built once; prom-client Gauges and Counters whose collect() reads the
 * region at scrape time; the histograms as custom collectors that hand prom-client the region's
 * bucket slots (prom-client's Histogram only counts its own observe() calls and cannot be given
 * bucket counts). Names, help texts, label sets and bucket labels as exposition.ts writes them.
 * bench/exposition.ts compares the two.
 */
import { Counter, Gauge, type Metric, Registry } from 'prom-client';
import {
  GC_HIST_STRIDE,
  GC_KIND_COUNT,
  HEALTH_GC_HIST,
  HEALTH_GC_MAX,
  HEALTH_PUBLISHED_AT_MS,
  healthIndex,
  outputRingOffset,
  REQ_METRICS_SLOT_COUNT,
  RING_HEAD,
  RING_TAIL,
  RM_SUCCESS,
  requestMetricsIndex,
  STAT_BLOCK_SIZE,
  STAT_NUM_GPU_BLOCKS,
} from '../shm/layout.js';
import type { Region } from '../shm/region.js';
import { GC_BUCKETS } from './buckets.js';
import type { ClusterMetricsSources } from './exposition.js';
import {
  CACHE_CONFIG_INFO,
  ENGINE_COUNTERS,
  ENGINE_GAUGES,
  GC_DURATION,
  GC_PAUSE_MAX,
  HEALTH_AGE,
  HEALTH_GAUGES,
  OUTPUT_RING_USED,
  REQUEST_COUNTERS,
  REQUEST_SUCCESS,
  requestHistograms,
} from './families.js';
import { GC_KIND_NAMES } from './process-health.js';
import { bucketBound } from './text-format.js';

type Labels = Record<string, string>;

interface HistogramSeries {
  labels: Labels;
  slots: Float64Array;
  base: number;
}

interface Process {
  base: number;
  ring: number;
  labels: Labels;
  gcLabels: Labels[];
}

/** A histogram family read from region slots, in the shape prom-client's Registry formats. */
class SlotHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly #les: string[];

  constructor(
    readonly name: string,
    readonly help: string,
    bounds: readonly number[],
    private readonly series: () => HistogramSeries[],
  ) {
    this.#les = [...bounds, Number.POSITIVE_INFINITY].map(bucketBound);
  }

  async get() {
    const values: { metricName: string; labels: Labels; value: number }[] = [];
    for (const { labels, slots, base } of this.series()) {
      let cumulative = 0;
      for (let i = 0; i < this.#les.length; i++) {
        cumulative += slots[base + i]!;
        const bucketLabels = { ...labels, le: this.#les[i]! };
        values.push({ metricName: `${this.name}_bucket`, labels: bucketLabels, value: cumulative });
      }
      values.push({ metricName: `${this.name}_count`, labels, value: cumulative });
      values.push({
        metricName: `${this.name}_sum`,
        labels,
        value: slots[base + this.#les.length]!,
      });
    }
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      values,
      aggregator: this.aggregator,
    };
  }

  reset(): void {}
}

export class PromClientClusterMetrics {
  readonly #registry = new Registry();
  readonly #region: Region;
  readonly #engineStats: () => Float64Array;
  readonly #requestBases: number[] = [];
  readonly #requestSum = new Float64Array(REQ_METRICS_SLOT_COUNT);
  readonly #processes: Process[] = [];
  /** Taken once per scrape, before the collectors run: one engine stats copy, the live processes. */
  #stats: Float64Array = new Float64Array(0);
  #live: Process[] = [];

  constructor(sources: ClusterMetricsSources) {
    this.#region = sources.region;
    this.#engineStats = sources.engineStats;
    const params = sources.region.params;
    for (let k = 0; k < params.apiServerCount; k++) {
      this.#requestBases.push(requestMetricsIndex(params, k));
      this.#processes.push(
        processSeries(healthIndex(params, k), outputRingOffset(params, k), `${k}`),
      );
    }
    this.#processes.push(processSeries(healthIndex(params, -1), -1, 'engine'));
    const vllm = { model_name: sources.config.servedModelName, engine: '0' };
    this.#engineFamilies(vllm, sources.config);
    this.#requestFamilies(vllm, sources.config.maxModelLen);
    this.#healthFamilies();
  }

  /** The whole exposition, at this instant. */
  render(): Promise<string> {
    this.#stats = this.#engineStats();
    const sum = this.#requestSum;
    const f64 = this.#region.f64;
    sum.fill(0);
    for (const base of this.#requestBases) {
      for (let i = 0; i < REQ_METRICS_SLOT_COUNT; i++) sum[i]! += f64[base + i]!;
    }
    this.#live = this.#processes.filter((p) => f64[p.base + HEALTH_PUBLISHED_AT_MS]! > 0);
    return this.#registry.metrics();
  }

  #engineFamilies(vllm: Labels, config: ClusterMetricsSources['config']): void {
    const registers = [this.#registry];
    const self = this;
    const labelNames = Object.keys(vllm);
    for (const g of ENGINE_GAUGES) {
      new Gauge({
        name: g.name,
        help: g.help,
        labelNames,
        registers,
        collect() {
          this.set(vllm, self.#stats[g.stat]!);
        },
      });
    }
    const info = {
      ...vllm,
      block_size: '',
      num_gpu_blocks: '',
      num_cpu_blocks: 'None',
      cache_dtype: 'auto',
      enable_prefix_caching: 'True',
    };
    new Gauge({
      name: CACHE_CONFIG_INFO.name,
      help: CACHE_CONFIG_INFO.help,
      labelNames: Object.keys(info),
      registers,
      collect() {
        this.reset();
        const stats = self.#stats;
        info.block_size = String(stats[STAT_BLOCK_SIZE] || config.blockSize);
        info.num_gpu_blocks = String(stats[STAT_NUM_GPU_BLOCKS] || config.numGpuBlocks);
        this.set(info, 1);
      },
    });
    for (const c of ENGINE_COUNTERS) {
      new Counter({
        name: c.name,
        help: c.help,
        labelNames,
        registers,
        collect() {
          this.reset();
          this.inc(vllm, self.#stats[c.carry]! + self.#stats[c.stat]!);
        },
      });
    }
  }

  #requestFamilies(vllm: Labels, maxModelLen: number): void {
    const registers = [this.#registry];
    const sum = this.#requestSum;
    const labelNames = Object.keys(vllm);
    for (const c of REQUEST_COUNTERS) {
      new Counter({
        name: c.name,
        help: c.help,
        labelNames,
        registers,
        collect() {
          this.reset();
          this.inc(vllm, sum[c.slot]!);
        },
      });
    }
    const reasons = REQUEST_SUCCESS.reasons.map((r) => ({ ...vllm, finished_reason: r }));
    new Counter({
      name: REQUEST_SUCCESS.name,
      help: REQUEST_SUCCESS.help,
      labelNames: [...labelNames, 'finished_reason'],
      registers,
      collect() {
        this.reset();
        for (let r = 0; r < reasons.length; r++) this.inc(reasons[r]!, sum[RM_SUCCESS + r]!);
      },
    });
    for (const h of requestHistograms(maxModelLen)) {
      const series = [{ labels: vllm, slots: sum, base: h.slot }];
      this.#register(new SlotHistogram(h.name, h.help, h.bounds, () => series));
    }
  }

  #healthFamilies(): void {
    const registers = [this.#registry];
    const self = this;
    const f64 = this.#region.f64;
    const i32 = this.#region.i32;
    this.#register(
      new SlotHistogram(GC_DURATION.name, GC_DURATION.help, GC_BUCKETS, () =>
        self.#live.flatMap((p) =>
          p.gcLabels.map((labels, k) => ({
            labels,
            slots: f64,
            base: p.base + HEALTH_GC_HIST + k * GC_HIST_STRIDE,
          })),
        ),
      ),
    );
    new Gauge({
      name: GC_PAUSE_MAX.name,
      help: GC_PAUSE_MAX.help,
      labelNames: ['api_server', 'kind'],
      registers,
      collect() {
        this.reset();
        for (const p of self.#live) {
          for (let k = 0; k < GC_KIND_COUNT; k++) {
            this.set(p.gcLabels[k]!, f64[p.base + HEALTH_GC_MAX + k]!);
          }
        }
      },
    });
    for (const g of HEALTH_GAUGES) {
      this.#processGauge(g.name, g.help, g.serversOnly === true, (p) => f64[p.base + g.slot]!);
    }
    // Free-running 32-bit positions: the difference is the occupancy even across a wrap.
    this.#processGauge(
      OUTPUT_RING_USED.name,
      OUTPUT_RING_USED.help,
      true,
      (p) =>
        (Atomics.load(i32, (p.ring + RING_HEAD) >> 2) -
          Atomics.load(i32, (p.ring + RING_TAIL) >> 2)) |
        0,
    );
    this.#processGauge(
      HEALTH_AGE.name,
      HEALTH_AGE.help,
      false,
      (p) => Math.max(0, Date.now() - f64[p.base + HEALTH_PUBLISHED_AT_MS]!) / 1000,
    );
  }

  /** A gauge with one series per live process (API servers only when `serversOnly`). */
  #processGauge(
    name: string,
    help: string,
    serversOnly: boolean,
    value: (p: Process) => number,
  ): void {
    const self = this;
    new Gauge({
      name,
      help,
      labelNames: ['api_server'],
      registers: [this.#registry],
      collect() {
        this.reset();
        for (const p of self.#live) if (!serversOnly || p.ring >= 0) this.set(p.labels, value(p));
      },
    });
  }

  #register(collector: SlotHistogram): void {
    // The Registry calls get() and reads name, help and type; its typings only name its classes.
    this.#registry.registerMetric(collector as unknown as Metric);
  }
}

function processSeries(base: number, ring: number, apiServer: string): Process {
  const labels = { api_server: apiServer };
  return { base, ring, labels, gcLabels: GC_KIND_NAMES.map((kind) => ({ ...labels, kind })) };
}
