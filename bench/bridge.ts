/**
 * Generated tokens per second with logprobs and routing rows, through the vLLM bridge against the
 * direct ring path, in one run on the same machine:
 *   direct: `serve --max-speed` (the simulator in the engine-core process);
 *   bridge: `serve --engine vllm` + `engine --vllm-protocol --max-speed
 *           --enable-return-routed-experts` (the simulator behind vLLM's protocol over ZMQ).
 * Each arm keeps `--concurrency` sequences in flight (closed loop over one undici Pool, msgpack
 * answers, ignore_eos so every answer is exactly --max-tokens long, logprobs 0 and routing asked),
 * warms up, then counts the tokens of the answers that complete in the window (client-side) and the
 * engine's own generated-token counter over the same window, and the CPU time (/proc, every thread)
 * each process spent in it per generated token: the engine-core process (the simulator, or the
 * bridge), the API servers, and in the bridge arm the headless engine. The headless engine speaks
 * the newest layout (`ringserve engine`'s default). Prints a table (fastest first, ratio to the
 * slowest) and, with --json, a last line {"bridge_tokens_per_s", "direct_tokens_per_s",
 * "bridge_vs_direct", "bridge_cpu_us_per_token", ...}. Prompt ids are drawn from the model's text vocabulary,
 * and settings the model cannot serve (prompt + --max-tokens past its max_model_len) are refused
 * before any process starts; an arm whose every request fails stops the run with the first error.
 *
 * `--zero-copy-threshold N` starts the headless engine with vLLM's VLLM_MSGPACK_ZERO_COPY_THRESHOLD=N
 * (arrays of N bytes or more travel in frames of their own; at vLLM's default, 256, every routing
 * row of a 384-byte-row model does).
 *
 *   npm run bench:bridge -- [--json] [--seconds 15] [--model qwen3-30b-a3b] [--max-tokens 1024]
 *                           [--zero-copy-threshold N]
 *
 * Every process it starts inherits its environment and is stopped with SIGTERM, so under Node 24
 * `NODE_OPTIONS="--cpu-prof --cpu-prof-dir=DIR" node dist/bench/bridge.js` leaves a V8 CPU profile
 * of each thread of each process (the bench, the primaries, API servers, engine cores and the
 * headless engine) in DIR; Node 20 does not take --cpu-prof in NODE_OPTIONS.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Pool, request } from 'undici';
import { stopChild } from '../src/cluster/stop-child.js';
import { ExitCode, exitCodeFor, RS_ERR_CONFIG_INVALID } from '../src/errors.js';
import { STAT_GENERATION_TOKENS } from '../src/shm/layout.js';
import { openRegion, type Region } from '../src/shm/region.js';
import { engineStat } from '../src/shm/words.js';
import { getModelCard } from '../src/wire/model-card.js';
import { type BenchCluster, startCluster } from './loadtest/cluster.js';
import { RS_ERR_BENCH_CHILD_FAILED, RS_ERR_BENCH_TIMEOUT } from './loadtest/errors.js';
import { clusterPids, processCpuMs } from './loadtest/proc-cpu.js';

const CLI = join(fileURLToPath(new URL('.', import.meta.url)), '..', 'src', 'cli.js');
const PROMPT_TOKENS = 256;
/** How long the headless engine gets to exit on SIGTERM before it is SIGKILLed. */
const ENGINE_STOP_MS = 10_000;
const WARMUP_MS = 3_000;

interface Args {
  json: boolean;
  seconds: number;
  model: string;
  maxTokens: number;
  concurrency: number;
  /** Prompt ids are drawn below this (the model's text vocabulary). */
  vocab: number;
  /** The headless engine's VLLM_MSGPACK_ZERO_COPY_THRESHOLD (null: vLLM's default, 256). */
  zeroCopyThreshold: number | null;
}

function parseArgs(argv: string[]): Args {
  const args: Args = {
    json: false,
    seconds: 15,
    model: 'qwen3-30b-a3b',
    maxTokens: 1024,
    concurrency: 256,
    vocab: 0,
    zeroCopyThreshold: null,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--json') args.json = true;
    else if (a === '--seconds') args.seconds = Number(argv[++i]);
    else if (a === '--model') args.model = String(argv[++i]);
    else if (a === '--max-tokens') args.maxTokens = Number(argv[++i]);
    else if (a === '--concurrency') args.concurrency = Number(argv[++i]);
    else if (a === '--zero-copy-threshold') args.zeroCopyThreshold = Number(argv[++i]);
    else
      throw new RS_ERR_CONFIG_INVALID(
        String(a),
        'unknown argument; use --json, --seconds N, --model NAME, --max-tokens N, --concurrency N, --zero-copy-threshold BYTES',
      );
  }
  for (const [flag, v] of [
    ['--seconds', args.seconds],
    ['--max-tokens', args.maxTokens],
    ['--concurrency', args.concurrency],
  ] as const) {
    if (!(Number.isInteger(v) && v >= 1))
      throw new RS_ERR_CONFIG_INVALID(flag, 'must be an integer >= 1');
  }
  const t = args.zeroCopyThreshold;
  if (t !== null && !(Number.isInteger(t) && t >= 0))
    throw new RS_ERR_CONFIG_INVALID('--zero-copy-threshold', 'must be an integer >= 0');
  const card = getModelCard(args.model);
  if (PROMPT_TOKENS + args.maxTokens > card.maxModelLen) {
    throw new RS_ERR_CONFIG_INVALID(
      '--max-tokens',
      `a prompt of ${PROMPT_TOKENS} tokens + ${args.maxTokens} exceeds ${card.name}'s max_model_len ${card.maxModelLen}; use --max-tokens ${card.maxModelLen - PROMPT_TOKENS} or less`,
    );
  }
  args.vocab = card.textVocabSize ?? card.vocabSize;
  return args;
}

interface ArmResult {
  name: string;
  /** Tokens of answers completed in the window, per second. */
  tokensPerS: number;
  /** The engine's generated-token counter over the window, per second. */
  engineTokensPerS: number;
  answers: number;
  errors: number;
  /** CPU microseconds per generated token (the engine's count) of each process role. */
  cpuUsPerToken: CpuPerToken;
}

interface CpuPerToken {
  /** The engine-core process: the simulator (direct) or the vLLM bridge. */
  engineCore: number;
  /** Every API server together. */
  apiServers: number;
  /** The headless vLLM-protocol engine (bridge arm only; 0 in the direct arm). */
  headlessEngine: number;
}

/** The processes whose CPU an arm reports: pid lists by role, read when the window opens. */
interface ArmProcesses {
  engineCore: number[];
  apiServers: number[];
  headlessEngine: number[];
}

function cpuMsSum(pids: readonly number[]): number {
  let sum = 0;
  for (const pid of pids) sum += processCpuMs(pid);
  return sum;
}

/** The request body of sequence `serial`: distinct prompts (no prefix-cache help), a seed each. */
function requestBody(serial: number, maxTokens: number, vocab: number): string {
  const ids = new Array<number>(PROMPT_TOKENS);
  for (let i = 0; i < PROMPT_TOKENS; i++) ids[i] = (serial * 7919 + i * 104729) % vocab;
  return JSON.stringify({
    token_ids: ids,
    sampling_params: {
      temperature: 1.0,
      top_p: 0.97,
      top_k: 512,
      max_tokens: maxTokens,
      ignore_eos: true,
      logprobs: 0,
      seed: serial + 1,
      return_routed_experts: true,
    },
  });
}

/** Closed loop: `concurrency` workers, each sending its next request once its answer is read. */
async function runLoad(
  url: string,
  args: Args,
  windowMs: number,
  generated: () => number,
  processes: () => ArmProcesses,
) {
  const pool = new Pool(url, { connections: args.concurrency, pipelining: 1 });
  let serial = 0;
  let stop = false;
  let counting = false;
  let tokens = 0;
  let answers = 0;
  let errors = 0;
  let firstError = '';
  const worker = async (): Promise<void> => {
    while (!stop) {
      const body = requestBody(serial++, args.maxTokens, args.vocab);
      try {
        const res = await pool.request({
          path: '/inference/v1/generate',
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/msgpack' },
          body,
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
        // Requests cut by the stop (the pool destroyed under them) are not errors.
        if (stop) return;
        errors++;
        firstError ||= (error as Error).message;
        await sleep(100);
      }
    }
  };
  const workers = Array.from({ length: args.concurrency }, worker);
  await sleep(WARMUP_MS);
  counting = true;
  const engineBefore = generated();
  const pids = processes();
  const cpuBefore = [pids.engineCore, pids.apiServers, pids.headlessEngine].map(cpuMsSum);
  const started = performance.now();
  await sleep(windowMs);
  const seconds = (performance.now() - started) / 1000;
  const engineTokens = generated() - engineBefore;
  const cpuAfter = [pids.engineCore, pids.apiServers, pids.headlessEngine].map(cpuMsSum);
  const perToken = (i: number): number =>
    engineTokens > 0 ? ((cpuAfter[i]! - cpuBefore[i]!) * 1000) / engineTokens : 0;
  stop = true;
  await pool.destroy();
  await Promise.allSettled(workers);
  if (answers === 0 && errors > 0) {
    throw new RS_ERR_BENCH_CHILD_FAILED(
      'the cluster',
      `every request failed; first: ${firstError}`,
    );
  }
  return {
    tokensPerS: tokens / seconds,
    engineTokensPerS: engineTokens / seconds,
    answers,
    errors,
    cpuUsPerToken: {
      engineCore: perToken(0),
      apiServers: perToken(1),
      headlessEngine: perToken(2),
    },
  };
}

function clusterRegion(cluster: BenchCluster): Region {
  const name = cluster.regionName();
  if (name === null) throw new RS_ERR_BENCH_CHILD_FAILED('the cluster', 'no shared region');
  return openRegion(name);
}

function generatedCounter(region: Region): () => number {
  return () => engineStat(region.f64, STAT_GENERATION_TOKENS);
}

/** The cluster's processes, and a headless engine's when there is one. */
function armProcesses(region: Region, headless: ChildProcess | null): () => ArmProcesses {
  return () => {
    const { engine, apiServers } = clusterPids(region);
    const pid = headless?.pid;
    return { engineCore: [engine], apiServers, headlessEngine: pid === undefined ? [] : [pid] };
  };
}

async function directArm(args: Args): Promise<ArmResult> {
  const cluster = await startCluster(['--model', args.model, '--max-speed']);
  try {
    const region = clusterRegion(cluster);
    const r = await runLoad(
      cluster.url,
      args,
      args.seconds * 1000,
      generatedCounter(region),
      armProcesses(region, null),
    );
    return { name: 'direct ring path (serve --max-speed)', ...r };
  } finally {
    await cluster.stop();
  }
}

async function bridgeArm(args: Args): Promise<ArmResult> {
  const cluster = await startCluster([
    '--model',
    args.model,
    '--engine',
    'vllm',
    '--data-parallel-address',
    '127.0.0.1',
    '--data-parallel-rpc-port',
    '0',
  ]);
  let engine: ChildProcess | null = null;
  try {
    const match = /listening on tcp:\/\/([^:\s]+):(\d+)/.exec(cluster.log());
    if (match === null) throw new RS_ERR_BENCH_CHILD_FAILED('bridge', 'no handshake endpoint');
    engine = spawn(
      process.execPath,
      [
        CLI,
        'engine',
        '--vllm-protocol',
        '--data-parallel-address',
        match[1]!,
        '--data-parallel-rpc-port',
        match[2]!,
        '--enable-return-routed-experts',
        '--model',
        args.model,
        '--max-speed',
        '--log-level',
        'warn',
      ],
      {
        stdio: ['ignore', 'ignore', 'inherit'],
        env:
          args.zeroCopyThreshold === null
            ? process.env
            : { ...process.env, VLLM_MSGPACK_ZERO_COPY_THRESHOLD: String(args.zeroCopyThreshold) },
      },
    );
    await waitHealthy(cluster.url, 60_000);
    const region = clusterRegion(cluster);
    const r = await runLoad(
      cluster.url,
      args,
      args.seconds * 1000,
      generatedCounter(region),
      armProcesses(region, engine),
    );
    return { name: 'vLLM bridge (serve --engine vllm + engine --vllm-protocol)', ...r };
  } finally {
    // SIGTERM first: an engine that exits on its own writes what it was asked to (a --cpu-prof).
    if (engine !== null) await stopChild(engine, ENGINE_STOP_MS);
    await cluster.stop();
  }
}

async function waitHealthy(url: string, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const res = await request(`${url}/health`).catch(() => null);
    await res?.body.dump();
    if (res?.statusCode === 200) return;
    if (Date.now() > end) throw new RS_ERR_BENCH_TIMEOUT('the vLLM engine to register', timeoutMs);
    await sleep(100);
  }
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const loadBefore = loadavg()[0]!;
  const direct = await directArm(args);
  const bridge = await bridgeArm(args);
  const loadAfter = loadavg()[0]!;
  const rows = [direct, bridge].sort((a, b) => b.tokensPerS - a.tokensPerS);
  const slowest = Math.min(...rows.map((r) => r.tokensPerS)) || 1;
  const threshold = args.zeroCopyThreshold ?? 'vLLM default 256';
  console.log(
    `${args.concurrency} sequences, ${args.model}, max_tokens ${args.maxTokens}, logprobs + routing, ${args.seconds} s window, headless engine VLLM_MSGPACK_ZERO_COPY_THRESHOLD ${threshold}`,
  );
  console.log(
    'arm'.padEnd(62),
    'tok/s (answers)'.padStart(16),
    'tok/s (engine)'.padStart(15),
    'x slowest'.padStart(10),
    'CPU us/token: engine-core'.padStart(26),
    'API'.padStart(6),
    'headless'.padStart(9),
  );
  for (const r of rows) {
    const c = r.cpuUsPerToken;
    console.log(
      r.name.padEnd(62),
      Math.round(r.tokensPerS).toLocaleString('en-US').padStart(16),
      Math.round(r.engineTokensPerS).toLocaleString('en-US').padStart(15),
      (r.tokensPerS / slowest).toFixed(2).padStart(10),
      c.engineCore.toFixed(2).padStart(26),
      c.apiServers.toFixed(2).padStart(6),
      c.headlessEngine.toFixed(2).padStart(9),
    );
  }
  console.log(
    `load average (1 min): ${loadBefore.toFixed(2)} before, ${loadAfter.toFixed(2)} after`,
  );
  if (args.json) {
    console.log(
      JSON.stringify({
        bridge_tokens_per_s: Math.round(bridge.tokensPerS),
        direct_tokens_per_s: Math.round(direct.tokensPerS),
        bridge_engine_tokens_per_s: Math.round(bridge.engineTokensPerS),
        direct_engine_tokens_per_s: Math.round(direct.engineTokensPerS),
        bridge_vs_direct: direct.tokensPerS > 0 ? bridge.tokensPerS / direct.tokensPerS : 0,
        bridge_cpu_us_per_token: round2(bridge.cpuUsPerToken.engineCore),
        bridge_api_cpu_us_per_token: round2(bridge.cpuUsPerToken.apiServers),
        headless_engine_cpu_us_per_token: round2(bridge.cpuUsPerToken.headlessEngine),
        direct_engine_cpu_us_per_token: round2(direct.cpuUsPerToken.engineCore),
        direct_api_cpu_us_per_token: round2(direct.cpuUsPerToken.apiServers),
        errors: direct.errors + bridge.errors,
        concurrency: args.concurrency,
        model: args.model,
        max_tokens: args.maxTokens,
        zero_copy_threshold: args.zeroCopyThreshold ?? 256,
        load_avg_1m_before: loadBefore,
        load_avg_1m_after: loadAfter,
      }),
    );
  }
}

function round2(v: number): number {
  return Math.round(v * 100) / 100;
}

main().then(
  () => process.exit(ExitCode.Ok),
  (error: unknown) => {
    const code = exitCodeFor(error);
    // A refused setting is the user's to fix: its message alone, without a stack.
    const text = code === ExitCode.Usage ? (error as Error).message : (error as Error).stack;
    console.error(`bench:bridge: ${text ?? String(error)}`);
    process.exit(code);
  },
);
