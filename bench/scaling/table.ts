import { round } from '../loadtest/stats.js';

/**
 * The scaling benchmark's output: one row per (request kind, target, API-server count). speedup_vs_1
 * is requests/s over the same target's count-1 requests/s; efficiency is that speedup divided by
 * the count (1.0 = perfect scaling; on a 2-core machine more than 2 processes cannot reach it).
 */
export interface ScalingRow {
  kind: string;
  target: string;
  api_server_count: number;
  concurrency: number;
  req_s: number;
  tok_s: number;
  p50_ms: number | null;
  p99_ms: number | null;
  speedup_vs_1: number | null;
  efficiency: number | null;
  errors: number;
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

export function scalingTable(rows: readonly ScalingRow[]): string {
  const cells = rows.map((r) => [
    r.kind,
    r.target,
    String(r.api_server_count),
    String(r.concurrency),
    cell(r.req_s, 1),
    cell(r.tok_s, 0),
    cell(r.p50_ms, 1),
    cell(r.p99_ms, 1),
    cell(r.speedup_vs_1, 2),
    cell(r.efficiency, 2),
    String(r.errors),
  ]);
  const all = [HEAD, ...cells];
  const widths = HEAD.map((_, i) => Math.max(...all.map((c) => (c[i] as string).length)));
  const line = (c: string[]): string =>
    `| ${c.map((v, i) => (i < 2 ? v.padEnd(widths[i] as number) : v.padStart(widths[i] as number))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (i < 2 ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  return [line(HEAD), rule, ...cells.map(line)].join('\n');
}

export function scalingJson(rows: readonly ScalingRow[]): string {
  const rounded = rows.map((r) => {
    const out = { ...r } as Record<string, unknown>;
    for (const [k, v] of Object.entries(out)) if (typeof v === 'number') out[k] = round(v, 2);
    return out;
  });
  return JSON.stringify({ bench: 'scaling', rows: rounded });
}
