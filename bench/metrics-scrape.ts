/**
 * /metrics under load, the way a router scrapes it: a real cluster (`node dist/src/cli.js serve`),
 * N concurrent long generate requests kept in flight by a load thread (RL-shaped: top_p 0.97,
 * top_k 512, logprobs, sampling masks and routing rows), and, once the engine runs them all, a
 * scrape of /metrics every --interval-ms on a new connection each time (so node:cluster hands them
 * to every API server), timed from request to the last byte. The cluster and the load thread are in
 * metrics-scrape-load.ts.
 *
 * Prints a table (all scrapes, then per answering API server) and, with --json, a last line
 * {"bench":"metrics-scrape","p99_ms",...}. The bar: 200 scrapes at 50 ms under 128
 * concurrent long requests all answer, p99 <= 10 ms.
 *
 *   npm run bench:metrics -- [--json] [--concurrency 128] [--scrapes 200] [--interval-ms 50]
 *     [--api-server-count 2] [--max-tokens 16000] [--max-speed] [--model qwen3-30b-a3b]
 */
import { Client } from 'undici';
import { ExitCode, RS_ERR_CONFIG_INVALID } from '../src/errors.js';
import { RS_ERR_BENCH_TIMEOUT } from './loadtest/errors.js';
import { type PromSample, parsePromText } from './loadtest/prom-text.js';
import { LoadThread, startCluster } from './metrics-scrape-load.js';

interface Args {
  json: boolean;
  concurrency: number;
  scrapes: number;
  intervalMs: number;
  apiServerCount: number;
  maxTokens: number;
  maxSpeed: boolean;
  model: string;
}

function parseArgs(argv: string[]): Args {
  const a: Args = {
    json: false,
    concurrency: 128,
    scrapes: 200,
    intervalMs: 50,
    apiServerCount: 2,
    maxTokens: 16_000,
    maxSpeed: false,
    model: 'qwen3-30b-a3b',
  };
  const numbers: Record<string, keyof Args> = {
    '--concurrency': 'concurrency',
    '--scrapes': 'scrapes',
    '--interval-ms': 'intervalMs',
    '--api-server-count': 'apiServerCount',
    '--max-tokens': 'maxTokens',
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = String(argv[i]);
    const key = numbers[flag];
    if (flag === '--json') a.json = true;
    else if (flag === '--max-speed') a.maxSpeed = true;
    else if (flag === '--model') a.model = String(argv[++i]);
    else if (key !== undefined) {
      const value = Number(argv[++i]);
      if (!Number.isInteger(value) || value < 1)
        throw new RS_ERR_CONFIG_INVALID(flag, 'must be a positive integer');
      (a as unknown as Record<string, number>)[key] = value;
    } else throw new RS_ERR_CONFIG_INVALID(flag, 'unknown argument (see bench/metrics-scrape.ts)');
  }
  return a;
}

// ---- scraping ------------------------------------------------------------------------------------

const SCRAPE_TIMEOUT_MS = 5_000;

interface ScrapeResult {
  ms: number;
  server: string;
  ok: boolean;
  running: number;
  generationTokens: number;
  /** The API servers' own figures since they started (max over servers), ms. */
  serverLagMaxMs: number;
  serverGcMaxMs: number;
}

/** The largest value of `name` over the API servers' series (api_server="<k>"), or NaN. */
function maxOverServers(samples: readonly PromSample[], name: string): number {
  let max = Number.NaN;
  for (const s of samples) {
    if (s.name !== name || !/^\d+$/.test(s.labels.api_server ?? '')) continue;
    max = Math.max(Number.isNaN(max) ? 0 : max, s.value);
  }
  return max;
}

/** The value of the first series named `name`, or NaN. */
function seriesValue(samples: readonly PromSample[], name: string): number {
  return samples.find((s) => s.name === name)?.value ?? Number.NaN;
}

async function scrapeOnce(url: string): Promise<ScrapeResult> {
  // Bounded: a scrape that gets no answer within SCRAPE_TIMEOUT_MS counts as a failure.
  const client = new Client(url, {
    headersTimeout: SCRAPE_TIMEOUT_MS,
    bodyTimeout: SCRAPE_TIMEOUT_MS,
    connectTimeout: SCRAPE_TIMEOUT_MS,
  });
  const started = performance.now();
  try {
    const res = await client.request({ path: '/metrics', method: 'GET' });
    const text = await res.body.text();
    const ms = performance.now() - started;
    const { samples } = parsePromText(text);
    const generationTokens = seriesValue(samples, 'vllm:generation_tokens_total');
    return {
      ms,
      server: String(res.headers['x-ringserve-api-server'] ?? '?'),
      ok: res.statusCode === 200 && Number.isFinite(generationTokens),
      running: seriesValue(samples, 'vllm:num_requests_running'),
      generationTokens,
      serverLagMaxMs: maxOverServers(samples, 'nodejs_eventloop_lag_max_seconds') * 1000,
      serverGcMaxMs: maxOverServers(samples, 'ringserve_gc_pause_max_seconds') * 1000,
    };
  } catch {
    return {
      ms: performance.now() - started,
      server: '?',
      ok: false,
      running: 0,
      generationTokens: 0,
      serverLagMaxMs: Number.NaN,
      serverGcMaxMs: Number.NaN,
    };
  } finally {
    await client.close().catch(() => {});
  }
}

/** Waits (bounded) until the engine runs `want` requests, polling /metrics. */
async function waitForRunning(url: string, want: number, timeoutMs = 120_000): Promise<number> {
  const deadline = performance.now() + timeoutMs;
  let running = 0;
  while (performance.now() < deadline) {
    running = (await scrapeOnce(url)).running;
    if (running >= want) return running;
    await sleep(200);
  }
  throw new RS_ERR_BENCH_TIMEOUT(`${want} running requests (saw ${running})`, timeoutMs);
}

async function scrapeOnSchedule(
  url: string,
  count: number,
  intervalMs: number,
): Promise<ScrapeResult[]> {
  const results: ScrapeResult[] = [];
  const start = performance.now();
  for (let i = 0; i < count; i++) {
    const due = start + i * intervalMs;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    results.push(await scrapeOnce(url));
  }
  return results;
}

// ---- report --------------------------------------------------------------------------------------

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

interface Row {
  who: string;
  n: number;
  failures: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

function row(who: string, results: ScrapeResult[]): Row {
  const ms = results
    .filter((r) => r.ok)
    .map((r) => r.ms)
    .sort((x, y) => x - y);
  return {
    who,
    n: results.length,
    failures: results.filter((r) => !r.ok).length,
    p50: percentile(ms, 50),
    p90: percentile(ms, 90),
    p99: percentile(ms, 99),
    max: ms.at(-1) ?? Number.NaN,
  };
}

function printTable(args: Args, results: ScrapeResult[], tokensPerS: number): Row {
  const all = row('all', results);
  const servers = [...new Set(results.map((r) => r.server))].sort();
  const f = (v: number) => v.toFixed(2).padStart(8);
  console.log(
    `metrics-scrape: ${args.scrapes} scrapes every ${args.intervalMs} ms, ${args.concurrency} concurrent ` +
      `requests of ${args.maxTokens} tokens (${args.model}${args.maxSpeed ? ', max speed' : ''}), ` +
      `${args.apiServerCount} API servers; ${Math.round(tokensPerS)} tokens/s generated meanwhile`,
  );
  console.log('');
  console.log('scraped by      scrapes  failures    p50 ms    p90 ms    p99 ms    max ms');
  for (const r of [
    all,
    ...servers.map((k) =>
      row(
        `api_server ${k}`,
        results.filter((x) => x.server === k),
      ),
    ),
  ]) {
    console.log(
      `${r.who.padEnd(14)}  ${String(r.n).padStart(7)}  ${String(r.failures).padStart(8)}  ${f(r.p50)}  ${f(r.p90)}  ${f(r.p99)}  ${f(r.max)}`,
    );
  }
  return all;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const cluster = await startCluster(args);
  const url = cluster.url;
  const stopOnSignal = (): void =>
    void cluster.stop().then(() => process.exit(ExitCode.Interrupted));
  process.once('SIGINT', stopOnSignal);
  let load: LoadThread | null = null;
  try {
    load = new LoadThread({ url, concurrency: args.concurrency, maxTokens: args.maxTokens });
    await Promise.race([waitForRunning(url, Math.floor(args.concurrency * 0.95)), load.refused]);
    const results = await scrapeOnSchedule(url, args.scrapes, args.intervalMs);
    await load.stop();
    const good = results.filter((r) => r.ok);
    const first = good[0];
    const last = good.at(-1);
    const seconds = (args.scrapes * args.intervalMs) / 1000;
    const tokensPerS =
      first && last ? (last.generationTokens - first.generationTokens) / seconds : 0;
    const all = printTable(args, results, tokensPerS);
    const minRunning = Math.min(...good.map((r) => r.running));
    // What the API servers say of themselves (since they started, so at the last scrape).
    const lagMaxMs = Math.max(...good.map((r) => r.serverLagMaxMs));
    const gcMaxMs = Math.max(...good.map((r) => r.serverGcMaxMs));
    const pass = all.failures === 0 && all.p99 <= 10;
    console.log('');
    console.log(
      `engine running during the scrapes: >= ${minRunning}; bar (all answer, p99 <= 10 ms): ${pass ? 'met' : 'NOT met'}`,
    );
    console.log(
      `API servers' main threads since start: longest event-loop delay ${lagMaxMs.toFixed(1)} ms, ` +
        `longest GC pause ${gcMaxMs.toFixed(1)} ms`,
    );
    if (args.json) {
      console.log(
        JSON.stringify({
          bench: 'metrics-scrape',
          scrapes: all.n,
          failures: all.failures,
          p50_ms: all.p50,
          p90_ms: all.p90,
          p99_ms: all.p99,
          max_ms: all.max,
          concurrency: args.concurrency,
          min_running: minRunning,
          server_event_loop_delay_max_ms: lagMaxMs,
          server_gc_pause_max_ms: gcMaxMs,
          api_servers: args.apiServerCount,
          interval_ms: args.intervalMs,
          tokens_per_s: Math.round(tokensPerS),
          pass,
        }),
      );
    }
  } finally {
    await load?.terminate();
    await cluster.stop();
  }
}

main().catch((error: unknown) => {
  console.error(`bench:metrics: ${(error as Error).stack ?? String(error)}`);
  process.exit(ExitCode.Failure);
});
