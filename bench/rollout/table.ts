import type { ArmFigures } from './figures.js';

/**
 * The report's text forms: the markdown table (one row per arm, in the order run), the ratio lines
 * between each objects arm and its packed counterpart (reported whatever they are), and the JSON
 * line `{"profile", "arms": [...]}`.
 */

const fmt = (v: number | null, digits = 1): string => {
  if (v === null || !Number.isFinite(v)) return 'n/a';
  if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString('en-US');
  return v.toFixed(digits);
};

const trio = (a: number | null, b: number | null, c: number | null, digits = 1): string =>
  `${fmt(a, digits)} / ${fmt(b, digits)} / ${fmt(c, digits)}`;

interface Column {
  head: string;
  cell(f: ArmFigures): string;
}

const COLUMNS: readonly Column[] = [
  { head: 'arm', cell: (f) => f.name },
  { head: 'gen tok/s', cell: (f) => fmt(f.gen_tok_s, 0) },
  { head: 'CPU ms / 1k tok', cell: (f) => fmt(f.cpu_ms_per_1k_tokens) },
  { head: 'done reqs', cell: (f) => String(f.done_reqs) },
  { head: 'failed reqs', cell: (f) => String(f.failed_reqs) },
  { head: 'GC % wall', cell: (f) => fmt(f.gc_pct_wall, 2) },
  { head: 'GC % wall all threads', cell: (f) => fmt(f.gc_pct_wall_all_threads, 2) },
  { head: 'major GCs', cell: (f) => fmt(f.major_gc_count, 0) },
  { head: 'max GC pause ms', cell: (f) => fmt(f.max_gc_pause_ms) },
  { head: 'max GC pause all threads ms', cell: (f) => fmt(f.max_gc_pause_ms_all_threads) },
  { head: 'ELD p99 / max ms', cell: (f) => `${fmt(f.eld_p99_ms)} / ${fmt(f.eld_max_ms)}` },
  {
    head: '/health p50 / p99 / max ms',
    cell: (f) =>
      trio(f.health_p50_ms, f.health_p99_ms, f.health_max_ms) +
      (f.health_failures > 0 ? ` (${f.health_failures} failed)` : ''),
  },
  {
    head: 'floor /health p50 / p99 / max ms',
    cell: (f) => trio(f.floor_health_p50_ms, f.floor_health_p99_ms, f.floor_health_max_ms),
  },
  {
    head: 'update cycle p99 / max ms',
    cell: (f) => `${fmt(f.update_cycle_p99_ms)} / ${fmt(f.update_cycle_max_ms)}`,
  },
  {
    head: 'resp MB',
    cell: (f) => fmt(f.resp_bytes_mean === null ? null : f.resp_bytes_mean / 1e6, 3),
  },
  { head: 'bytes/token', cell: (f) => fmt(f.resp_bytes_per_token) },
  { head: 'client parse ms', cell: (f) => fmt(f.client_parse_ms_mean, 2) },
  { head: 'tokens/resp', cell: (f) => fmt(f.tokens_per_resp, 0) },
  { head: 'heap peak MB', cell: (f) => fmt(f.main_heap_peak_mb) },
  { head: 'heap peak all threads MB', cell: (f) => fmt(f.heap_peak_mb_all_threads) },
  { head: 'RSS peak MB', cell: (f) => fmt(f.rss_peak_mb) },
  { head: 'RSS after drain MB', cell: (f) => fmt(f.rss_after_drain_mb) },
];

export function markdownTable(arms: readonly ArmFigures[]): string {
  const rows = [COLUMNS.map((c) => c.head), ...arms.map((f) => COLUMNS.map((c) => c.cell(f)))];
  const widths = COLUMNS.map((_, i) => Math.max(...rows.map((r) => (r[i] as string).length)));
  const line = (cells: string[]): string =>
    `| ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (i === 0 ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  return [line(rows[0] as string[]), rule, ...rows.slice(1).map(line)].join('\n');
}

const RATIO_FIGURES: readonly [keyof ArmFigures, string][] = [
  ['gen_tok_s', 'gen tok/s'],
  ['cpu_ms_per_1k_tokens', 'CPU per token'],
  ['gc_pct_wall', 'GC % wall'],
  ['gc_pct_wall_all_threads', 'GC % wall all threads'],
  ['max_gc_pause_ms', 'max GC pause'],
  ['eld_max_ms', 'ELD max'],
  ['health_p99_ms', '/health p99'],
  ['health_max_ms', '/health max'],
  ['update_cycle_p99_ms', 'update cycle p99'],
  ['resp_bytes_per_token', 'bytes/token'],
  ['client_parse_ms_mean', 'client parse'],
  ['main_heap_peak_mb', 'heap peak'],
  ['heap_peak_mb_all_threads', 'heap peak all threads'],
  ['rss_peak_mb', 'RSS peak'],
  ['rss_after_drain_mb', 'RSS after drain'],
];

/** `objects-mask / packed-mask` figure by figure; null when either arm was not run. */
export function ratios(
  arms: readonly ArmFigures[],
  over: string,
  under: string,
): Record<string, number | null> | null {
  const a = arms.find((f) => f.name === over);
  const b = arms.find((f) => f.name === under);
  if (a === undefined || b === undefined) return null;
  const out: Record<string, number | null> = {};
  for (const [key] of RATIO_FIGURES) {
    const x = a[key] as number | null;
    const y = b[key] as number | null;
    out[key] = x === null || y === null || y === 0 ? null : Math.round((x / y) * 100) / 100;
  }
  return out;
}

export function ratioLine(arms: readonly ArmFigures[], over: string, under: string): string | null {
  const r = ratios(arms, over, under);
  if (r === null) return null;
  const parts = RATIO_FIGURES.map(
    ([key, label]) => `${label} ${r[key] === null ? 'n/a' : `${r[key]}x`}`,
  );
  return `${over} / ${under}: ${parts.join(', ')}`;
}

export const RATIO_PAIRS: readonly [string, string][] = [
  ['objects-mask', 'packed-mask'],
  ['objects-nomask', 'packed-nomask'],
];

export function jsonLine(profile: string, arms: readonly ArmFigures[]): string {
  const ratioEntries = RATIO_PAIRS.map(
    ([a, b]) => [`${a}/${b}`, ratios(arms, a, b)] as const,
  ).filter(([, r]) => r !== null);
  return JSON.stringify({ profile, arms, ratios: Object.fromEntries(ratioEntries) });
}
