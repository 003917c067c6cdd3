/**
 * Whether two /metrics texts say the same thing: the same families with the same HELP and TYPE, and
 * the same samples (name, labels, value) in the same order, read by the one parser
 * (bench/loadtest/prom-text.ts); values of `clocked` families (read from the clock at render time,
 * so two renders a few ms apart differ) to within a second; and, apart from that, how their lines differ in form (a blank line,
 * a spelling of a number), which a tool comparing strings against a vLLM scrape would see.
 */
import { type PromSample, parsePromText } from '../loadtest/prom-text.js';

export interface TextComparison {
  equivalent: boolean;
  families: number;
  samples: number;
  /** What differs, one line each (at most a few examples per kind). */
  differences: string[];
}

const key = (s: PromSample): string =>
  `${s.name}{${Object.entries(s.labels)
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
    .join(',')}}`;

const sameValue = (a: number, b: number): boolean =>
  a === b || (Number.isNaN(a) && Number.isNaN(b));

export function compareTexts(
  a: string,
  b: string,
  clocked: readonly string[] = [],
): TextComparison {
  const pa = parsePromText(a);
  const pb = parsePromText(b);
  const differences: string[] = [];
  for (const [name, type] of pa.types) {
    if (pb.types.get(name) !== type)
      differences.push(`TYPE of ${name}: ${type} vs ${pb.types.get(name)}`);
    if (pb.help.get(name) !== pa.help.get(name)) differences.push(`HELP of ${name} differs`);
  }
  if (pa.types.size !== pb.types.size)
    differences.push(`${pa.types.size} vs ${pb.types.size} families`);
  if (pa.samples.length !== pb.samples.length) {
    differences.push(`${pa.samples.length} vs ${pb.samples.length} samples`);
  }
  for (let i = 0; i < Math.min(pa.samples.length, pb.samples.length); i++) {
    const sa = pa.samples[i]!;
    const sb = pb.samples[i]!;
    const close = clocked.includes(sa.name) && Math.abs(sa.value - sb.value) < 1;
    if (key(sa) !== key(sb) || !(close || sameValue(sa.value, sb.value))) {
      differences.push(`sample ${i}: ${key(sa)} ${sa.value} vs ${key(sb)} ${sb.value}`);
      if (differences.length > 5) break;
    }
  }
  const equivalent = differences.length === 0;
  const la = a.split('\n');
  const lb = b.split('\n');
  const blankA = la.filter((l) => l === '').length;
  const blankB = lb.filter((l) => l === '').length;
  if (blankA !== blankB) differences.push(`form: ${blankA - 1} vs ${blankB - 1} blank lines`);
  const fa = la.filter((l) => l !== '');
  const fb = lb.filter((l) => l !== '');
  let shown = 0;
  const clockedLine = (line: string) => clocked.some((name) => line.startsWith(name));
  for (let i = 0; i < Math.min(fa.length, fb.length) && shown < 3; i++) {
    if (fa[i] !== fb[i] && !clockedLine(fa[i]!)) {
      differences.push(`form: "${fa[i]}" vs "${fb[i]}"`);
      shown++;
    }
  }
  return { equivalent, families: pa.types.size, samples: pa.samples.length, differences };
}
