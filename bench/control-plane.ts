/**
 * Control-plane latency under load (issue 6, "Done when"): a real cluster serving N concurrent long
 * requests (closed loop, from a separate load process, so that the caller below shares no event
 * loop with response handling), and C cycles of POST /pause -> /update_weights {"weight_dir": null}
 * -> /resume from this process, each call timed from send to last body byte. Prints a table of
 * p50 / p99 / max per call with the targets (p99 <= 50 ms, max <= 200 ms) and, with --json, a last
 * line of one JSON object. The weight load itself is simulated and takes no time: what is measured
 * is how long a control call waits for the serving tier and the engine loop.
 *
 *   npm run bench:control -- [--json] [--cycles 50] [--concurrency 128] [--api-server-count 2]
 *                            [--interval-ms 300] [--speedup 1] [--max-tokens 4000]
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Client, Pool } from 'undici';
import { ExitCode, RS_ERR_CONFIG_INVALID } from '../src/errors.js';
import { STAT_GENERATION_TOKENS, STAT_PAUSED, STAT_RUNNING } from '../src/shm/layout.js';
import { openRegion, type Region } from '../src/shm/region.js';
import { engineStat as statSlot } from '../src/shm/words.js';
import { startCluster as startBenchCluster } from './loadtest/cluster.js';

const CALLS = ['pause', 'update_weights', 'resume'] as const;
/**
 * Timed once per cycle on the same connection, before the pause, and reported beside the control
 * calls but outside the targets: a GET /health is answered from the API server's own memory, so
 * it shows what the HTTP tier alone costs at that moment (an oversubscribed core delays both).
 */
const REFERENCE = 'health';
const TARGET_P99_MS = 50;
const TARGET_MAX_MS = 200;
const START_TIMEOUT_MS = 60_000;

interface Args {
  json: boolean;
  cycles: number;
  concurrency: number;
  apiServerCount: number;
  intervalMs: number;
  speedup: number;
  maxTokens: number;
}

const NUMERIC: Record<string, keyof Args> = {
  '--cycles': 'cycles',
  '--concurrency': 'concurrency',
  '--api-server-count': 'apiServerCount',
  '--interval-ms': 'intervalMs',
  '--speedup': 'speedup',
  '--max-tokens': 'maxTokens',
};

function parseArgs(argv: string[]): Args {
  const args: Args = {
    json: false,
    cycles: 50,
    concurrency: 128,
    apiServerCount: 2,
    intervalMs: 300,
    speedup: 1,
    maxTokens: 4000,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const key = NUMERIC[a];
    if (a === '--json') args.json = true;
    else if (key !== undefined) {
      const value = Number(argv[++i]);
      if (!(value > 0)) throw new RS_ERR_CONFIG_INVALID(a, 'must be a number > 0');
      (args as unknown as Record<string, number>)[key] = value;
    } else {
      throw new RS_ERR_CONFIG_INVALID(a, `unknown argument; use --json, ${Object.keys(NUMERIC)}`);
    }
  }
  return args;
}

interface RunningCluster {
  url: string;
  region: Region;
  stop(): Promise<void>;
}

/** A cluster from the benchmarks' shared starter, with its region mapped for the engine's stats. */
async function startCluster(args: Args): Promise<RunningCluster> {
  const cluster = await startBenchCluster(
    ['--api-server-count', String(args.apiServerCount), '--speedup', String(args.speedup)],
    START_TIMEOUT_MS,
  );
  const name = cluster.regionName();
  if (name === null) {
    await cluster.stop();
    throw new Error('the cluster has no region in /dev/shm');
  }
  return { url: cluster.url, region: openRegion(name), stop: () => cluster.stop() };
}

const engineStat = (region: Region, slot: number): number => statSlot(region.f64, slot);

// ---- the load process ---------------------------------------------------------------------------

/** Keeps `concurrency` generate requests in flight until told to stop; reports counts on exit. */
async function runLoad(url: string, concurrency: number, maxTokens: number): Promise<void> {
  const pool = new Pool(url, { connections: concurrency, pipelining: 1 });
  let stopping = false;
  let completed = 0;
  let failed = 0;
  process.on('message', () => {
    stopping = true;
  });
  const worker = async (w: number): Promise<void> => {
    for (let seed = w; !stopping; seed += concurrency) {
      const body = JSON.stringify({
        token_ids: Array.from({ length: 64 }, (_, i) => (w * 64 + i) % 150_000),
        sampling_params: { max_tokens: maxTokens, ignore_eos: true, seed, logprobs: 1 },
      });
      try {
        const res = await pool.request({
          method: 'POST',
          path: '/inference/v1/generate',
          headers: { 'content-type': 'application/json' },
          body,
          bodyTimeout: 0,
          headersTimeout: 0,
        });
        await res.body.dump({ limit: Number.POSITIVE_INFINITY });
        if (res.statusCode === 200) completed++;
        else failed++;
      } catch {
        if (!stopping) failed++;
      }
    }
  };
  const workers = Array.from({ length: concurrency }, (_, w) => worker(w));
  await new Promise<void>((resolve) => process.once('message', () => resolve()));
  await pool.destroy();
  await Promise.allSettled(workers);
  process.send?.({ completed, failed });
  process.exit(ExitCode.Ok);
}

// ---- the control caller ---------------------------------------------------------------------------

interface CallStats {
  samples: number[];
  errors: number;
}

async function timedCall(client: Client, path: string, body: string | null): Promise<number> {
  const started = performance.now();
  const res = await client.request({
    method: path === `/${REFERENCE}` ? 'GET' : 'POST',
    path,
    headers: body === null ? {} : { 'content-type': 'application/json' },
    body,
  });
  await res.body.text();
  const ms = performance.now() - started;
  if (res.statusCode !== 200) throw new Error(`${path} answered ${res.statusCode}`);
  return ms;
}

async function waitUntil(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface CycleFigures {
  stats: Record<(typeof CALLS)[number] | typeof REFERENCE, CallStats>;
  runningAtPause: number[];
  tokensPerS: number;
}

async function runCycles(cluster: RunningCluster, args: Args): Promise<CycleFigures> {
  const client = new Client(cluster.url, { pipelining: 1 });
  const stats = { pause: fresh(), update_weights: fresh(), resume: fresh(), health: fresh() };
  const runningAtPause: number[] = [];
  const tokens0 = engineStat(cluster.region, STAT_GENERATION_TOKENS);
  const t0 = performance.now();
  const bodies = { health: null, pause: null, update_weights: '{"weight_dir":null}', resume: null };
  for (let c = 0; c < args.cycles; c++) {
    runningAtPause.push(engineStat(cluster.region, STAT_RUNNING));
    for (const call of [REFERENCE, ...CALLS] as const) {
      try {
        stats[call].samples.push(await timedCall(client, `/${call}`, bodies[call]));
      } catch {
        stats[call].errors++;
      }
    }
    if (engineStat(cluster.region, STAT_PAUSED) !== 0) stats.resume.errors++;
    await new Promise((r) => setTimeout(r, args.intervalMs));
  }
  const seconds = (performance.now() - t0) / 1000;
  await client.close();
  const tokensPerS = (engineStat(cluster.region, STAT_GENERATION_TOKENS) - tokens0) / seconds;
  return { stats, runningAtPause, tokensPerS };
}

const fresh = (): CallStats => ({ samples: [], errors: 0 });

/** Nearest-rank percentile. */
function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

function summarize(s: CallStats) {
  const sorted = [...s.samples].sort((a, b) => a - b);
  const p99 = percentile(sorted, 99);
  const max = sorted.at(-1) ?? Number.NaN;
  return {
    n: sorted.length,
    errors: s.errors,
    p50_ms: round(percentile(sorted, 50)),
    p99_ms: round(p99),
    max_ms: round(max),
    meets_target: s.errors === 0 && p99 <= TARGET_P99_MS && max <= TARGET_MAX_MS,
  };
}

const round = (ms: number): number => Math.round(ms * 100) / 100;

type Row = { call: string } & ReturnType<typeof summarize>;

function printRow(r: Row, verdict: string): void {
  console.log(
    `${r.call.padEnd(19)}${String(r.n).padStart(3)}${String(r.errors).padStart(8)}` +
      `${r.p50_ms.toFixed(2).padStart(9)}${r.p99_ms.toFixed(2).padStart(9)}` +
      `${r.max_ms.toFixed(2).padStart(9)}   ${verdict}`,
  );
}

function report(args: Args, figures: CycleFigures, load: { completed: number; failed: number }) {
  const rows: Row[] = CALLS.map((call) => ({ call, ...summarize(figures.stats[call]) }));
  const reference = { call: `${REFERENCE} (reference)`, ...summarize(figures.stats[REFERENCE]) };
  const minRunning = Math.min(...figures.runningAtPause);
  console.log(
    `control-plane bench: ${args.cycles} cycles of pause -> update_weights -> resume, ` +
      `${args.concurrency} concurrent requests (max_tokens ${args.maxTokens}, ignore_eos), ` +
      `${args.apiServerCount} API servers, speedup ${args.speedup}`,
  );
  console.log(
    `engine: ${Math.round(figures.tokensPerS)} generated tok/s over the cycles; ` +
      `running at each pause: min ${minRunning}, max ${Math.max(...figures.runningAtPause)}`,
  );
  console.log('');
  console.log(
    'call                 n  errors   p50 ms   p99 ms   max ms   target p99<=50, max<=200',
  );
  for (const r of rows) printRow(r, r.meets_target ? 'met' : 'MISSED');
  printRow(reference, '(not a control call)');
  console.log(`load: ${load.completed} requests completed, ${load.failed} failed`);
  if (!args.json) return;
  const calls = Object.fromEntries(rows.map(({ call, ...r }) => [call, r]));
  const { call: _, meets_target: __, ...health } = reference;
  console.log(
    JSON.stringify({
      bench: 'control-plane',
      cycles: args.cycles,
      concurrency: args.concurrency,
      api_server_count: args.apiServerCount,
      speedup: args.speedup,
      min_running_at_pause: minRunning,
      generated_tokens_per_s: Math.round(figures.tokensPerS),
      calls,
      health_reference: health,
      load_failed: load.failed,
      targets_met: rows.every((r) => r.meets_target),
    }),
  );
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv[0] === '--role-load') {
    return runLoad(argv[1]!, Number(argv[2]), Number(argv[3]));
  }
  const args = parseArgs(argv);
  const cluster = await startCluster(args);
  const loader = fork(fileURLToPath(import.meta.url), [
    '--role-load',
    cluster.url,
    String(args.concurrency),
    String(args.maxTokens),
  ]);
  try {
    const want = Math.floor(args.concurrency * 0.95);
    await waitUntil(
      `${want} running requests`,
      () => engineStat(cluster.region, STAT_RUNNING) >= want,
      START_TIMEOUT_MS,
    );
    const figures = await runCycles(cluster, args);
    const counts = new Promise<{ completed: number; failed: number }>((resolve) =>
      loader.once('message', (m) => resolve(m as { completed: number; failed: number })),
    );
    loader.send('stop');
    report(args, figures, await counts);
  } finally {
    if (loader.exitCode === null) loader.kill('SIGKILL');
    await cluster.stop();
  }
}

main().catch((error: unknown) => {
  console.error(`bench:control failed: ${(error as Error).stack ?? String(error)}`);
  process.exit(ExitCode.Failure);
});
