import { round } from '../loadtest/stats.js';

/**
 * The scaling benchmark's output: one row per (request kind, target, listener, API-server count).
 * speedup_vs_1 is requests/s over the same target's (and listener's) count-1 requests/s;
 * efficiency is that speedup divided by the count (1.0 = perfect scaling; on a 2-core machine more
 * than 2 processes cannot reach it).
 */
export interface ScalingRow {
  kind: string;
  target: string;
  /**
   * How connections reach the servers: ringserve's --listener (primary, reuseport), or
   * `node:cluster` for the bare route. Absent in rows of runs before the option: no column then.
   */
  listener?: string;
  api_server_count: number;
  concurrency: number;
  req_s: number;
  tok_s: number;
  p50_ms: number | null;
  p99_ms: number | null;
  speedup_vs_1: number | null;
  efficiency: number | null;
  errors: number;
  /**
   * CPU per answered request in the measured window, us (absent where /proc could not be read,
   * and in rows of runs before these fields): the server's processes together, the engine core's
   * part of that (null for the bare route), the load generator; and the machine's idle share, %.
   */
  server_cpu_us?: number;
  engine_cpu_us?: number | null;
  load_cpu_us?: number;
  idle_pct?: number;
}

const cell = (v: number | null, digits: number): string => {
  if (v === null || !Number.isFinite(v)) return 'n/a';
  return Math.abs(v) >= 1000 ? Math.round(v).toLocaleString('en-US') : v.toFixed(digits);
};

const HEAD = [
  'kind',
  'target',
  'servers',
  'concurrency',
  'req/s',
  'tok/s',
  'p50 ms',
  'p99 ms',
  'x count 1',
  'efficiency',
  'errors',
];

/** A row's leading cells: kind, target, its listener (where the table has that column), servers. */
function keyCells(r: ScalingRow, withListener: boolean): string[] {
  return [
    r.kind,
    r.target,
    ...(withListener ? [r.listener ?? ''] : []),
    String(r.api_server_count),
  ];
}

export function scalingTable(rows: readonly ScalingRow[]): string {
  const withListener = rows.some((r) => r.listener !== undefined);
  const cells = rows.map((r) => [
    ...keyCells(r, withListener),
    String(r.concurrency),
    cell(r.req_s, 1),
    cell(r.tok_s, 0),
    cell(r.p50_ms, 1),
    cell(r.p99_ms, 1),
    cell(r.speedup_vs_1, 2),
    cell(r.efficiency, 2),
    String(r.errors),
  ]);
  const head = withListener ? [...HEAD.slice(0, 2), 'listener', ...HEAD.slice(2)] : HEAD;
  return markdownTable(head, cells, withListener ? 3 : 2);
}

/** A markdown table: the first `textColumns` columns left-aligned, the others right-aligned. */
function markdownTable(head: string[], cells: string[][], textColumns: number): string {
  const all = [head, ...cells];
  const widths = head.map((_, i) => Math.max(...all.map((c) => (c[i] as string).length)));
  const line = (c: string[]): string =>
    `| ${c.map((v, i) => (i < textColumns ? v.padEnd(widths[i] as number) : v.padStart(widths[i] as number))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (i < textColumns ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  return [line(head), rule, ...cells.map(line)].join('\n');
}

/**
 * ringserve's listener modes side by side, one line per (kind, API-server count): requests/s and
 * p99 of each mode, reuseport's requests/s over primary's, and each mode's requests/s over the bare
 * route's at the same count. Empty when the rows hold fewer than two of ringserve's modes.
 */
export function listenerComparison(rows: readonly ScalingRow[]): string {
  const ringserve = rows.filter((r) => r.target === 'ringserve' && r.listener !== undefined);
  const modes = [...new Set(ringserve.map((r) => r.listener as string))];
  if (modes.length < 2) return '';
  const find = (kind: string, target: string, listener: string | null, k: number) =>
    rows.find(
      (r) =>
        r.kind === kind &&
        r.target === target &&
        (listener === null || r.listener === listener) &&
        r.api_server_count === k,
    );
  const keys = [...new Set(ringserve.map((r) => `${r.kind}\t${r.api_server_count}`))];
  const cells = keys.map((key) => {
    const [kind, count] = key.split('\t') as [string, string];
    const k = Number(count);
    const bare = find(kind, 'bare fastify', null, k);
    const of = modes.map((m) => find(kind, 'ringserve', m, k));
    const ratio = (a: ScalingRow | undefined, b: ScalingRow | undefined): number | null =>
      a === undefined || b === undefined || b.req_s === 0 ? null : a.req_s / b.req_s;
    return [
      kind,
      count,
      ...of.flatMap((r) => [cell(r?.req_s ?? null, 1), cell(r?.p99_ms ?? null, 1)]),
      cell(ratio(of[1], of[0]), 2),
      cell(bare?.req_s ?? null, 1),
      ...of.map((r) => cell(ratio(r, bare), 2)),
    ];
  });
  const head = [
    'kind',
    'servers',
    ...modes.flatMap((m) => [`${m} req/s`, `${m} p99 ms`]),
    `${modes[1]} / ${modes[0]}`,
    'bare req/s',
    ...modes.map((m) => `${m} / bare`),
  ];
  return markdownTable(head, cells, 1);
}

/**
 * Where each cell's CPU went, one line per row that has the figures: the server's CPU per request
 * (the engine core's part of it), the load generator's, and how much of the machine stayed idle.
 * On a machine whose cores the load generator shares, a server that costs more per request also
 * takes the generator's time. Empty when no row has them.
 */
export function cpuTable(rows: readonly ScalingRow[]): string {
  const measured = rows.filter((r) => r.server_cpu_us !== undefined);
  if (measured.length === 0) return '';
  const withListener = measured.some((r) => r.listener !== undefined);
  const cells = measured.map((r) => [
    ...keyCells(r, withListener),
    cell(r.req_s, 1),
    cell(r.server_cpu_us ?? null, 0),
    cell(r.engine_cpu_us ?? null, 0),
    cell(r.load_cpu_us ?? null, 0),
    cell(r.idle_pct ?? null, 1),
  ]);
  const head = [
    'kind',
    'target',
    ...(withListener ? ['listener'] : []),
    'servers',
    'req/s',
    'server us/req',
    'engine us/req',
    'load us/req',
    'idle %',
  ];
  return markdownTable(head, cells, withListener ? 3 : 2);
}

export function scalingJson(rows: readonly ScalingRow[]): string {
  const rounded = rows.map((r) => {
    const out = { ...r } as Record<string, unknown>;
    for (const [k, v] of Object.entries(out)) if (typeof v === 'number') out[k] = round(v, 2);
    return out;
  });
  return JSON.stringify({ bench: 'scaling', rows: rounded });
}
