/**
 * What one /metrics render costs on an API server's main thread, in one process, with no HTTP:
 * exposition.ts's hand-written text (ClusterMetrics) against the same families through prom-client
 * (PromClientClusterMetrics: a Registry built once, collectors reading the region at scrape time),
 * over a region populated as after two hours of RL rollouts (3,000 finished requests per API server,
 * every histogram, counter and health slot filled, every process published). For each API-server
 * count: per-render time (p50, p99, mean), bytes allocated per render (heap growth over a round of
 * renders with no GC in it), the text's size, and whether the two texts hold the same families, samples and
 * values (read by bench/loadtest/prom-text.ts), with the lines that differ in form.
 *
 * The figures come from two child processes of this script: one times renders with V8's default
 * flags, as an API server runs; one measures allocation with 128 MB semi-spaces.
 *
 * Prints a table (fastest first, with the ratio to the slowest) and, with --json, a last line
 * {"bench":"exposition","rows":[...],"equivalent":...}.
 *
 *   npm run bench:exposition -- [--json] [--servers 2,4] [--renders 3000]
 */
import { spawnSync } from 'node:child_process';
import { PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { getHeapStatistics } from 'node:v8';
import { buildConfig } from '../src/config.js';
import { exitCodeFor, RS_ERR_CONFIG_INVALID } from '../src/errors.js';
import { ClusterMetrics, type ClusterMetricsSources } from '../src/obs/exposition.js';
import { HEALTH_AGE } from '../src/obs/families.js';
import { PromClientClusterMetrics } from '../src/obs/prom-client-metrics.js';
import { compareTexts, type TextComparison } from './exposition/compare.js';
import { populatedRegion } from './exposition/populate.js';

const ALLOCATION_RENDERS = 50;
/** The timing child runs as an API server does (V8's defaults); the allocation child with 128 MB
 * semi-spaces, so that no scavenge runs in a round of renders and hides what they allocated. */
const CHILD_FLAGS = {
  timing: ['--expose-gc'],
  allocation: ['--expose-gc', '--min-semi-space-size=128', '--max-semi-space-size=128'],
} as const;
type Phase = keyof typeof CHILD_FLAGS;

interface Args {
  json: boolean;
  servers: number[];
  renders: number;
  child: Phase | null;
}

function parseArgs(argv: string[]): Args {
  const args: Args = { json: false, servers: [2, 4], renders: 3000, child: null };
  for (let i = 0; i < argv.length; i++) {
    const a = String(argv[i]);
    if (a === '--json') args.json = true;
    else if (a === '--servers') args.servers = String(argv[++i]).split(',').map(Number);
    else if (a === '--renders') args.renders = Number(argv[++i]);
    else if (a === '--child') args.child = argv[++i] === 'timing' ? 'timing' : 'allocation';
    else
      throw new RS_ERR_CONFIG_INVALID(
        a,
        'unknown argument; use --json, --servers 2,4, --renders N',
      );
  }
  if (!args.servers.every((n) => Number.isInteger(n) && n >= 1 && n <= 64)) {
    throw new RS_ERR_CONFIG_INVALID('--servers', 'must be a comma-separated list of 1..64');
  }
  if (!(Number.isInteger(args.renders) && args.renders >= 100)) {
    throw new RS_ERR_CONFIG_INVALID('--renders', 'must be an integer >= 100');
  }
  return args;
}

interface Renderer {
  name: string;
  render: () => string | Promise<string>;
}

interface Timing {
  variant: string;
  servers: number;
  p50Us: number;
  p99Us: number;
  meanUs: number;
  textKb: number;
}

interface Row extends Timing {
  /** null (NaN in the child's JSON) when a GC ran during the round anyway. */
  allocatedKb: number | null;
}

function renderers(servers: number): Renderer[] {
  const { region, stats } = populatedRegion(servers);
  const config = buildConfig({ model: 'qwen3-30b-a3b', apiServerCount: servers });
  const sources: ClusterMetricsSources = { region, config, engineStats: stats };
  const hand = new ClusterMetrics(sources);
  const prom = new PromClientClusterMetrics(sources);
  return [
    { name: 'hand-written', render: () => hand.render() },
    { name: 'prom-client', render: () => prom.render() },
  ];
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

async function time(r: Renderer, servers: number, renders: number): Promise<Timing> {
  let text = '';
  for (let i = 0; i < Math.min(1000, renders); i++) text = await r.render(); // JIT warm-up
  const us: number[] = [];
  for (let i = 0; i < renders; i++) {
    const t0 = performance.now();
    await r.render();
    us.push((performance.now() - t0) * 1000);
  }
  us.sort((a, b) => a - b);
  return {
    variant: r.name,
    servers,
    p50Us: percentile(us, 50),
    p99Us: percentile(us, 99),
    meanUs: us.reduce((a, b) => a + b, 0) / us.length,
    textKb: Buffer.byteLength(text) / 1024,
  };
}

/** Heap growth per render, in KB, over a round with no GC in it (NaN if a GC ran anyway). */
async function allocatedKb(r: Renderer): Promise<number> {
  for (let i = 0; i < 200; i++) await r.render(); // JIT warm-up
  (globalThis as { gc?: () => void }).gc?.();
  let gcs = 0;
  const observer = new PerformanceObserver((list) => {
    gcs += list.getEntries().length;
  });
  observer.observe({ entryTypes: ['gc'] });
  const before = getHeapStatistics().used_heap_size;
  let length = 0;
  for (let i = 0; i < ALLOCATION_RENDERS; i++) length += (await r.render()).length;
  const grown = getHeapStatistics().used_heap_size - before;
  await new Promise((resolve) => setTimeout(resolve, 10)); // let the observer see a late GC entry
  observer.disconnect();
  return gcs === 0 && length > 0 ? grown / ALLOCATION_RENDERS / 1024 : Number.NaN;
}

/** One measuring process: prints one JSON line (timings, or KB allocated per render). */
async function child(args: Args, phase: Phase): Promise<void> {
  const out: (Timing | number)[] = [];
  for (const servers of args.servers) {
    for (const r of renderers(servers)) {
      out.push(phase === 'timing' ? await time(r, servers, args.renders) : await allocatedKb(r));
    }
  }
  console.log(JSON.stringify(out));
}

function runChild(phase: Phase): unknown[] {
  const self = fileURLToPath(import.meta.url);
  const argv = [...CHILD_FLAGS[phase], self, ...process.argv.slice(2), '--child', phase];
  const run = spawnSync(process.execPath, argv, {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  if (run.status !== 0) throw new Error(`the ${phase} process exited with ${run.status}`);
  return JSON.parse(run.stdout.trim().split('\n').at(-1)!) as unknown[];
}

function printTable(rows: Row[], comparisons: Map<number, TextComparison>): void {
  console.log('exposition: one /metrics render of a populated region, one process, no HTTP');
  console.log(`Node ${process.version}; ${ALLOCATION_RENDERS} renders per allocation round`);
  for (const [servers, c] of comparisons) {
    const group = rows.filter((r) => r.servers === servers).sort((a, b) => a.meanUs - b.meanUs);
    const slowest = group.at(-1)!.meanUs;
    console.log('');
    console.log(`${servers} API servers`);
    console.log('variant         p50 us    p99 us   mean us  x slowest  KB alloc/render  text KB');
    for (const r of group) {
      console.log(
        `${r.variant.padEnd(12)}  ${r.p50Us.toFixed(1).padStart(8)}  ${r.p99Us.toFixed(1).padStart(8)}  ` +
          `${r.meanUs.toFixed(1).padStart(8)}  ${(slowest / r.meanUs).toFixed(2).padStart(9)}  ` +
          `${(r.allocatedKb ?? Number.NaN).toFixed(1).padStart(15)}  ${r.textKb.toFixed(1).padStart(7)}`,
      );
    }
    console.log(
      `same families, samples and values: ${c.equivalent ? 'yes' : 'NO'} (${c.samples} samples, ` +
        `${c.families} families)`,
    );
    for (const d of c.differences) console.log(`  ${d}`);
  }
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.child !== null) return child(args, args.child);
  const timings = runChild('timing') as Timing[];
  const allocations = runChild('allocation') as number[];
  const rows = timings.map((t, i) => ({ ...t, allocatedKb: allocations[i]! }));
  const comparisons = new Map<number, TextComparison>();
  for (const servers of args.servers) {
    const [hand, prom] = renderers(servers);
    const texts = [await hand!.render(), await prom!.render()] as const;
    comparisons.set(servers, compareTexts(...texts, [HEALTH_AGE.name]));
  }
  printTable(rows, comparisons);
  if (args.json) {
    const equivalent = [...comparisons.values()].every((c) => c.equivalent);
    console.log(JSON.stringify({ bench: 'exposition', node: process.version, rows, equivalent }));
  }
}

main().catch((error: unknown) => {
  console.error(`bench:exposition: ${(error as Error).stack ?? String(error)}`);
  process.exit(exitCodeFor(error));
});
