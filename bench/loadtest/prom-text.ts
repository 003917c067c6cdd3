import { RS_ERR_BENCH_METRICS } from './errors.js';

/**
 * A reader of the Prometheus text exposition format (version 0.0.4) as /metrics serves it, and the
 * figures the benchmarks take from it. The series names are fixed by the metrics module: per API
 * server (label `api_server="<k>"`) `nodejs_gc_duration_seconds_sum/_count{kind}`,
 * `ringserve_gc_pause_max_seconds{kind}`, `nodejs_eventloop_lag_p99_seconds`,
 * `nodejs_eventloop_lag_max_seconds`, `nodejs_heap_size_used_bytes`,
 * `process_resident_memory_bytes`; cluster-wide `vllm:generation_tokens_total`. Series of those
 * names without an `api_server` label (a process describing only itself) are not per-server figures
 * and are left out. This runs in the probe process once a second, not on a hot path.
 */

export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export const GC_KINDS = ['minor', 'major', 'incremental', 'weakcb'] as const;
export type GcKind = (typeof GC_KINDS)[number];

/** One API server's self-reported figures at one scrape; null where the series is absent. */
export interface ServerFigures {
  server: number;
  gcSeconds: Record<GcKind, number>;
  gcCount: Record<GcKind, number>;
  gcPauseMaxSeconds: Record<GcKind, number>;
  eventLoopLagP99Seconds: number | null;
  eventLoopLagMaxSeconds: number | null;
  heapUsedBytes: number | null;
  rssBytes: number | null;
  /** process_cpu_user_seconds_total + process_cpu_system_seconds_total: every thread's CPU. */
  cpuSeconds: number | null;
  /** ringserve_requests_in_flight */
  inFlight: number | null;
  /** By `thread` label: ringserve_thread_gc_seconds_total, _gc_pause_max_seconds, _heap_used_bytes. */
  threadGcSeconds: Record<string, number>;
  threadGcPauseMaxSeconds: Record<string, number>;
  threadHeapUsedBytes: Record<string, number>;
}

/** What one /metrics scrape says, plain data (it crosses the IPC channel). */
export interface MetricsSnapshot {
  /** Epoch ms when the answer arrived. */
  atMs: number;
  /** Sum over label sets of `vllm:generation_tokens_total`; null when the series is absent. */
  generationTokensTotal: number | null;
  /** Ordered by server index. */
  servers: ServerFigures[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;

function parseValue(text: string, lineNo: number): number {
  if (text === 'NaN') return Number.NaN;
  if (text === '+Inf' || text === 'Inf') return Number.POSITIVE_INFINITY;
  if (text === '-Inf') return Number.NEGATIVE_INFINITY;
  const value = Number(text);
  if (text === '' || Number.isNaN(value)) {
    throw new RS_ERR_BENCH_METRICS(`line ${lineNo}: "${text}" is not a sample value`);
  }
  return value;
}

/** Parses `{a="x",b="y\"z"}` starting at `at` (the `{`); returns the labels and the index after `}`. */
function parseLabels(
  line: string,
  at: number,
  lineNo: number,
): { labels: Record<string, string>; end: number } {
  const labels: Record<string, string> = {};
  let i = at + 1;
  const fail = (what: string): never => {
    throw new RS_ERR_BENCH_METRICS(`line ${lineNo}: ${what}: ${line}`);
  };
  for (;;) {
    while (line[i] === ' ' || line[i] === ',') i++;
    if (line[i] === '}') return { labels, end: i + 1 };
    const name = NAME.exec(line.slice(i))?.[0];
    if (name === undefined) fail('bad label name');
    i += (name as string).length;
    if (line[i] !== '=' || line[i + 1] !== '"') fail('expected =" after a label name');
    i += 2;
    let value = '';
    for (;;) {
      const ch = line[i];
      if (ch === undefined) fail('unterminated label value');
      if (ch === '"') break;
      if (ch === '\\') {
        const next = line[i + 1];
        value += next === 'n' ? '\n' : (next ?? '');
        i += 2;
      } else {
        value += ch;
        i++;
      }
    }
    labels[name as string] = value;
    i++;
  }
}

/** Every sample of a text exposition; comments and blank lines are skipped. */
export function parsePromText(text: string): PromSample[] {
  const samples: PromSample[] = [];
  const lines = text.split('\n');
  for (let n = 0; n < lines.length; n++) {
    const line = (lines[n] as string).trim();
    if (line === '' || line.startsWith('#')) continue;
    const name = NAME.exec(line)?.[0];
    if (name === undefined)
      throw new RS_ERR_BENCH_METRICS(`line ${n + 1}: no metric name: ${line}`);
    let i = name.length;
    let labels: Record<string, string> = {};
    if (line[i] === '{') ({ labels, end: i } = parseLabels(line, i, n + 1));
    const fields = line.slice(i).trim().split(/\s+/);
    samples.push({ name, labels, value: parseValue(fields[0] ?? '', n + 1) });
  }
  return samples;
}

function zeroByKind(): Record<GcKind, number> {
  return { minor: 0, major: 0, incremental: 0, weakcb: 0 };
}

function emptyServer(server: number): ServerFigures {
  return {
    server,
    gcSeconds: zeroByKind(),
    gcCount: zeroByKind(),
    gcPauseMaxSeconds: zeroByKind(),
    eventLoopLagP99Seconds: null,
    eventLoopLagMaxSeconds: null,
    heapUsedBytes: null,
    rssBytes: null,
    cpuSeconds: null,
    inFlight: null,
    threadGcSeconds: {},
    threadGcPauseMaxSeconds: {},
    threadHeapUsedBytes: {},
  };
}

function isGcKind(kind: string | undefined): kind is GcKind {
  return (GC_KINDS as readonly string[]).includes(kind ?? '');
}

/** Folds one labelled sample into its server's figures. */
function applyServerSample(f: ServerFigures, s: PromSample): void {
  const kind = s.labels.kind;
  switch (s.name) {
    case 'nodejs_gc_duration_seconds_sum':
      if (isGcKind(kind)) f.gcSeconds[kind] += s.value;
      break;
    case 'nodejs_gc_duration_seconds_count':
      if (isGcKind(kind)) f.gcCount[kind] += s.value;
      break;
    case 'ringserve_gc_pause_max_seconds':
      if (isGcKind(kind)) f.gcPauseMaxSeconds[kind] = Math.max(f.gcPauseMaxSeconds[kind], s.value);
      break;
    case 'nodejs_eventloop_lag_p99_seconds':
      f.eventLoopLagP99Seconds = s.value;
      break;
    case 'nodejs_eventloop_lag_max_seconds':
      f.eventLoopLagMaxSeconds = s.value;
      break;
    case 'nodejs_heap_size_used_bytes':
      f.heapUsedBytes = s.value;
      break;
    case 'process_resident_memory_bytes':
      f.rssBytes = s.value;
      break;
    case 'process_cpu_user_seconds_total':
    case 'process_cpu_system_seconds_total':
      f.cpuSeconds = (f.cpuSeconds ?? 0) + s.value;
      break;
    case 'ringserve_requests_in_flight':
      f.inFlight = s.value;
      break;
    case 'ringserve_thread_gc_seconds_total':
      f.threadGcSeconds[s.labels.thread ?? ''] = s.value;
      break;
    case 'ringserve_thread_gc_pause_max_seconds':
      f.threadGcPauseMaxSeconds[s.labels.thread ?? ''] = s.value;
      break;
    case 'ringserve_thread_heap_used_bytes':
      f.threadHeapUsedBytes[s.labels.thread ?? ''] = s.value;
      break;
  }
}

/** The benchmark's figures from one scrape's text. */
export function metricsSnapshot(text: string, atMs: number): MetricsSnapshot {
  const byServer = new Map<number, ServerFigures>();
  let generationTokensTotal: number | null = null;
  for (const s of parsePromText(text)) {
    if (s.name === 'vllm:generation_tokens_total') {
      generationTokensTotal = (generationTokensTotal ?? 0) + s.value;
      continue;
    }
    const label = s.labels.api_server;
    if (label === undefined || !/^\d+$/.test(label)) continue;
    const server = Number(label);
    let f = byServer.get(server);
    if (f === undefined) byServer.set(server, (f = emptyServer(server)));
    applyServerSample(f, s);
  }
  const servers = [...byServer.values()].sort((a, b) => a.server - b.server);
  return { atMs, generationTokensTotal, servers };
}

/** True when the scrape carries the per-server self-metrics (the metrics module is in place). */
export function hasServerFigures(s: MetricsSnapshot): boolean {
  return s.servers.some((f) => f.heapUsedBytes !== null);
}
