/**
 * From the soak's samples to its verdict: RSS slope per process after warm-up, /health percentiles
 * outside fault windows, and the table and JSON object the run ends with. Each violation is a line
 * of text; none means the run passed.
 *
 * A process read at rest past its warm-up (idle-memory.ts: at the end of the warm-up, and in a long
 * run again where the engine's last incarnation is past its own) and again after the final drain
 * is judged by what it kept between the two readings, in % of the first per hour; any other
 * incarnation with enough samples (an API server restarted late) by the least-squares slope of
 * its samples under load after its own warm-up, in % of its mean per hour. The least-squares slope
 * of the first kind is reported beside, not judged: under a load that moves (faults send a dead
 * server's clients to its sibling) it measures the working set as much as any leak.
 */
import type { Fault } from './faults.js';
import type { ProbeSample } from './health-probe.js';
import type { IdleCheckpoint } from './idle-memory.js';
import type { SoakOptions } from './options.js';
import { type MemoryParts, mappingChanges } from './processes.js';
import type { TrafficCounts } from './traffic.js';

/**
 * One process incarnation's RSS samples: [ms since epoch, bytes], and beside each the RSS's parts
 * (private, shared-region) in bytes, so that a slope can be told apart: private memory that grows
 * is a leak, shared-region pages that grow are this process touching more of a fixed-size region.
 */
export interface RssSeries {
  key: string;
  startedAtMs: number;
  points: [number, number][];
  parts: { anonBytes: number; shmemBytes: number }[];
}

export interface Verdict {
  sent: number;
  completed: number;
  failed: Record<string, number>;
  lost: number;
  leaked_slots: number;
  leaked_blocks: number;
  rss_slope_pct_per_h_max: number | null;
  health_p99_ms: number;
  health_max_ms: number;
  faults_injected: number;
  faults_recovered: number;
  /**
   * Not judged: the same probe of a bare node:http process (the floor server) over the same
   * windows, the /health latency the machine gives a process with nothing else to do.
   */
  floor_health_p99_ms: number | null;
  floor_health_max_ms: number | null;
}

export function rssSlopePctPerH(points: readonly [number, number][]): number {
  const n = points.length;
  let mt = 0;
  let mr = 0;
  for (const [t, r] of points) {
    mt += t / n;
    mr += r / n;
  }
  let num = 0;
  let den = 0;
  for (const [t, r] of points) {
    num += (t - mt) * (r - mr);
    den += (t - mt) ** 2;
  }
  if (den === 0 || mr === 0) return 0;
  const bytesPerMs = num / den;
  return ((bytesPerMs * 3_600_000) / mr) * 100;
}

/** The index of a series' first sample after its warm-up, if it has `slopeWindowS` after it. */
function judgedFrom(s: RssSeries, o: SoakOptions): number | null {
  const from = s.points.findIndex(([t]) => t >= s.startedAtMs + o.warmupS * 1000);
  if (from < 0 || s.points.length - from < 3) return null;
  const span = s.points[s.points.length - 1]![0] - s.points[from]![0];
  return span < o.slopeWindowS * 1000 ? null : from;
}

/** The series without their samples inside quiet spells ([from, to] ms): those are not under load. */
export function outsideSpells(
  series: readonly RssSeries[],
  spells: readonly [number, number][],
): RssSeries[] {
  return series.map((s) => {
    const keep = s.points.map(([t]) => !spells.some(([from, to]) => t >= from && t <= to));
    return {
      ...s,
      points: s.points.filter((_, i) => keep[i]),
      parts: s.parts.filter((_, i) => keep[i]),
    };
  });
}

/** A process read at rest twice: what it kept between the two readings is judged. */
export interface RestPair {
  key: string;
  first: IdleCheckpoint;
  last: IdleCheckpoint;
}

/**
 * Each process at rest at the last checkpoint, paired with the earliest other checkpoint that read
 * it at rest past its own warm-up (`bornAtMs` of its key + `warmupMs`), if one did.
 */
export function restPairs(
  checkpoints: readonly IdleCheckpoint[],
  bornAtMs: ReadonlyMap<string, number>,
  warmupMs: number,
): RestPair[] {
  const last = checkpoints.at(-1);
  if (last === undefined) return [];
  const out: RestPair[] = [];
  for (const key of last.memory.keys()) {
    const born = bornAtMs.get(key);
    if (born === undefined) continue;
    const first = checkpoints.find(
      (c) => c !== last && c.memory.has(key) && c.atMs >= born + warmupMs,
    );
    if (first !== undefined) out.push({ key, first, last });
  }
  return out;
}

/** What each pair's process kept between its readings: the RSS change in % of the first per hour. */
export function idleSlopes(pairs: readonly RestPair[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const { key, first, last } of pairs) {
    const hours = (last.atMs - first.atMs) / 3_600_000;
    const a = first.memory.get(key)!.rssBytes;
    const b = last.memory.get(key)!.rssBytes;
    if (hours > 0 && a > 0) out.set(key, ((b - a) / a / hours) * 100);
  }
  return out;
}

/**
 * "ringserve-api-0#42 RSS 300.0 -> 301.0 MB (private 250.0 -> 251.0, ...)" per pair, then where
 * its private memory grew or shrank by 1 MB or more (processes.ts mappingChanges).
 */
export function idleGrowth(pairs: readonly RestPair[]): string[] {
  return pairs.map(({ key, first, last }) => {
    const changes = mappingChanges(first.mappings.get(key) ?? [], last.mappings.get(key) ?? []);
    const line = growthLine(key, first.memory.get(key)!, last.memory.get(key)!, 1);
    return line + (changes.length > 0 ? `; ${changes.join('; ')}` : '');
  });
}

/**
 * The slope each process is judged by: what it kept between two readings at rest if it has them
 * (restPairs), else its least-squares slope under load.
 */
export function judgedRssSlopes(
  underLoad: ReadonlyMap<string, number>,
  atRest: ReadonlyMap<string, number>,
): Map<string, number> {
  const out = new Map([...underLoad].filter(([k]) => !atRest.has(k)));
  for (const [k, v] of atRest) out.set(k, v);
  return out;
}

/** "<key> RSS a -> b MB (private a -> b, shared region a -> b)", in MB with `digits` decimals. */
function growthLine(key: string, a: MemoryParts, b: MemoryParts, digits: number): string {
  const mb = (bytes: number) => (bytes / 1048576).toFixed(digits);
  return (
    `${key} RSS ${mb(a.rssBytes)} -> ${mb(b.rssBytes)} MB ` +
    `(private ${mb(a.anonBytes)} -> ${mb(b.anonBytes)}, shared region ${mb(a.shmemBytes)} -> ${mb(b.shmemBytes)})`
  );
}

/** Slopes of the series with at least `slopeWindowS` seconds after their warm-up, by key. */
export function judgedSlopes(series: readonly RssSeries[], o: SoakOptions): Map<string, number> {
  const out = new Map<string, number>();
  for (const s of series) {
    const from = judgedFrom(s, o);
    if (from !== null) out.set(s.key, rssSlopePctPerH(s.points.slice(from)));
  }
  return out;
}

/**
 * For each judged series, where its RSS went over the judged span and in which part: e.g.
 * "ringserve-api-1#42 RSS 210 -> 236 MB (private 150 -> 151, shared region 52 -> 77)".
 */
export function judgedGrowth(series: readonly RssSeries[], o: SoakOptions): string[] {
  const out: string[] = [];
  for (const s of series) {
    const from = judgedFrom(s, o);
    if (from === null) continue;
    const at = (i: number): MemoryParts => ({ rssBytes: s.points[i]![1], ...s.parts[i]! });
    out.push(growthLine(s.key, at(from), at(s.points.length - 1), 0));
  }
  return out;
}

/**
 * The probes the verdict judges: started after the warm-up, outside every fault's window and every
 * collection the soak asked for at rest (idle-memory.ts).
 */
export function judgedProbes(
  samples: readonly ProbeSample[],
  faults: readonly Fault[],
  window: { warmupEndMs: number; graceMs: number; endMs: number },
  collections: readonly (readonly [number, number])[] = [],
): ProbeSample[] {
  return samples.filter(
    (s) =>
      s.atMs >= window.warmupEndMs &&
      !collections.some(([from, to]) => s.atMs + s.latencyMs >= from && s.atMs <= to) &&
      !faults.some(
        (f) =>
          s.atMs + s.latencyMs >= f.injectedAtMs &&
          s.atMs <= (f.recoveredAtMs ?? window.endMs) + window.graceMs,
      ),
  );
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

const round = (x: number) => Math.round(x * 100) / 100;

/** p99 and max of judged probes; a probe that got no 200 counts as infinitely slow. */
function probeFigures(probes: readonly ProbeSample[]): { p99: number; max: number } {
  const latencies = probes.map((s) => (s.status === 200 ? s.latencyMs : Number.POSITIVE_INFINITY));
  latencies.sort((a, b) => a - b);
  return {
    p99: round(percentile(latencies, 99)),
    max: round(latencies[latencies.length - 1] ?? 0),
  };
}

export function buildVerdict(
  counts: TrafficCounts,
  leaks: { slots: number; blocks: number },
  slopes: Map<string, number>,
  health: readonly ProbeSample[],
  faults: readonly Fault[],
  floor: readonly ProbeSample[] | null = null,
): Verdict {
  const judged = probeFigures(health);
  const floorFigures = floor === null || floor.length === 0 ? null : probeFigures(floor);
  return {
    sent: counts.sent,
    completed: counts.completed,
    failed: counts.failed,
    lost: counts.lost,
    leaked_slots: leaks.slots,
    leaked_blocks: leaks.blocks,
    rss_slope_pct_per_h_max: slopes.size === 0 ? null : round(Math.max(...slopes.values())),
    health_p99_ms: judged.p99,
    health_max_ms: judged.max,
    faults_injected: faults.length,
    faults_recovered: faults.filter((f) => f.recoveredAtMs !== null).length,
    floor_health_p99_ms: floorFigures?.p99 ?? null,
    floor_health_max_ms: floorFigures?.max ?? null,
  };
}

export function violations(v: Verdict, o: SoakOptions): string[] {
  const out: string[] = [];
  if (v.lost !== 0) out.push(`lost ${v.lost} (must be 0)`);
  if (v.leaked_slots !== 0) out.push(`leaked slots ${v.leaked_slots} (must be 0)`);
  if (v.leaked_blocks !== 0) out.push(`leaked KV blocks ${v.leaked_blocks} (must be 0)`);
  if (v.rss_slope_pct_per_h_max !== null && v.rss_slope_pct_per_h_max > o.maxRssSlopePctPerH) {
    out.push(`RSS slope ${v.rss_slope_pct_per_h_max} %/h > ${o.maxRssSlopePctPerH}`);
  }
  if (v.health_p99_ms > o.healthP99Ms)
    out.push(`/health p99 ${v.health_p99_ms} ms > ${o.healthP99Ms}`);
  if (v.health_max_ms > o.healthMaxMs)
    out.push(`/health max ${v.health_max_ms} ms > ${o.healthMaxMs}`);
  if (v.faults_recovered !== v.faults_injected) {
    out.push(`${v.faults_injected - v.faults_recovered} fault(s) not recovered`);
  }
  if (v.completed === 0) out.push('no request completed');
  return out;
}
