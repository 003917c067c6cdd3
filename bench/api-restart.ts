/**
 * How fast an API server comes back, and what it holds idle: one real cluster with one API server
 * (so /health is answered only once that server is up), then:
 *   1. spawn -> first /health 200, and the server's main-thread heap and RSS 5 s after (as it
 *      publishes them in the region);
 *   2. `--restarts` times: SIGKILL the API server, time to the first /health 200 of its successor,
 *      and the CPU the successor used until then (whole process and main thread, from /proc:
 *      less noisy than wall time on shared cores).
 * Linux only (/proc). Prints a table and, with --json, a last line of one JSON object.
 *
 *   npm run bench:api-restart -- [--json] [--restarts 3] [--model qwen3-30b-a3b]
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { exitCodeFor, RS_ERR_CONFIG_INVALID } from '../src/errors.js';
import { HEALTH_HEAP_USED, HEALTH_RSS, healthIndex } from '../src/shm/layout.js';
import { openRegion, type Region } from '../src/shm/region.js';
import { serverPid as serverPidAt } from '../src/shm/words.js';
import { startCluster } from './loadtest/cluster.js';
import { cpuMsOf } from './loadtest/proc-cpu.js';
import { percentile } from './loadtest/stats.js';

const SETTLE_MS = 5_000;
const MB = 1024 * 1024;

interface Args {
  json: boolean;
  restarts: number;
  model: string;
}

function parseArgs(argv: string[]): Args {
  const args: Args = { json: false, restarts: 3, model: 'qwen3-30b-a3b' };
  for (let i = 0; i < argv.length; i++) {
    const a = String(argv[i]);
    if (a === '--json') args.json = true;
    else if (a === '--restarts') args.restarts = Number(argv[++i]);
    else if (a === '--model') args.model = String(argv[++i]);
    else
      throw new RS_ERR_CONFIG_INVALID(a, 'unknown argument; use --json, --restarts N, --model M');
  }
  if (!(Number.isInteger(args.restarts) && args.restarts >= 1 && args.restarts <= 20)) {
    throw new RS_ERR_CONFIG_INVALID('--restarts', 'must be an integer in [1, 20]');
  }
  return args;
}

/** Milliseconds from `from` to the first /health 200 (polled every 10 ms). */
async function firstHealthyMs(url: string, from: number): Promise<number> {
  for (;;) {
    try {
      const res = await request(`${url}/health`, { headersTimeout: 2_000, bodyTimeout: 2_000 });
      await res.body.dump();
      if (res.statusCode === 200) return performance.now() - from;
    } catch {
      // Not up yet: the connection is refused or reset.
    }
    await sleep(10);
  }
}

function serverPid(region: Region): number {
  return serverPidAt(region.i32, region.params, 0);
}

function median(xs: readonly number[]): number {
  return percentile(xs, 50) ?? Number.NaN;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  let spawnedAt = 0;
  const cluster = await startCluster(['--model', args.model, '--api-server-count', '1'], 60_000, {
    onSpawn: () => {
      spawnedAt = performance.now();
    },
  });
  try {
    const startMs = await firstHealthyMs(cluster.url, spawnedAt);
    const region = openRegion(cluster.regionName()!);
    await sleep(SETTLE_MS);
    const health = healthIndex(region.params, 0);
    const idleHeapMb = region.f64[health + HEALTH_HEAP_USED]! / MB;
    const idleRssMb = region.f64[health + HEALTH_RSS]! / MB;
    const restarts: { ms: number; cpuMs: number; mainCpuMs: number }[] = [];
    for (let i = 0; i < args.restarts; i++) {
      const pid = serverPid(region);
      const killedAt = performance.now();
      process.kill(pid, 'SIGKILL');
      await sleep(5);
      const ms = await firstHealthyMs(cluster.url, killedAt);
      const next = serverPid(region);
      if (next === pid) throw new Error('the API server answered /health without restarting');
      restarts.push({
        ms,
        cpuMs: cpuMsOf(`/proc/${next}/stat`),
        mainCpuMs: cpuMsOf(`/proc/${next}/task/${next}/stat`),
      });
      await sleep(SETTLE_MS);
    }
    const result = {
      bench: 'api-restart',
      model: args.model,
      start_to_health_ms: Math.round(startMs),
      idle_main_heap_mb: Number(idleHeapMb.toFixed(1)),
      idle_rss_mb: Math.round(idleRssMb),
      restart_to_health_ms_median: Math.round(median(restarts.map((r) => r.ms))),
      restart_cpu_ms_median: median(restarts.map((r) => r.cpuMs)),
      restart_main_thread_cpu_ms_median: median(restarts.map((r) => r.mainCpuMs)),
      restarts: restarts.map((r) => ({ ...r, ms: Math.round(r.ms) })),
    };
    console.log(`spawn -> first /health 200          ${result.start_to_health_ms} ms`);
    console.log(
      `idle API server main heap / RSS     ${result.idle_main_heap_mb} / ${result.idle_rss_mb} MB`,
    );
    for (const r of result.restarts) {
      console.log(
        `SIGKILL -> successor's /health 200  ${r.ms} ms  (CPU ${r.cpuMs} ms, main thread ${r.mainCpuMs} ms)`,
      );
    }
    if (args.json) console.log(JSON.stringify(result));
  } finally {
    await cluster.stop();
  }
}

main().catch((error: unknown) => {
  console.error(`bench:api-restart: ${(error as Error).stack ?? String(error)}`);
  process.exit(exitCodeFor(error));
});
