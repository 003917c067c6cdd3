/**
 * What one /metrics render costs on an API server's main thread (src/obs/exposition.ts), in one
 * process, with no HTTP, over a region populated as after two hours of RL rollouts (3,000 finished
 * requests per API server, every histogram, counter and health slot filled, every process
 * published), for each API-server count: per-render time (p50, p99, mean), bytes allocated per
 * render (heap growth over a round of renders with no GC in it), the text's size, and that the text
 * reads back through the strict parser (bench/loadtest/prom-text.ts) with every family typed.
 *
 * The figures come from two child processes of this script: one times renders with V8's default
 * flags, as an API server runs; one measures allocation with 128 MB semi-spaces, so that no scavenge
 * runs in a round and hides what it allocated. Until the commit that removed prom-client, this bench
 * also rendered the same families through prom-client; docs/performance.md ("Metrics exposition and scraping") quotes both.
 *
 * Prints a table (fastest first, with the ratio to the slowest) and, with --json, a last line
 * {"bench":"exposition","rows":[...]}.
 *
 *   npm run bench:exposition -- [--json] [--servers 1,2,4] [--renders 3000]
 */
import { spawnSync } from 'node:child_process';
import { PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { getHeapStatistics } from 'node:v8';
import { buildConfig } from '../src/config.js';
import { exitCodeFor, RS_ERR_CONFIG_INVALID } from '../src/errors.js';
import { ClusterMetrics } from '../src/obs/exposition.js';
import { populatedRegion } from './exposition/populate.js';
import { RS_ERR_BENCH_CHILD_FAILED } from './loadtest/errors.js';
import { parsePromText } from './loadtest/prom-text.js';

const ALLOCATION_RENDERS = 50;
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
  const args: Args = { json: false, servers: [1, 2, 4], renders: 3000, child: null };
  for (let i = 0; i < argv.length; i++) {
    const a = String(argv[i]);
    if (a === '--json') args.json = true;
    else if (a === '--servers') args.servers = String(argv[++i]).split(',').map(Number);
    else if (a === '--renders') args.renders = Number(argv[++i]);
    else if (a === '--child') args.child = argv[++i] === 'timing' ? 'timing' : 'allocation';
    else
      throw new RS_ERR_CONFIG_INVALID(
        a,
        'unknown argument; use --json, --servers 1,2,4, --renders N',
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

interface Row {
  servers: number;
  p50Us: number;
  p99Us: number;
  meanUs: number;
  /** null when a GC ran during the allocation round anyway. */
  allocatedKb: number | null;
  textKb: number;
  samples: number;
  families: number;
}

type Timing = Omit<Row, 'allocatedKb'>;

function metricsFor(servers: number): ClusterMetrics {
  const config = buildConfig({ model: 'qwen3-30b-a3b', apiServerCount: servers });
  const { region, stats } = populatedRegion(servers, config.maxModelLen);
  return new ClusterMetrics({ region, config, engineStats: stats });
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

function time(servers: number, renders: number): Timing {
  const metrics = metricsFor(servers);
  let text = '';
  for (let i = 0; i < Math.min(1000, renders); i++) text = metrics.render(); // JIT warm-up
  const us: number[] = [];
  for (let i = 0; i < renders; i++) {
    const t0 = performance.now();
    metrics.render();
    us.push((performance.now() - t0) * 1000);
  }
  us.sort((a, b) => a - b);
  const parsed = parsePromText(text);
  return {
    servers,
    p50Us: percentile(us, 50),
    p99Us: percentile(us, 99),
    meanUs: us.reduce((a, b) => a + b, 0) / us.length,
    textKb: Buffer.byteLength(text) / 1024,
    samples: parsed.samples.length,
    families: parsed.types.size,
  };
}

/** Heap growth per render, in KB, over a round with no GC in it (NaN if a GC ran anyway). */
async function allocatedKb(servers: number): Promise<number> {
  const metrics = metricsFor(servers);
  for (let i = 0; i < 2000; i++) metrics.render(); // JIT warm-up
  (globalThis as { gc?: () => void }).gc?.();
  let gcs = 0;
  const observer = new PerformanceObserver((list) => {
    gcs += list.getEntries().length;
  });
  observer.observe({ entryTypes: ['gc'] });
  const before = getHeapStatistics().used_heap_size;
  let length = 0;
  for (let i = 0; i < ALLOCATION_RENDERS; i++) length += metrics.render().length;
  const grown = getHeapStatistics().used_heap_size - before;
  await new Promise((resolve) => setTimeout(resolve, 10)); // let the observer see a late GC entry
  observer.disconnect();
  return gcs === 0 && length > 0 ? grown / ALLOCATION_RENDERS / 1024 : Number.NaN;
}

/** One measuring process: prints one JSON line, an entry per API-server count. */
async function child(args: Args, phase: Phase): Promise<void> {
  const out: (Timing | number)[] = [];
  for (const servers of args.servers) {
    out.push(phase === 'timing' ? time(servers, args.renders) : await allocatedKb(servers));
  }
  console.log(JSON.stringify(out));
}

function runChild(phase: Phase): unknown[] {
  const self = fileURLToPath(import.meta.url);
  const argv = [...CHILD_FLAGS[phase], self, ...process.argv.slice(2), '--child', phase];
  const run = spawnSync(process.execPath, argv, {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: 600_000,
  });
  if (run.status !== 0) {
    throw new RS_ERR_BENCH_CHILD_FAILED(`${phase}`, `exit ${run.status} ${run.signal ?? ''}`);
  }
  return JSON.parse(run.stdout.trim().split('\n').at(-1)!) as unknown[];
}

function printTable(rows: Row[]): void {
  const sorted = [...rows].sort((a, b) => a.meanUs - b.meanUs);
  const slowest = sorted.at(-1)!.meanUs;
  console.log('exposition: one /metrics render of a populated region, one process, no HTTP');
  console.log(`Node ${process.version}; ${ALLOCATION_RENDERS} renders per allocation round`);
  console.log('');
  console.log(
    'API servers    p50 us    p99 us   mean us  x slowest  KB alloc/render  text KB  samples',
  );
  for (const r of sorted) {
    console.log(
      `${String(r.servers).padStart(11)}  ${r.p50Us.toFixed(1).padStart(8)}  ` +
        `${r.p99Us.toFixed(1).padStart(8)}  ${r.meanUs.toFixed(1).padStart(8)}  ` +
        `${(slowest / r.meanUs).toFixed(2).padStart(9)}  ` +
        `${(r.allocatedKb ?? Number.NaN).toFixed(1).padStart(15)}  ` +
        `${r.textKb.toFixed(1).padStart(7)}  ${String(r.samples).padStart(7)}`,
    );
  }
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.child !== null) return child(args, args.child);
  const timings = runChild('timing') as Timing[];
  const allocations = runChild('allocation') as (number | null)[];
  const rows = timings.map((t, i) => ({ ...t, allocatedKb: allocations[i] ?? null }));
  printTable(rows);
  if (args.json) console.log(JSON.stringify({ bench: 'exposition', node: process.version, rows }));
}

main().catch((error: unknown) => {
  console.error(`bench:exposition: ${(error as Error).stack ?? String(error)}`);
  process.exit(exitCodeFor(error));
});
