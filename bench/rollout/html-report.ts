import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ArmFigures } from './figures.js';
import type { ArmSeries } from './series.js';
import { barChart, lineChart } from './svg.js';
import { markdownTable } from './table.js';

/**
 * The HTML report: one self-contained file (inline CSS and SVG, nothing fetched) in bench/results/
 * (gitignored), with the run's setup, the table, the ratios, /health latency, event-loop delay and
 * heap over time per arm, and a bar chart per figure.
 */

export interface ReportMeta {
  profile: string;
  setup: string[];
  ratioLines: string[];
}

const CSS = `body{font:14px system-ui,sans-serif;margin:24px;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
td:first-child,th:first-child{text-align:left}svg{display:block;margin:12px 0}
.title{font-weight:600;font-size:13px}.grid{stroke:#eee}.ytick{font-size:10px;text-anchor:end}
.xtick{font-size:10px;text-anchor:middle}.ylabel{font-size:11px;text-anchor:middle}.legend{font-size:11px}
.bars{display:flex;flex-wrap:wrap;gap:8px}`;

const BAR_FIGURES: readonly [keyof ArmFigures, string, string][] = [
  ['gen_tok_s', 'generated tokens per second', 'tok/s'],
  ['cpu_ms_per_1k_tokens', 'API-server CPU (user + system) per 1,000 generated tokens', 'ms'],
  ['done_reqs', 'requests done', ''],
  ['failed_reqs', 'requests failed', ''],
  ['gc_pct_wall', 'main-thread GC, % of wall time (sum over API servers)', '%'],
  ['gc_pct_wall_all_threads', 'GC of every thread, % of wall time (sum)', '%'],
  ['max_gc_pause_ms', 'longest GC pause', 'ms'],
  ['max_gc_pause_ms_all_threads', 'longest GC pause of any thread', 'ms'],
  ['eld_max_ms', 'event-loop delay max', 'ms'],
  ['health_p99_ms', '/health p99', 'ms'],
  ['health_max_ms', '/health max', 'ms'],
  ['floor_health_p99_ms', '/health p99 of a bare node:http server, same load (the floor)', 'ms'],
  ['update_cycle_p99_ms', 'pause -> update_weights -> resume p99', 'ms'],
  ['resp_bytes_per_token', 'response bytes per token', 'B'],
  ['client_parse_ms_mean', 'client parse per response', 'ms'],
  ['main_heap_peak_mb', 'main-thread heap peak', 'MiB'],
  ['heap_peak_mb_all_threads', 'heap peak, every isolate of an API server', 'MiB'],
  ['rss_peak_mb', 'RSS peak per API server', 'MiB'],
  ['rss_after_drain_mb', 'RSS per API server 13 s after the load', 'MiB'],
];

const esc = (s: string): string =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function htmlTable(arms: readonly ArmFigures[]): string {
  const rows = markdownTable(arms)
    .split('\n')
    .filter((_, i) => i !== 1)
    .map((line) =>
      line
        .slice(2, -2)
        .split(' | ')
        .map((c) => c.trim()),
    );
  const [head, ...body] = rows;
  const tr = (cells: string[], tag: string): string =>
    `<tr>${cells.map((c) => `<${tag}>${esc(c)}</${tag}>`).join('')}</tr>`;
  return `<table>${tr(head ?? [], 'th')}${body.map((r) => tr(r, 'td')).join('')}</table>`;
}

export function renderHtmlReport(
  meta: ReportMeta,
  arms: readonly ArmFigures[],
  series: readonly ArmSeries[],
): string {
  const charts = [
    lineChart(
      '/health latency, probed every 50 ms from a separate process',
      'ms (log)',
      series.map((s) => ({ name: s.name, t: s.health.t, v: s.health.ms })),
      true,
    ),
    lineChart(
      'event-loop delay p99 since start, largest API server (/metrics, every 1 s)',
      'ms (log)',
      series.map((s) => ({ name: s.name, t: s.eld.t, v: s.eld.p99 })),
      true,
    ),
    lineChart(
      'event-loop delay max since start, largest API server',
      'ms (log)',
      series.map((s) => ({ name: s.name, t: s.eld.t, v: s.eld.max })),
      true,
    ),
    lineChart(
      'main-thread heap in use, largest API server',
      'MiB (log)',
      series.map((s) => ({ name: s.name, t: s.heapMb.t, v: s.heapMb.mb })),
      true,
      1,
    ),
  ];
  const bars = BAR_FIGURES.map(([key, title, unit]) =>
    barChart(
      title,
      unit,
      arms.map((f) => ({ name: f.name, value: f[key] as number | null })),
    ),
  );
  const notes = arms.flatMap((f) => f.notes.map((n) => `<li>${esc(f.name)}: ${esc(n)}</li>`));
  return `<!doctype html><html><head><meta charset="utf-8"><title>ringserve bench: ${esc(meta.profile)}</title><style>${CSS}</style></head><body>
<h1>ringserve before/after benchmark: profile ${esc(meta.profile)}</h1>
<ul>${meta.setup.map((s) => `<li>${esc(s)}</li>`).join('')}</ul>
${htmlTable(arms)}
<ul>${meta.ratioLines.map((s) => `<li>${esc(s)}</li>`).join('')}</ul>
${notes.length > 0 ? `<h3>notes</h3><ul>${notes.join('')}</ul>` : ''}
<h2>over time</h2>${charts.join('\n')}
<h2>per figure</h2><div class="bars">${bars.join('\n')}</div>
</body></html>\n`;
}

/**
 * Writes the report, and beside it the raw per-arm results (every probe, scrape and request) as
 * JSON for a closer look; returns the report's path.
 */
export async function writeHtmlReport(
  dir: string,
  meta: ReportMeta,
  arms: readonly ArmFigures[],
  series: readonly ArmSeries[],
  raw: unknown,
): Promise<string> {
  await mkdir(dir, { recursive: true });
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const path = join(dir, `bench-${meta.profile}-${stamp}.html`);
  await writeFile(path, renderHtmlReport(meta, arms, series));
  await writeFile(join(dir, `bench-${meta.profile}-${stamp}.raw.json`), JSON.stringify(raw));
  return path;
}
