/**
 * Self-contained SVG charts for the HTML report (no script, no external asset): a line chart of
 * several series over time, on a log scale when values span decades (a stalled arm's /health
 * latency is 1000x a healthy one's), and a horizontal bar chart of one figure per arm.
 */

export interface Line {
  name: string;
  t: readonly number[];
  v: readonly number[];
}

export const PALETTE = [
  '#d62728',
  '#1f77b4',
  '#ff7f0e',
  '#2ca02c',
  '#9467bd',
  '#8c564b',
  '#e377c2',
];

const W = 900;
const H = 300;
const PAD = { left: 64, right: 170, top: 28, bottom: 36 };

const esc = (s: string): string =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

const num = (v: number): string =>
  v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toPrecision(2);

function logTicks(lo: number, hi: number): number[] {
  const ticks: number[] = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) ticks.push(10 ** e);
  return ticks;
}

/** Ticks at 1, 2 or 5 x 10^k, four to ten of them up to `hi`. */
function linearTicks(hi: number): number[] {
  const top = hi > 0 ? hi : 1;
  let stride = 10 ** Math.floor(Math.log10(top));
  for (const f of [0.1, 0.2, 0.5, 1]) {
    if (top / (stride * f) <= 10) {
      stride *= f;
      break;
    }
  }
  const ticks: number[] = [];
  for (let v = 0; v <= top * (1 + 1e-9); v += stride) ticks.push(Math.round(v * 1e6) / 1e6);
  return ticks;
}

/** Line chart; `floor` is the smallest value drawn on a log axis (values below sit on it). */
export function lineChart(
  title: string,
  yLabel: string,
  lines: readonly Line[],
  log: boolean,
  floor = 0.1,
): string {
  const all = lines.flatMap((l) => l.v as number[]).filter(Number.isFinite);
  const tMax = Math.max(1, ...lines.flatMap((l) => l.t as number[]));
  const vMax = Math.max(log ? floor * 10 : 1, ...all);
  const lo = log ? floor : 0;
  const hi = log ? 10 ** Math.ceil(Math.log10(vMax)) : vMax * 1.05;
  const pw = W - PAD.left - PAD.right;
  const ph = H - PAD.top - PAD.bottom;
  const x = (t: number): number => PAD.left + (t / tMax) * pw;
  const y = (v: number): number => {
    const f = log
      ? (Math.log10(Math.max(v, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))
      : v / hi;
    return PAD.top + ph - f * ph;
  };
  const parts = [`<text x="${PAD.left}" y="18" class="title">${esc(title)}</text>`];
  for (const tick of log ? logTicks(lo, hi) : linearTicks(hi)) {
    parts.push(
      `<line x1="${PAD.left}" x2="${PAD.left + pw}" y1="${y(tick)}" y2="${y(tick)}" class="grid"/>`,
    );
    parts.push(`<text x="${PAD.left - 6}" y="${y(tick) + 4}" class="ytick">${num(tick)}</text>`);
  }
  for (const tick of linearTicks(tMax)) {
    parts.push(`<text x="${x(tick)}" y="${H - PAD.bottom + 16}" class="xtick">${num(tick)}</text>`);
  }
  parts.push(
    `<text x="${PAD.left + pw / 2}" y="${H - 4}" class="xtick">seconds into the measured window</text>`,
  );
  parts.push(
    `<text x="14" y="${PAD.top + ph / 2}" class="ylabel" transform="rotate(-90 14 ${PAD.top + ph / 2})">${esc(yLabel)}</text>`,
  );
  lines.forEach((l, i) => {
    const color = PALETTE[i % PALETTE.length];
    const pts = l.t.map((t, k) => `${x(t).toFixed(1)},${y(l.v[k] as number).toFixed(1)}`).join(' ');
    parts.push(`<polyline points="${pts}" fill="none" stroke="${color}" stroke-width="1.2"/>`);
    const ly = PAD.top + 14 + i * 18;
    parts.push(
      `<rect x="${W - PAD.right + 12}" y="${ly - 9}" width="12" height="4" fill="${color}"/>`,
    );
    parts.push(
      `<text x="${W - PAD.right + 30}" y="${ly - 3}" class="legend">${esc(l.name)}</text>`,
    );
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}">${parts.join('')}</svg>`;
}

/** Horizontal bars, one per arm; null values are drawn as "n/a". */
export function barChart(
  title: string,
  unit: string,
  bars: readonly { name: string; value: number | null }[],
): string {
  const rowH = 22;
  const left = 170;
  const width = 520;
  const h = 30 + bars.length * rowH + 8;
  const vMax = Math.max(...bars.map((b) => b.value ?? 0), 1e-9);
  const parts = [
    `<text x="4" y="18" class="title">${esc(title)}${unit === '' ? '' : ` (${esc(unit)})`}</text>`,
  ];
  bars.forEach((b, i) => {
    const y = 30 + i * rowH;
    parts.push(`<text x="${left - 8}" y="${y + 14}" class="ytick">${esc(b.name)}</text>`);
    if (b.value === null) {
      parts.push(`<text x="${left + 4}" y="${y + 14}" class="legend">n/a</text>`);
      return;
    }
    const w = Math.max(1, (b.value / vMax) * width);
    parts.push(
      `<rect x="${left}" y="${y + 3}" width="${w.toFixed(1)}" height="${rowH - 8}" fill="${PALETTE[i % PALETTE.length]}"/>`,
    );
    parts.push(`<text x="${left + w + 6}" y="${y + 14}" class="legend">${num(b.value)}</text>`);
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${left + width + 90} ${h}" width="${left + width + 90}" height="${h}">${parts.join('')}</svg>`;
}
