/**
 * Data parallelism through the vLLM bridge: `serve --engine vllm --data-parallel-size N` with N
 * headless engines (`engine --vllm-protocol --data-parallel-size N --data-parallel-start-rank r`,
 * the simulator at its modelled step times, routing rows on), for each N of --sizes. For each size:
 *   - identical: a fixed set of requests (seeds 1..16, logprobs and routing) gives the same token
 *     ids, logprobs and routing rows as at the first size;
 *   - load: N x --per-rank sequences in flight (closed loop, msgpack answers, ignore_eos) for a
 *     window after a warm-up: answered tokens per second, the engine-core counter's tokens per
 *     second, failed requests, and the CPU microseconds per generated token (/proc, every thread)
 *     of the bridge process, the API servers and the headless engines together;
 *   - /health probed every 100 ms through the window: p50, p99, max, failed probes;
 *   - scaling: tokens/s over N x the first size's per-rank tokens/s. A rank's capacity is modelled
 *     (its step times), so on a machine with the cores for it this stays near 1; below 1 is where
 *     this machine's CPU is the limit (the CPU columns say whose).
 * Prints a table and, with --json, a last line {"sizes": [...], ...}.
 *
 *   npm run bench:dp -- [--json] [--sizes 1,2,4] [--seconds 10] [--per-rank 64] [--max-tokens 256]
 *                       [--model tiny]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Pool, request } from 'undici';
import { generate } from '../src/client/index.js';
import { ExitCode, exitCodeFor, RS_ERR_CONFIG_INVALID } from '../src/errors.js';
import { STAT_GENERATION_TOKENS } from '../src/shm/layout.js';
import { openRegion } from '../src/shm/region.js';
import { engineStat } from '../src/shm/words.js';
import { getModelCard } from '../src/wire/model-card.js';
import { type BenchCluster, startCluster } from './loadtest/cluster.js';
import { RS_ERR_BENCH_CHILD_FAILED, RS_ERR_BENCH_TIMEOUT } from './loadtest/errors.js';
import { clusterPids, processCpuMs } from './loadtest/proc-cpu.js';
import { max, percentile, round } from './loadtest/stats.js';

const CLI = join(fileURLToPath(new URL('.', import.meta.url)), '..', 'src', 'cli.js');
const PROMPT_TOKENS = 128;
const WARMUP_MS = 3_000;
const PROBE_MS = 100;
const CHECK_SEEDS = 16;

interface Args {
  json: boolean;
  sizes: number[];
  seconds: number;
  perRank: number;
  maxTokens: number;
  model: string;
  vocab: number;
}

function parseArgs(argv: string[]): Args {
  const args: Args = {
    json: false,
    sizes: [1, 2, 4],
    seconds: 10,
    perRank: 64,
    maxTokens: 256,
    model: 'tiny',
    vocab: 0,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--json') args.json = true;
    else if (a === '--sizes') args.sizes = String(argv[++i]).split(',').map(Number);
    else if (a === '--seconds') args.seconds = Number(argv[++i]);
    else if (a === '--per-rank') args.perRank = Number(argv[++i]);
    else if (a === '--max-tokens') args.maxTokens = Number(argv[++i]);
    else if (a === '--model') args.model = String(argv[++i]);
    else
      throw new RS_ERR_CONFIG_INVALID(
        String(a),
        'unknown argument; use --json, --sizes 1,2,4, --seconds N, --per-rank N, --max-tokens N, --model NAME',
      );
  }
  for (const [flag, v] of [
    ['--seconds', args.seconds],
    ['--per-rank', args.perRank],
    ['--max-tokens', args.maxTokens],
  ] as const) {
    if (!(Number.isInteger(v) && v >= 1))
      throw new RS_ERR_CONFIG_INVALID(flag, 'must be an integer >= 1');
  }
  if (args.sizes.length === 0 || !args.sizes.every((n) => Number.isInteger(n) && n >= 1 && n <= 64))
    throw new RS_ERR_CONFIG_INVALID(
      '--sizes',
      'must be a comma-separated list of integers in [1, 64]',
    );
  const card = getModelCard(args.model);
  if (PROMPT_TOKENS + args.maxTokens > card.maxModelLen)
    throw new RS_ERR_CONFIG_INVALID(
      '--max-tokens',
      `a prompt of ${PROMPT_TOKENS} tokens + ${args.maxTokens} exceeds ${card.name}'s max_model_len ${card.maxModelLen}`,
    );
  args.vocab = card.textVocabSize ?? card.vocabSize;
  return args;
}

interface SizeResult {
  size: number;
  tokensPerS: number;
  engineTokensPerS: number;
  answers: number;
  failed: number;
  /** Sequences in flight. */
  concurrency: number;
  cpu: { bridge: number; apiServers: number; engines: number };
  health: { p50: number | null; p99: number | null; max: number | null; failed: number };
  /** Digest of the check requests' answers. */
  digest: string;
}

function prompt(serial: number, vocab: number): number[] {
  const ids = new Array<number>(PROMPT_TOKENS);
  for (let i = 0; i < PROMPT_TOKENS; i++) ids[i] = (serial * 7919 + i * 104729) % vocab;
  return ids;
}

function loadBody(serial: number, args: Args): string {
  return JSON.stringify({
    token_ids: prompt(serial, args.vocab),
    sampling_params: {
      temperature: 1.0,
      top_k: 256,
      max_tokens: args.maxTokens,
      ignore_eos: true,
      logprobs: 0,
      seed: serial + 1,
      return_routed_experts: true,
    },
  });
}

/** The check requests' answers, hashed: token ids, logprobs and routing rows of each. */
async function checkDigest(url: string, args: Args): Promise<string> {
  const hash = createHash('sha256');
  const answers = await Promise.all(
    Array.from({ length: CHECK_SEEDS }, (_, k) =>
      generate(url, {
        token_ids: prompt(1_000_000 + k, args.vocab),
        sampling_params: {
          temperature: 0.9,
          top_k: 64,
          max_tokens: 32,
          seed: k + 1,
          logprobs: 1,
          return_routed_experts: true,
        },
      }),
    ),
  );
  for (const answer of answers) {
    const c = answer.choices[0]!;
    hash.update(Buffer.from(Int32Array.from(c.tokenIds).buffer));
    hash.update(Buffer.from(Float32Array.from(c.logprobs ?? []).buffer));
    hash.update(Buffer.from(Int32Array.from(c.routedExperts?.data ?? []).buffer));
  }
  return hash.digest('hex').slice(0, 16);
}

async function probeHealth(url: string, until: () => boolean) {
  const times: number[] = [];
  let failed = 0;
  while (!until()) {
    const t0 = performance.now();
    try {
      const res = await request(`${url}/health`, { headersTimeout: 5_000, bodyTimeout: 5_000 });
      await res.body.dump();
      if (res.statusCode !== 200) failed++;
      else times.push(performance.now() - t0);
    } catch {
      failed++;
    }
    await sleep(PROBE_MS);
  }
  return { times, failed };
}

async function runSize(size: number, args: Args): Promise<SizeResult> {
  const cluster = await startCluster([
    '--model',
    args.model,
    '--engine',
    'vllm',
    '--data-parallel-size',
    String(size),
    '--data-parallel-address',
    '127.0.0.1',
    '--data-parallel-rpc-port',
    '0',
  ]);
  const engines: ChildProcess[] = [];
  try {
    const match = /listening on tcp:\/\/([^:\s]+):(\d+)/.exec(cluster.log());
    if (match === null) throw new RS_ERR_BENCH_CHILD_FAILED('bridge', 'no handshake endpoint');
    for (let rank = 0; rank < size; rank++) {
      engines.push(
        spawn(
          process.execPath,
          [
            CLI,
            'engine',
            '--vllm-protocol',
            '--data-parallel-address',
            match[1]!,
            '--data-parallel-rpc-port',
            match[2]!,
            '--data-parallel-size',
            String(size),
            '--data-parallel-start-rank',
            String(rank),
            '--enable-return-routed-experts',
            '--model',
            args.model,
            '--log-level',
            'warn',
          ],
          { stdio: ['ignore', 'ignore', 'inherit'] },
        ),
      );
    }
    await ranksUp(cluster.url, size, 60_000);
    const digest = await checkDigest(cluster.url, args);
    return { size, digest, ...(await load(cluster, size, args, engines)) };
  } finally {
    for (const engine of engines) engine.kill('SIGKILL');
    await cluster.stop();
  }
}

async function load(
  cluster: BenchCluster,
  size: number,
  args: Args,
  engines: readonly ChildProcess[],
): Promise<Omit<SizeResult, 'size' | 'digest'>> {
  const name = cluster.regionName();
  if (name === null) throw new RS_ERR_BENCH_CHILD_FAILED('the cluster', 'no shared region');
  const region = openRegion(name);
  const generated = (): number => engineStat(region.f64, STAT_GENERATION_TOKENS);
  const concurrency = size * args.perRank;
  const pool = new Pool(cluster.url, { connections: concurrency, pipelining: 1 });
  let serial = 0;
  let stop = false;
  let counting = false;
  let tokens = 0;
  let answers = 0;
  let failed = 0;
  let firstError = '';
  const worker = async (): Promise<void> => {
    while (!stop) {
      try {
        const res = await pool.request({
          path: '/inference/v1/generate',
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/msgpack' },
          body: loadBody(serial++, args),
          headersTimeout: 600_000,
          bodyTimeout: 600_000,
        });
        if (res.statusCode !== 200)
          throw new Error(`HTTP ${res.statusCode} ${await res.body.text()}`);
        for await (const _ of res.body) {
          // read and drop: the answer is counted, not decoded
        }
        if (counting && !stop) {
          tokens += args.maxTokens;
          answers++;
        }
      } catch (error) {
        if (stop) return;
        failed++;
        firstError ||= (error as Error).message;
        await sleep(100);
      }
    }
  };
  const workers = Array.from({ length: concurrency }, worker);
  await sleep(WARMUP_MS);
  counting = true;
  const { engine, apiServers } = clusterPids(region);
  const enginePids = engines.map((e) => e.pid ?? 0).filter((pid) => pid > 0);
  const cpu = (): number[] => [[engine], apiServers, enginePids].map(cpuMsSum);
  const cpuBefore = cpu();
  const engineBefore = generated();
  const started = performance.now();
  let windowOver = false;
  const probes = probeHealth(cluster.url, () => windowOver);
  await sleep(args.seconds * 1000);
  windowOver = true;
  const seconds = (performance.now() - started) / 1000;
  const engineTokens = generated() - engineBefore;
  const cpuAfter = cpu();
  const health = await probes;
  stop = true;
  await pool.destroy();
  await Promise.allSettled(workers);
  if (answers === 0)
    throw new RS_ERR_BENCH_CHILD_FAILED(
      'the cluster',
      `no answer in the window; first error: ${firstError}`,
    );
  const perToken = (i: number): number =>
    engineTokens > 0 ? ((cpuAfter[i]! - cpuBefore[i]!) * 1000) / engineTokens : 0;
  return {
    tokensPerS: tokens / seconds,
    engineTokensPerS: engineTokens / seconds,
    answers,
    failed,
    concurrency,
    cpu: { bridge: perToken(0), apiServers: perToken(1), engines: perToken(2) },
    health: {
      p50: round(percentile(health.times, 50)),
      p99: round(percentile(health.times, 99)),
      max: round(max(health.times)),
      failed: health.failed,
    },
  };
}

function cpuMsSum(pids: readonly number[]): number {
  let sum = 0;
  for (const pid of pids) sum += processCpuMs(pid);
  return sum;
}

/** /health 200, and (N > 1) every rank attached per ringserve_dp_rank_up. */
async function ranksUp(url: string, size: number, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const res = await request(`${url}/metrics`).catch(() => null);
    const text = res === null ? '' : await res.body.text();
    const up = text
      .split('\n')
      .filter((l) => l.startsWith('ringserve_dp_rank_up{') && l.endsWith(' 1'));
    const health = await request(`${url}/health`).catch(() => null);
    await health?.body.dump();
    if (health?.statusCode === 200 && (size === 1 || up.length === size)) return;
    if (Date.now() > end)
      throw new RS_ERR_BENCH_TIMEOUT(`${size} engine ranks to register`, timeoutMs);
    await sleep(200);
  }
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const loadBefore = loadavg()[0]!;
  const results: SizeResult[] = [];
  for (const size of args.sizes) results.push(await runSize(size, args));
  const loadAfter = loadavg()[0]!;
  const base = results[0]!;
  const perRankBase = base.tokensPerS / base.size;
  console.log(
    `${args.model} at modelled step times, ${args.perRank} sequences per rank, max_tokens ${args.maxTokens}, routing rows, ${args.seconds} s window`,
  );
  console.log(
    'DP'.padStart(3),
    'seqs'.padStart(5),
    'tok/s'.padStart(9),
    'scaling'.padStart(8),
    'failed'.padStart(7),
    'identical'.padStart(10),
    'CPU us/tok: bridge'.padStart(19),
    'API'.padStart(6),
    'engines'.padStart(8),
    '/health p50/p99/max ms'.padStart(24),
    'failed'.padStart(7),
  );
  const rows = results.map((r) => ({
    ...r,
    scaling: perRankBase > 0 ? r.tokensPerS / (perRankBase * r.size) : 0,
    identical: r.digest === base.digest,
  }));
  for (const r of rows) {
    console.log(
      String(r.size).padStart(3),
      String(r.concurrency).padStart(5),
      Math.round(r.tokensPerS).toLocaleString('en-US').padStart(9),
      r.scaling.toFixed(2).padStart(8),
      String(r.failed).padStart(7),
      String(r.identical).padStart(10),
      r.cpu.bridge.toFixed(2).padStart(19),
      r.cpu.apiServers.toFixed(2).padStart(6),
      r.cpu.engines.toFixed(2).padStart(8),
      `${r.health.p50}/${r.health.p99}/${r.health.max}`.padStart(24),
      String(r.health.failed).padStart(7),
    );
  }
  console.log(
    `load average (1 min): ${loadBefore.toFixed(2)} before, ${loadAfter.toFixed(2)} after`,
  );
  if (args.json) {
    console.log(
      JSON.stringify({
        model: args.model,
        per_rank: args.perRank,
        max_tokens: args.maxTokens,
        seconds: args.seconds,
        sizes: rows.map((r) => ({
          data_parallel_size: r.size,
          concurrency: r.concurrency,
          tokens_per_s: Math.round(r.tokensPerS),
          engine_tokens_per_s: Math.round(r.engineTokensPerS),
          scaling: round(r.scaling),
          failed: r.failed,
          identical: r.identical,
          bridge_cpu_us_per_token: round(r.cpu.bridge),
          api_cpu_us_per_token: round(r.cpu.apiServers),
          engines_cpu_us_per_token: round(r.cpu.engines),
          health_ms: r.health,
        })),
        load_avg_1m_before: loadBefore,
        load_avg_1m_after: loadAfter,
      }),
    );
  }
}

main().then(
  () => process.exit(ExitCode.Ok),
  (error: unknown) => {
    const code = exitCodeFor(error);
    // A refused setting is the user's to fix: its message alone, without a stack.
    const text = code === ExitCode.Usage ? (error as Error).message : (error as Error).stack;
    console.error(`bench:dp: ${text ?? String(error)}`);
    process.exit(code);
  },
);
