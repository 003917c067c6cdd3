import type { MetricsSnapshot, ServerFigures } from '../loadtest/prom-text.js';
import type { ArmRun } from './run-arm.js';

/**
 * Time series for the report's charts, in seconds since the arm's measured window began (warm-up
 * samples have negative times and are left out).
 */
export interface ArmSeries {
  name: string;
  health: { t: number[]; ms: number[] };
  /** Largest server's event-loop delay p99 and max (since its start) at each scrape, ms. */
  eld: { t: number[]; p99: number[]; max: number[] };
  heapMb: { t: number[]; mb: number[] };
}

const MIB = 1024 * 1024;

function largest(s: MetricsSnapshot, pick: (f: ServerFigures) => number | null): number {
  return Math.max(0, ...s.servers.map((f) => pick(f) ?? 0));
}

export function armSeries(run: ArmRun): ArmSeries {
  const t = (atMs: number): number => (atMs - run.windowStartMs) / 1000;
  const p = run.probe;
  // Probes are recorded as they answer; a chart wants them in the order they were due.
  const healthIdx = p.healthAtMs
    .flatMap((at, i) => (t(at) >= 0 ? [i] : []))
    .sort((a, b) => (p.healthAtMs[a] as number) - (p.healthAtMs[b] as number));
  const snaps = p.metrics.filter((s) => t(s.atMs) >= -0.5 && s.servers.length > 0);
  const st = snaps.map((s) => Math.max(0, t(s.atMs)));
  return {
    name: run.arm.name,
    health: {
      t: healthIdx.map((i) => t(p.healthAtMs[i] as number)),
      ms: healthIdx.map((i) => p.healthMs[i] as number),
    },
    eld: {
      t: st,
      p99: snaps.map((s) => 1000 * largest(s, (f) => f.eventLoopLagP99Seconds)),
      max: snaps.map((s) => 1000 * largest(s, (f) => f.eventLoopLagMaxSeconds)),
    },
    heapMb: { t: st, mb: snaps.map((s) => largest(s, (f) => f.heapUsedBytes) / MIB) },
  };
}
