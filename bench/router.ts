/**
 * The P/D router's figures (issue 14): what it adds to a request, and how its /health answers while
 * it merges many long requests.
 * 1. Added latency: N sequential requests, each sent once through the router and once by hand the
 *    way the router sends it (prefill with max_tokens 1, then decode with the handle), to the same
 *    prefill and decode instances; the difference is the router's hop, decode and merge.
 * 2. /health under load: `--concurrency` long requests at once through the router (closed loop),
 *    and GET /health every 10 ms from a worker thread (its own event loop, open loop: latency from
 *    when the probe was due, 64 connections so probes do not queue in the prober), p50 / p99 / max,
 *    the router's and the decode instance's (the reference: the same load, no merge).
 * Prints a table and, with --json, one JSON line.
 *
 *   npm run bench:router -- [--json] [--requests 50] [--concurrency 128] [--max-tokens 4000]
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { generate } from '../src/client/index.js';
import { ExitCode } from '../src/errors.js';
import { type BenchCluster, startCluster } from './loadtest/cluster.js';
import { startRouter } from './loadtest/router-process.js';
import { percentile } from './loadtest/stats.js';

interface Args {
  json: boolean;
  requests: number;
  concurrency: number;
  maxTokens: number;
  promptTokens: number;
}

function parse(argv: string[]): Args {
  const args: Args = {
    json: false,
    requests: 50,
    concurrency: 128,
    maxTokens: 4000,
    promptTokens: 1000,
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--json') args.json = true;
    else if (flag === '--requests') args.requests = Number(argv[++i]);
    else if (flag === '--concurrency') args.concurrency = Number(argv[++i]);
    else if (flag === '--max-tokens') args.maxTokens = Number(argv[++i]);
    else if (flag === '--prompt-tokens') args.promptTokens = Number(argv[++i]);
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
let stop = false; let due = performance.now();
parentPort.on('message', () => { stop = true; });
parentPort.postMessage('ready');
(async () => {
  const inflight = new Set();
  while (!stop) {
    const at = due;
    pools.forEach((pool, k) => {
      const p = pool.request({ path: '/health', method: 'GET', headersTimeout: 10000 })
        .then(async (r) => { await r.body.dump(); lat[k].push(r.statusCode === 200 ? performance.now() - at : -1); })
        .catch(() => lat[k].push(-1));
      inflight.add(p); p.finally(() => inflight.delete(p));
    });
    due += 10;
    await new Promise((r) => setTimeout(r, Math.max(0, due - performance.now())));
  }
  await Promise.allSettled([...inflight]);
  await Promise.all(pools.map((p) => p.close()));
  parentPort.postMessage(lat);
})();`;

/** /health latencies of the router and, as the reference, of the decode instance behind it. */
async function healthUnderLoad(router: string, decode: string, a: Args) {
  const worker = new Worker(PROBE, {
    eval: true,
    workerData: {
      urls: [router, decode],
      undici: createRequire(import.meta.url).resolve('undici'),
    },
  });
  await new Promise((resolve) => worker.once('message', resolve));
  const done = new Promise<number[][]>((resolve) => worker.once('message', resolve));
  let next = 0;
  let tokens = 0;
  const started = performance.now();
  const loop = async (): Promise<void> => {
    for (let i = next++; i < a.concurrency; i = next++) {
      const r = await generate(router, body(10_000 + i, a.promptTokens, a.maxTokens));
      tokens += r.choices[0]?.tokenIds.length ?? 0;
    }
  };
  await Promise.all(Array.from({ length: a.concurrency }, loop));
  const seconds = (performance.now() - started) / 1000;
  worker.postMessage('stop');
  const [lat = [], reference = []] = await done;
  await worker.terminate();
  return { lat, reference, tokens, seconds };
}

const ms = (v: number | null): string => (v === null ? '-' : v.toFixed(2));

async function main(): Promise<ExitCode> {
  const a = parse(process.argv.slice(2));
  const common = ['--model', 'tiny', '--speedup', '4', '--max-model-len', '8192'];
  const started: BenchCluster[] = [];
  try {
    // Pools big enough for every request's prompt pinned at once (P) and running at once (D).
    const prefill = await startCluster([
      ...common,
      '--role',
      'prefill',
      '--num-gpu-blocks',
      '32768',
    ]);
    started.push(prefill);
    const decode = await startCluster([...common, '--role', 'decode', '--num-gpu-blocks', '65536']);
    started.push(decode);
    const router = await startRouter([prefill.url], [decode.url]);
    started.push(router);
    const { added, direct } = await addedLatency(router.url, prefill.url, decode.url, a);
    const {
      lat: answered,
      reference,
      tokens,
      seconds,
    } = await healthUnderLoad(router.url, decode.url, a);
    const ref = reference.filter((v) => v >= 0);
    const failed = answered.filter((v) => v < 0).length;
    const lat = answered.filter((v) => v >= 0);
    if (failed > 0)
      console.error(`${failed} /health probes failed; router log:\n${router.log().slice(-4000)}`);
    const result = {
      requests: a.requests,
      added_ms: { p50: percentile(added, 50), p99: percentile(added, 99) },
      by_hand_ms: { p50: percentile(direct, 50) },
      health: {
        concurrency: a.concurrency,
        max_tokens: a.maxTokens,
        probes: lat.length,
        p50: percentile(lat, 50),
        p99: percentile(lat, 99),
        max: percentile(lat, 100),
      },
      decode_health: {
        p50: percentile(ref, 50),
        p99: percentile(ref, 99),
        max: percentile(ref, 100),
      },
      load: { tokens, seconds, tok_s: tokens / seconds },
    };
    console.log('figure                                   p50 ms    p99 ms    max ms');
    console.log(
      `router added latency per request     ${ms(result.added_ms.p50).padStart(9)} ${ms(result.added_ms.p99).padStart(9)}         -`,
    );
    console.log(`  (prefill + decode by hand, p50     ${ms(result.by_hand_ms.p50).padStart(9)})`);
    console.log(
      `router /health, ${a.concurrency} long requests ${ms(result.health.p50).padStart(9)} ${ms(result.health.p99).padStart(9)} ${ms(result.health.max).padStart(9)}`,
    );
    console.log(
      `  (${tokens} tokens in ${seconds.toFixed(1)} s through the router, ${lat.length} probes)`,
    );
    const d = result.decode_health;
    console.log(
      `  decode instance /health, same load ${ms(d.p50).padStart(9)} ${ms(d.p99).padStart(9)} ${ms(d.max).padStart(9)}`,
    );
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
