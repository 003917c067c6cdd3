import { RS_ERR_BENCH_METRICS } from './errors.js';

/**
 * The one reader of the Prometheus text exposition format (version 0.0.4) in ringserve: the
 * benchmarks (the rollout probe, bench:metrics, bench:exposition) and the metrics tests
 * (test/obs/prom.ts) read /metrics with it. It is strict, so a malformed exposition fails a test
 * rather than being skipped: a sample line it does not understand, a label value with an escape
 * other than \\, \" and \n, a label twice, a family typed twice, or text that does not end with a
 * newline is an RS_ERR_BENCH_METRICS naming the line. Comments other than HELP and TYPE are skipped,
 * as the format says; values are read as Prometheus (Go's ParseFloat) reads them, so NaN, Nan and
 * +Inf are all numbers.
 *
 * Not a library: the npm registry's one parser of this format, parse-prometheus-text-format 1.1.1,
 * merges the labelled series of a histogram into one (api_server="0"'s buckets overwritten by
 * api_server="1"'s) and drops their _count and _sum (its issue #13 and the fix in pull request #8
 * have been open since 2020 and 2019), and keeps values as strings; prom-client writes the format
 * but does not read it.
 *
 * Below the parser, the figures the benchmarks take from a scrape. Their series names are fixed by
 * the metrics module: per API server (label `api_server="<k>"`)
 * `nodejs_gc_duration_seconds_sum/_count{kind}`, `ringserve_gc_pause_max_seconds{kind}`,
 * `nodejs_eventloop_lag_p99_seconds`, `nodejs_eventloop_lag_max_seconds`,
 * `nodejs_heap_size_used_bytes`, `process_resident_memory_bytes`; cluster-wide
 * `vllm:generation_tokens_total`. Series of those names without an `api_server` label (a process
 * describing only itself) are not per-server figures and are left out. This runs in the probe
 * process once a second, not on a hot path.
 */

export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** A parsed exposition: its samples in order, and each family's HELP text and TYPE by name. */
export interface PromText {
  samples: PromSample[];
  help: Map<string, string>;
  types: Map<string, string>;
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

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;
const FLOAT = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
const TIMESTAMP = /^-?\d+$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);
const ESCAPES: Readonly<Record<string, string>> = { '\\': '\\', '"': '"', n: '\n' };

function fail(lineNo: number, what: string, line: string): never {
  throw new RS_ERR_BENCH_METRICS(`line ${lineNo}: ${what}: ${line}`);
}

/** A sample value as Go's strconv.ParseFloat reads it (Prometheus' own parser). */
function parseValue(text: string, lineNo: number, line: string): number {
  const lower = text.toLowerCase();
  if (lower === 'nan') return Number.NaN;
  if (lower === '+inf' || lower === 'inf') return Number.POSITIVE_INFINITY;
  if (lower === '-inf') return Number.NEGATIVE_INFINITY;
  if (!FLOAT.test(text)) fail(lineNo, `"${text}" is not a sample value`, line);
  return Number(text);
}

/** Parses `{a="x",b="y\"z"}` starting at `at` (the `{`); returns the labels and the index after `}`. */
function parseLabels(
  line: string,
  at: number,
  lineNo: number,
): { labels: Record<string, string>; end: number } {
  const labels: Record<string, string> = {};
  let i = at + 1;
  for (;;) {
    while (line[i] === ' ') i++;
    if (line[i] === '}') return { labels, end: i + 1 };
    const name = LABEL_NAME.exec(line.slice(i))?.[0];
    if (name === undefined) fail(lineNo, 'bad label name', line);
    if (Object.hasOwn(labels, name)) fail(lineNo, `label ${name} twice`, line);
    i += name.length;
    if (line[i] !== '=' || line[i + 1] !== '"')
      fail(lineNo, 'expected =" after a label name', line);
    i += 2;
    let value = '';
    for (;;) {
      const ch = line[i];
      if (ch === undefined) fail(lineNo, 'unterminated label value', line);
      if (ch === '"') break;
      if (ch === '\\') {
        const escaped = ESCAPES[line[i + 1] ?? ''];
        if (escaped === undefined) fail(lineNo, 'bad escape in a label value', line);
        value += escaped;
        i += 2;
      } else {
        value += ch;
        i++;
      }
    }
    labels[name] = value;
    i++;
    while (line[i] === ' ') i++;
    if (line[i] === ',') i++;
    else if (line[i] !== '}') fail(lineNo, 'expected , or } after a label value', line);
  }
}

/** One sample line: name, optional labels, value, optional integer timestamp. */
function parseSample(line: string, lineNo: number): PromSample {
  const name = METRIC_NAME.exec(line)?.[0];
  if (name === undefined) fail(lineNo, 'no metric name', line);
  let i = name.length;
  let labels: Record<string, string> = {};
  if (line[i] === '{') ({ labels, end: i } = parseLabels(line, i, lineNo));
  else if (line[i] !== ' ' && line[i] !== '\t') fail(lineNo, 'bad metric name', line);
  const fields = line.slice(i).trim().split(/\s+/);
  if (fields.length > 2 || (fields.length === 2 && !TIMESTAMP.test(fields[1]!))) {
    fail(lineNo, 'expected a value and at most a timestamp', line);
  }
  return { name, labels, value: parseValue(fields[0]!, lineNo, line) };
}

/** A `# HELP` or `# TYPE` line into `into`; any other comment is left alone. */
function parseComment(line: string, lineNo: number, into: PromText): void {
  const m = /^#\s+(HELP|TYPE)\s+(\S+)(?:\s(.*))?$/.exec(line);
  if (m === null) return;
  const keyword = m[1];
  const name = m[2]!;
  const rest = m[3] ?? '';
  if (METRIC_NAME.exec(name)?.[0] !== name) fail(lineNo, 'bad metric name', line);
  if (keyword === 'HELP') {
    if (into.help.has(name)) fail(lineNo, `HELP twice for ${name}`, line);
    into.help.set(
      name,
      rest.replace(/\\(\\|n)/g, (_, c: string) => (c === 'n' ? '\n' : '\\')),
    );
  } else {
    if (into.types.has(name)) fail(lineNo, `TYPE twice for ${name}`, line);
    const type = rest.trim();
    if (!TYPES.has(type)) fail(lineNo, `unknown type "${type}"`, line);
    into.types.set(name, type);
  }
}

/** Every sample, HELP text and TYPE of a text exposition. */
export function parsePromText(text: string): PromText {
  const parsed: PromText = { samples: [], help: new Map(), types: new Map() };
  if (text !== '' && !text.endsWith('\n')) {
    throw new RS_ERR_BENCH_METRICS('the exposition does not end with a newline');
  }
  const lines = text.split('\n');
  for (let n = 0; n < lines.length - 1; n++) {
    const line = lines[n]!.trim();
    if (line === '') continue;
    if (line.startsWith('#')) parseComment(line, n + 1, parsed);
    else parsed.samples.push(parseSample(line, n + 1));
  }
  return parsed;
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
  for (const s of parsePromText(text).samples) {
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
