/**
 * The P/D router's figures (issue 14): what it adds to a request, and how its /health answers while
 * it merges many long requests.
 * 1. Added latency: N sequential requests, each sent once through the router and once by hand the
 *    way the router sends it (prefill with max_tokens 1, then decode with the handle), to the same
 *    prefill and decode instances; the difference is the router's hop, decode and merge.
 * 2. /health under load: `--concurrency` long requests at once through the router (closed loop,
 *    `--rounds` requests per connection), and GET /health every 10 ms from a worker thread (its own
 *    event loop, open loop: latency from when the probe was due, 64 connections per target so
 *    probes do not queue in the prober), p50 / p99 / max and failed probes, of the router, of the
 *    decode instance (the same load, no merge) and of a bare floor process (bench/loadtest/floor.ts:
 *    what this machine gives a Node process with nothing to do under the same load), all three
 *    probed at the same instants. The target (issue 32): router p99 <= 1.5 x the floor's, 0 failed.
 * 3. The router's CPU per merged token: user + system of its process (every thread: the merge
 *    workers too) over the load window, from /proc/<pid>/stat, divided by the tokens merged.
 * Prints a table and, with --json, one JSON line.
 *
 *   npm run bench:router -- [--json] [--requests 50] [--concurrency 128] [--max-tokens 4000]
 *     [--rounds 1]
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { generate } from '../src/client/index.js';
import { ExitCode } from '../src/errors.js';
import { type BenchCluster, startCluster } from './loadtest/cluster.js';
import { startFloorServer } from './loadtest/floor.js';
import { cpuMsOf, processCpuMs } from './loadtest/proc-cpu.js';
import { startRouter } from './loadtest/router-process.js';
import { percentile } from './loadtest/stats.js';

interface Args {
  json: boolean;
  requests: number;
  concurrency: number;
  maxTokens: number;
  promptTokens: number;
  rounds: number;
}

function parse(argv: string[]): Args {
  const args: Args = {
    json: false,
    requests: 50,
    concurrency: 128,
    maxTokens: 4000,
    promptTokens: 1000,
    rounds: 1,
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--json') args.json = true;
    else if (flag === '--requests') args.requests = Number(argv[++i]);
    else if (flag === '--concurrency') args.concurrency = Number(argv[++i]);
    else if (flag === '--max-tokens') args.maxTokens = Number(argv[++i]);
    else if (flag === '--prompt-tokens') args.promptTokens = Number(argv[++i]);
    else if (flag === '--rounds') args.rounds = Number(argv[++i]);
    else throw new Error(`unknown flag ${flag}`);
  }
  return args;
}

const prompt = (n: number, salt: number): number[] =>
  Array.from({ length: n }, (_, i) => (i * 37 + salt * 101 + 11) % 990);

function body(i: number, promptTokens: number, maxTokens: number, salt = '') {
  return {
    token_ids: prompt(promptTokens, i),
    // A fresh salt per call: no call finds the prompt in a prefix cache another call left there.
    cache_salt: `${salt}${i}-${Math.random()}`,
    sampling_params: {
      max_tokens: maxTokens,
      ignore_eos: true,
      seed: i,
      logprobs: 1,
      return_routed_experts: true,
      return_sampling_mask: true,
    },
  };
}

/** Router vs the same two calls made by hand, request by request; ms. */
async function addedLatency(router: string, prefill: string, decode: string, a: Args) {
  const added: number[] = [];
  const direct: number[] = [];
  for (let i = 0; i < a.requests; i++) {
    const b = body(i, a.promptTokens, 256);
    let t = performance.now();
    const sp = { ...b.sampling_params, max_tokens: 1 };
    const p = await generate(prefill, {
      ...b,
      sampling_params: sp,
      kv_transfer_params: { do_remote_decode: true },
    });
    await generate(decode, { ...b, kv_transfer_params: p.kvTransferParams });
    const byHand = performance.now() - t;
    t = performance.now();
    await generate(router, b);
    const routed = performance.now() - t;
    direct.push(byHand);
    added.push(routed - byHand);
  }
  return { added, direct };
}

const PROBE = `
const { parentPort, workerData } = require('node:worker_threads');
const { Pool } = require(workerData.undici);
const pools = workerData.urls.map((url) => new Pool(url, { connections: 64 }));
const lat = workerData.urls.map(() => []);
const why = new Set();
let stop = false; let due = performance.now();
parentPort.on('message', () => { stop = true; });
parentPort.postMessage('ready');
(async () => {
  const inflight = new Set();
  while (!stop) {
    // From when it was due, or from when it was sent if a timer fired early (they may, by up to
    // a millisecond): due alone made a fast answer to an early probe negative, counted as failed.
    const at = Math.min(due, performance.now());
    pools.forEach((pool, k) => {
      const p = pool.request({ path: '/health', method: 'GET', headersTimeout: 10000 })
        .then(async (r) => { await r.body.dump(); lat[k].push(r.statusCode === 200 ? performance.now() - at : -r.statusCode); })
        .catch((e) => { lat[k].push(-1); why.add(String(e.code)); });
      inflight.add(p); p.finally(() => inflight.delete(p));
    });
    due += 10;
    await new Promise((r) => setTimeout(r, Math.max(0, due - performance.now())));
  }
  await Promise.allSettled([...inflight]);
  await Promise.all(pools.map((p) => p.close()));
  parentPort.postMessage({ lat, why: [...why] });
})();`;

/**
 * Probe latencies (ms) of each target, in the order given; a failed probe is its status negated,
 * or -1 with no answer (`why`: the errors' codes).
 */
type Latencies = { lat: number[][]; why: string[] };

/**
 * /health of every target in `urls` under the load, and the router's CPU over the load window
 * (ms, from /proc: the window is ~1 s or more, and USER_HZ counts 10 ms).
 */
async function healthUnderLoad(router: BenchCluster, urls: string[], a: Args) {
  const worker = new Worker(PROBE, {
    eval: true,
    workerData: { urls, undici: createRequire(import.meta.url).resolve('undici') },
  });
  await new Promise((resolve) => worker.once('message', resolve));
  const done = new Promise<Latencies>((resolve) => worker.once('message', resolve));
  let next = 0;
  let tokens = 0;
  const total = a.concurrency * a.rounds;
  const cpuBefore = processCpuMs(router.pid);
  const mainBefore = mainThreadCpuMs(router.pid);
  const started = performance.now();
  const loop = async (): Promise<void> => {
    for (let i = next++; i < total; i = next++) {
      const r = await generate(router.url, body(10_000 + i, a.promptTokens, a.maxTokens));
      tokens += r.choices[0]?.tokenIds.length ?? 0;
    }
  };
  await Promise.all(Array.from({ length: a.concurrency }, loop));
  const seconds = (performance.now() - started) / 1000;
  const cpuMs = processCpuMs(router.pid) - cpuBefore;
  const mainCpuMs = mainThreadCpuMs(router.pid) - mainBefore;
  worker.postMessage('stop');
  const { lat, why } = await done;
  await worker.terminate();
  return { lat, why, tokens, seconds, cpuMs, mainCpuMs };
}

/** The main thread's CPU (its task's tid is the process id), ms. */
const mainThreadCpuMs = (pid: number): number => {
  try {
    return cpuMsOf(`/proc/${pid}/task/${pid}/stat`);
  } catch {
    return Number.NaN;
  }
};

/** p50 / p99 / max of the answered probes, and how many failed. */
function summary(samples: number[] = []) {
  const ok = samples.filter((v) => v >= 0);
  return {
    probes: samples.length,
    failed: samples.length - ok.length,
    p50: percentile(ok, 50),
    p99: percentile(ok, 99),
    max: percentile(ok, 100),
  };
}

const ms = (v: number | null): string => (v === null ? '-' : v.toFixed(2));

function printTable(r: BenchResult, a: Args): void {
  const row = (name: string, p50: number | null, p99: number | null, max: number | null, x = '') =>
    console.log(
      `${name.padEnd(38)} ${ms(p50).padStart(9)} ${ms(p99).padStart(9)} ${ms(max).padStart(9)} ${x}`,
    );
  console.log(
    `${'figure'.padEnd(38)} ${'p50 ms'.padStart(9)} ${'p99 ms'.padStart(9)} ${'max ms'.padStart(9)} failed  p99/floor`,
  );
  row('router added latency per request', r.added_ms.p50, r.added_ms.p99, null);
  console.log(`  (prefill + decode by hand, p50 ${ms(r.by_hand_ms.p50)} ms)`);
  console.log(`/health, ${a.concurrency} x ${a.maxTokens}-token requests:`);
  const floor = r.floor_health.p99;
  for (const [name, h] of [
    ['  router', r.health],
    ['  decode instance', r.decode_health],
    ['  floor process', r.floor_health],
  ] as const) {
    const rel = h.p99 === null || floor === null ? '-' : (h.p99 / floor).toFixed(2);
    row(name, h.p50, h.p99, h.max, `${String(h.failed).padStart(6)} ${rel.padStart(10)}`);
  }
  console.log(
    `  (${r.load.tokens} tokens in ${r.load.seconds.toFixed(1)} s through the router, ${r.health.probes} probes each)`,
  );
  console.log(
    `router CPU per merged token: ${r.router_cpu.us_per_token.toFixed(3)} us, main thread ${r.router_cpu.main_thread_us_per_token.toFixed(3)} us (${r.router_cpu.ms} ms CPU over the window, main thread ${r.router_cpu.main_thread_ms} ms)`,
  );
}

type BenchResult = Awaited<ReturnType<typeof measure>>;

async function measure(a: Args, started: { stop(): Promise<void> }[]) {
  const common = ['--model', 'tiny', '--speedup', '4', '--max-model-len', '8192'];
  // Pools big enough for every request's prompt pinned at once (P) and running at once (D).
  const prefill = await startCluster([...common, '--role', 'prefill', '--num-gpu-blocks', '32768']);
  started.push(prefill);
  const decode = await startCluster([...common, '--role', 'decode', '--num-gpu-blocks', '65536']);
  started.push(decode);
  const router = await startRouter([prefill.url], [decode.url]);
  started.push(router);
  const floor = await startFloorServer();
  started.push(floor.child);
  const { added, direct } = await addedLatency(router.url, prefill.url, decode.url, a);
  const { lat, why, tokens, seconds, cpuMs, mainCpuMs } = await healthUnderLoad(
    router,
    [router.url, decode.url, floor.url],
    a,
  );
  const health = summary(lat[0]);
  const failures = lat.flat().filter((v) => v < 0);
  if (failures.length > 0) {
    const kinds = [...new Set(failures.map((v) => (v === -1 ? 'no answer' : `status ${-v}`)))];
    console.error(`failed /health probes: ${kinds.join(', ')}; errors: ${why.join(', ') || '-'}`);
  }
  if (health.failed > 0) console.error(`router log:\n${router.log().slice(-4000)}`);
  return {
    requests: a.requests,
    added_ms: { p50: percentile(added, 50), p99: percentile(added, 99) },
    by_hand_ms: { p50: percentile(direct, 50) },
    health: { concurrency: a.concurrency, max_tokens: a.maxTokens, ...health },
    decode_health: summary(lat[1]),
    floor_health: summary(lat[2]),
    router_cpu: {
      ms: cpuMs,
      us_per_token: (cpuMs * 1000) / tokens,
      main_thread_ms: mainCpuMs,
      main_thread_us_per_token: (mainCpuMs * 1000) / tokens,
    },
    load: { tokens, seconds, tok_s: tokens / seconds },
  };
}

async function main(): Promise<ExitCode> {
  const a = parse(process.argv.slice(2));
  const started: { stop(): Promise<void> }[] = [];
  try {
    const result = await measure(a, started);
    printTable(result, a);
    if (a.json) console.log(JSON.stringify(result));
    return ExitCode.Ok;
  } finally {
    for (const c of started.reverse()) await c.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(ExitCode.Failure);
  },
);
