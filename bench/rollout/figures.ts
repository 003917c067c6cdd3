import {
  GC_KINDS,
  type GcKind,
  type MetricsSnapshot,
  type ServerFigures,
} from '../loadtest/prom-text.js';
import { max, mean, percentile, round } from '../loadtest/stats.js';
import type { ArmRun } from './run-arm.js';

/**
 * The per-arm figures of the report, named as the JSON keys, over the arm's measured window
 * (the warm-up excluded): requests finished in it, probes due in it, counters (GC time and counts,
 * generated tokens) differenced from the scrape at its start to the last; gauges (heap, RSS) are
 * peaks over its once-a-second scrapes. The maxima the servers keep since their start (GC pause,
 * event-loop delay p99 and max) are read at the last scrape: they cover warm-up and window of a
 * fresh cluster. Sums are over API servers; peaks are of the largest server. null: not available.
 * The `_all_threads` figures and CPU cover every thread of an API server (main, output worker,
 * packers, pino's log transport) where the plain ones cover its main thread.
 */
export interface ArmFigures {
  name: string;
  gen_tok_s: number | null;
  done_reqs: number;
  gc_pct_wall: number | null;
  major_gc_count: number | null;
  max_gc_pause_ms: number | null;
  eld_p99_ms: number | null;
  eld_max_ms: number | null;
  health_p50_ms: number | null;
  health_p99_ms: number | null;
  health_max_ms: number | null;
  /**
   * The same probe of the floor server (loadtest/floor-server.ts), a bare node:http process with no
   * work of its own, under the same load: the /health latency the machine itself gives.
   */
  floor_health_p50_ms: number | null;
  floor_health_p99_ms: number | null;
  floor_health_max_ms: number | null;
  update_cycle_p99_ms: number | null;
  resp_bytes_per_token: number | null;
  client_parse_ms_mean: number | null;
  tokens_per_resp: number | null;
  main_heap_peak_mb: number | null;
  rss_peak_mb: number | null;
  // The whole API-server process (issue 11, item 2).
  /** GC pause time of every thread, summed over threads and API servers, % of wall. */
  gc_pct_wall_all_threads: number | null;
  /** Longest GC pause of any thread since its server started. */
  max_gc_pause_ms_all_threads: number | null;
  /** CPU time (user + system) of the API-server processes per 1,000 generated tokens. */
  cpu_ms_per_1k_tokens: number | null;
  /** Peak over scrapes of the heap in use summed over a server's isolates, largest server. */
  heap_peak_mb_all_threads: number | null;
  /** RSS of the largest API server 13 s after its last request ended (probe.ts, DRAIN_SETTLE_MS). */
  rss_after_drain_mb: number | null;
  /** Requests the load generator saw fail (HTTP error, broken or timed-out answer), whole arm. */
  failed_reqs: number;
  // Beyond the list: the rest of item 3, and what a reader needs to trust the row.
  gc_count_by_kind: Record<GcKind, number> | null;
  /** The engine's own generated-token rate (its stats block), a cross-check of gen_tok_s. */
  gen_tok_s_engine: number | null;
  update_cycle_max_ms: number | null;
  update_cycles: number;
  resp_bytes_mean: number | null;
  health_probes: number;
  arm_wall_s: number;
  error_reqs: number;
  health_failures: number;
  update_cycle_failures: number;
  length_mismatches: number;
  notes: string[];
}

const MIB = 1024 * 1024;

/** The arm's samples that fall in its measured window. */
interface Window {
  startMs: number;
  healthMs: number[];
  healthStatus: number[];
  floorMs: number[];
  floorStatus: number[];
  cycleMs: number[];
  /** Scrapes with per-server figures, from the one at the window's start to the last. */
  snaps: MetricsSnapshot[];
  tokens: number[];
  bytes: number[];
}

function windowOf(run: ArmRun): Window {
  const startMs = run.windowStartMs;
  const p = run.probe;
  const healthIdx = p.healthAtMs.flatMap((at, i) => (at >= startMs ? [i] : []));
  const floorIdx = p.floorAtMs.flatMap((at, i) => (at >= startMs ? [i] : []));
  const cycleIdx = p.cycleAtMs.flatMap((at, i) => (at >= startMs ? [i] : []));
  const doneIdx = run.load.finishedAtMs.flatMap((at, i) => (at >= startMs ? [i] : []));
  // The scrape due at the window's start may land a little before it.
  const fromMs = startMs - 500;
  return {
    startMs,
    healthMs: healthIdx.map((i) => p.healthMs[i] as number),
    healthStatus: healthIdx.map((i) => p.healthStatus[i] as number),
    floorMs: floorIdx.map((i) => p.floorMs[i] as number),
    floorStatus: floorIdx.map((i) => p.floorStatus[i] as number),
    cycleMs: cycleIdx.map((i) => p.cycleMs[i] as number),
    snaps: p.metrics.filter(
      (s) => s.atMs >= fromMs && s.servers.some((f) => f.heapUsedBytes !== null),
    ),
    tokens: doneIdx.map((i) => run.load.completionTokens[i] as number),
    bytes: doneIdx.map((i) => run.load.bodyBytes[i] as number),
  };
}

function serverDelta(
  first: MetricsSnapshot,
  last: MetricsSnapshot,
  pick: (f: ServerFigures) => number,
): number {
  let sum = 0;
  for (const end of last.servers) {
    const start = first.servers.find((s) => s.server === end.server);
    sum += pick(end) - (start === undefined ? 0 : pick(start));
  }
  return sum;
}

function peak(
  snapshots: MetricsSnapshot[],
  pick: (f: ServerFigures) => number | null,
): number | null {
  let best: number | null = null;
  for (const s of snapshots) {
    for (const f of s.servers) {
      const v = pick(f);
      if (v !== null) best = Math.max(best ?? v, v);
    }
  }
  return best;
}

const scale = (v: number | null, by: number): number | null => (v === null ? null : v * by);
const sumKinds = (r: Record<GcKind, number>): number => GC_KINDS.reduce((a, k) => a + r[k], 0);
const maxKind = (f: ServerFigures): number =>
  Math.max(...GC_KINDS.map((k) => f.gcPauseMaxSeconds[k]));

function metricsFigures(w: Window): Partial<ArmFigures> {
  const first = w.snaps[0];
  const last = w.snaps[w.snaps.length - 1];
  if (first === undefined || last === undefined || first === last) return {};
  const spanS = (last.atMs - first.atMs) / 1000;
  const countByKind = {} as Record<GcKind, number>;
  for (const k of GC_KINDS) countByKind[k] = serverDelta(first, last, (f) => f.gcCount[k]);
  const gcSeconds = serverDelta(first, last, (f) => sumKinds(f.gcSeconds));
  return {
    gc_pct_wall: (100 * gcSeconds) / spanS,
    major_gc_count: countByKind.major,
    gc_count_by_kind: countByKind,
    max_gc_pause_ms: scale(peak([last], maxKind), 1000),
    eld_p99_ms: scale(
      peak([last], (f) => f.eventLoopLagP99Seconds),
      1000,
    ),
    eld_max_ms: scale(
      peak([last], (f) => f.eventLoopLagMaxSeconds),
      1000,
    ),
    main_heap_peak_mb: scale(
      peak(w.snaps, (f) => f.heapUsedBytes),
      1 / MIB,
    ),
    rss_peak_mb: scale(
      peak(w.snaps, (f) => f.rssBytes),
      1 / MIB,
    ),
    ...threadFigures(w.snaps, first, last, spanS),
  };
}

const values = (r: Record<string, number>): number[] => Object.values(r);
const sum = (xs: number[]): number => xs.reduce((a, x) => a + x, 0);

/** Every thread's GC and heap; absent (null) when the servers publish no per-thread series. */
function threadFigures(
  snaps: MetricsSnapshot[],
  first: MetricsSnapshot,
  last: MetricsSnapshot,
  spanS: number,
): Partial<ArmFigures> {
  if (!last.servers.some((f) => values(f.threadGcSeconds).length > 0)) return {};
  let gcSeconds = 0;
  for (const end of last.servers) {
    const start = first.servers.find((s) => s.server === end.server);
    for (const [thread, total] of Object.entries(end.threadGcSeconds)) {
      gcSeconds += total - (start?.threadGcSeconds[thread] ?? 0);
    }
  }
  const heap = (f: ServerFigures): number | null => {
    const heaps = values(f.threadHeapUsedBytes);
    return heaps.length === 0 ? null : sum(heaps);
  };
  return {
    gc_pct_wall_all_threads: (100 * gcSeconds) / spanS,
    max_gc_pause_ms_all_threads: scale(
      peak([last], (f) => Math.max(0, ...values(f.threadGcPauseMaxSeconds))),
      1000,
    ),
    heap_peak_mb_all_threads: scale(peak(snaps, heap), 1 / MIB),
  };
}

/**
 * CPU ms of the API-server processes per 1,000 generated tokens: their CPU seconds per second of
 * the window over the generated tokens per second (gen tok/s, over the same scrapes).
 */
function cpuPerTokens(w: Window, genTokS: number | null): number | null {
  const first = w.snaps[0];
  const last = w.snaps[w.snaps.length - 1];
  if (first === undefined || last === undefined || first === last || !genTokS) return null;
  if (last.servers.some((f) => f.cpuSeconds === null)) return null;
  const cpuPerS =
    serverDelta(first, last, (f) => f.cpuSeconds ?? 0) / ((last.atMs - first.atMs) / 1000);
  return (cpuPerS / genTokS) * 1e6;
}

/** RSS of the largest API server in the scrape after drain (probe.ts), in MiB. */
function rssAfterDrain(run: ArmRun, notes: string[]): number | null {
  const { drain, drainProblem } = run.probe;
  if (drainProblem !== null) notes.push(`RSS after drain: ${drainProblem}`);
  return drain === null
    ? null
    : scale(
        peak([drain], (f) => f.rssBytes),
        1 / MIB,
      );
}

/** Increase per second of a counter sampled at `atMs`, first to last sample; null if < 2 samples. */
export function counterRate(atMs: readonly number[], values: readonly number[]): number | null {
  const n = Math.min(atMs.length, values.length);
  if (n < 2) return null;
  const spanS = ((atMs[n - 1] as number) - (atMs[0] as number)) / 1000;
  return spanS > 0 ? ((values[n - 1] as number) - (values[0] as number)) / spanS : null;
}

/**
 * Generated tokens per second over the window: `vllm:generation_tokens_total` (cluster-wide,
 * /metrics). Where that counter did not move although the engine generated tokens, the engine's
 * own counter stands in and a note says so; the engine's figure is reported as a cross-check.
 */
function generatedTokensRate(
  run: ArmRun,
  w: Window,
  notes: string[],
): { metrics: number | null; engine: number | null } {
  const fromMs = w.startMs - 500;
  const gens = run.probe.metrics.filter(
    (s) => s.atMs >= fromMs && s.generationTokensTotal !== null,
  );
  const metrics = counterRate(
    gens.map((s) => s.atMs),
    gens.map((s) => s.generationTokensTotal as number),
  );
  const p = run.probe;
  const engineIdx = p.engineTokensAtMs.flatMap((at, i) => (at >= fromMs ? [i] : []));
  const engine = counterRate(
    engineIdx.map((i) => p.engineTokensAtMs[i] as number),
    engineIdx.map((i) => p.engineTokens[i] as number),
  );
  if ((metrics === null || metrics === 0) && engine !== null && engine > 0) {
    const what = metrics === null ? 'is absent' : 'did not move';
    notes.push(`vllm:generation_tokens_total ${what}; gen tok/s is the engine's own counter`);
    return { metrics: engine, engine };
  }
  return { metrics, engine };
}

function runNotes(run: ArmRun, w: Window, m: Partial<ArmFigures>): string[] {
  const { load, probe } = run;
  const notes: string[] = [];
  const ev = run.clusterEvents;
  if (ev.apiServerRestarts + ev.engineRestarts > 0) {
    notes.push(
      `the supervisor restarted ${ev.apiServerRestarts} API server(s) and ${ev.engineRestarts} ` +
        `engine(s) that died (${ev.outOfMemory} reported "JavaScript heap out of memory")`,
    );
  }
  const failed = w.healthStatus.filter((s) => s !== 200).length;
  if (failed > 0) {
    notes.push(
      `${failed} of ${w.healthStatus.length} /health probes got no 200 (no answer or an error)`,
    );
  }
  const floorFailed = w.floorStatus.filter((s) => s !== 200).length;
  if (floorFailed > 0) {
    notes.push(`${floorFailed} of ${w.floorStatus.length} floor /health probes got no 200`);
  }
  if (m.gc_pct_wall === undefined) {
    const why = probe.metricsFailureSample === null ? '' : `: ${probe.metricsFailureSample}`;
    notes.push(`no per-server /metrics figures (${probe.metricsFailures} failed scrapes${why})`);
  }
  if (load.errors > 0)
    notes.push(`${load.errors} failed requests, e.g. ${load.errorSamples[0] ?? ''}`);
  if (probe.cycleFailures > 0) {
    notes.push(`${probe.cycleFailures} failed control cycles: ${probe.cycleFailureSample}`);
  }
  if (load.lengthMismatches > 0) {
    notes.push(`${load.lengthMismatches} responses not as long as their max_tokens (ignore_eos)`);
  }
  return [...notes, ...run.clientParseProblems];
}

export function armFigures(run: ArmRun): ArmFigures {
  const w = windowOf(run);
  const m = metricsFigures(w);
  const notes = runNotes(run, w, m);
  const gen = generatedTokensRate(run, w, notes);
  const tokens = w.tokens.reduce((a, t) => a + Math.max(0, t), 0);
  const bytes = w.bytes.reduce((a, b) => a + b, 0);
  const figures: ArmFigures = {
    name: run.arm.name,
    gen_tok_s: gen.metrics,
    done_reqs: w.tokens.length,
    gc_pct_wall: m.gc_pct_wall ?? null,
    major_gc_count: m.major_gc_count ?? null,
    max_gc_pause_ms: m.max_gc_pause_ms ?? null,
    eld_p99_ms: m.eld_p99_ms ?? null,
    eld_max_ms: m.eld_max_ms ?? null,
    health_p50_ms: percentile(w.healthMs, 50),
    health_p99_ms: percentile(w.healthMs, 99),
    health_max_ms: max(w.healthMs),
    floor_health_p50_ms: percentile(w.floorMs, 50),
    floor_health_p99_ms: percentile(w.floorMs, 99),
    floor_health_max_ms: max(w.floorMs),
    update_cycle_p99_ms: percentile(w.cycleMs, 99),
    resp_bytes_per_token: tokens > 0 ? bytes / tokens : null,
    client_parse_ms_mean: mean(run.clientParseMs),
    tokens_per_resp: mean(w.tokens),
    main_heap_peak_mb: m.main_heap_peak_mb ?? null,
    rss_peak_mb: m.rss_peak_mb ?? null,
    gc_pct_wall_all_threads: m.gc_pct_wall_all_threads ?? null,
    max_gc_pause_ms_all_threads: m.max_gc_pause_ms_all_threads ?? null,
    cpu_ms_per_1k_tokens: cpuPerTokens(w, gen.metrics),
    heap_peak_mb_all_threads: m.heap_peak_mb_all_threads ?? null,
    rss_after_drain_mb: rssAfterDrain(run, notes),
    failed_reqs: run.load.errors,
    gc_count_by_kind: m.gc_count_by_kind ?? null,
    gen_tok_s_engine: gen.engine,
    update_cycle_max_ms: max(w.cycleMs),
    update_cycles: w.cycleMs.length,
    resp_bytes_mean: mean(w.bytes),
    health_probes: w.healthMs.length,
    arm_wall_s: run.wallMs / 1000,
    error_reqs: run.load.errors,
    health_failures: w.healthStatus.filter((s) => s !== 200).length,
    update_cycle_failures: run.probe.cycleFailures,
    length_mismatches: run.load.lengthMismatches,
    notes,
  };
  return roundFigures(figures);
}

function roundFigures(f: ArmFigures): ArmFigures {
  const out = { ...f } as Record<string, unknown>;
  for (const [key, value] of Object.entries(out)) {
    if (typeof value === 'number') out[key] = round(value, key.startsWith('gc_pct_wall') ? 3 : 2);
  }
  return out as unknown as ArmFigures;
}
