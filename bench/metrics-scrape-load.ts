/**
 * The load side of bench/metrics-scrape.ts: start and stop a real cluster (`node dist/src/cli.js
 * serve` on a free port), and a load thread that keeps N RL-shaped generate requests in
 * flight (top_p 0.97, top_k 512, logprobs, sampling masks, routing rows) until told to stop. The
 * load runs in its own thread so that reading its large responses never delays the scraper's timing.
 */

import { setMaxListeners } from 'node:events';
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { Pool } from 'undici';
import { type BenchCluster, startCluster as startBenchCluster } from './loadtest/cluster.js';
import { RS_ERR_BENCH_CHILD_FAILED, RS_ERR_BENCH_TIMEOUT } from './loadtest/errors.js';

export interface ClusterOptions {
  apiServerCount: number;
  model: string;
  maxSpeed: boolean;
  /** Sets --max-num-seqs so that every request runs at once. */
  concurrency: number;
}

// ---- the cluster ---------------------------------------------------------------------------------

/** A cluster from the benchmarks' shared starter (fixed free port, exit tracking, bounded stop). */
export function startCluster(args: ClusterOptions): Promise<BenchCluster> {
  const flags = ['--api-server-count', String(args.apiServerCount), '--model', args.model];
  flags.push('--max-num-seqs', String(Math.max(256, args.concurrency)));
  if (args.maxSpeed) flags.push('--max-speed');
  return startBenchCluster(flags, START_TIMEOUT_MS);
}

const START_TIMEOUT_MS = 60_000;

// ---- the load thread -----------------------------------------------------------------------------

export interface LoadData {
  url: string;
  concurrency: number;
  maxTokens: number;
}

/** Keeps `concurrency` requests in flight until told to stop; posts how many completed. */
async function runLoad(data: LoadData): Promise<void> {
  const pool = new Pool(data.url, {
    connections: data.concurrency,
    headersTimeout: 0,
    bodyTimeout: 0,
  });
  const controller = new AbortController();
  // One signal for every lane's request: each adds a listener.
  setMaxListeners(data.concurrency + 16, controller.signal);
  let stopping = false;
  let completed = 0;
  let failed = 0;
  parentPort!.once('message', () => {
    stopping = true;
    controller.abort();
  });
  const body = (seed: number): string =>
    JSON.stringify({
      // Below every preset's vocabulary (the tiny one has 1000 ids).
      token_ids: Array.from({ length: 256 }, (_, i) => (i * 7919 + seed) % 997),
      sampling_params: {
        max_tokens: data.maxTokens,
        ignore_eos: true,
        seed,
        temperature: 1,
        top_p: 0.97,
        top_k: 512,
        logprobs: 1,
        return_sampling_mask: true,
        return_routed_experts: true,
      },
    });
  const lane = async (lane: number): Promise<void> => {
    for (let n = 0; !stopping; n++) {
      try {
        const res = await pool.request({
          path: '/inference/v1/generate',
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: body(lane * 100_000 + n),
          signal: controller.signal,
        });
        if (res.statusCode === 200) {
          await res.body.dump();
          completed++;
        } else {
          // The cluster refuses the load: report it rather than spin on failures.
          const text = await res.body.text();
          parentPort!.postMessage({ refused: `${res.statusCode}: ${text.slice(0, 300)}` });
          stopping = true;
          controller.abort();
        }
      } catch {
        if (stopping) return;
        failed++;
        await new Promise((r) => setTimeout(r, 100)); // a cluster gone: do not spin
      }
    }
  };
  await Promise.all(Array.from({ length: data.concurrency }, (_, i) => lane(i)));
  await pool.destroy();
  parentPort!.postMessage({ completed, failed });
}

export interface LoadOutcome {
  completed: number;
  failed: number;
}

/** The load thread, seen from the main thread. */
export class LoadThread {
  readonly #worker: Worker;
  /** Rejects when the cluster refuses a request or the thread fails; never resolves. */
  readonly refused: Promise<never>;
  readonly #done: Promise<LoadOutcome>;

  constructor(data: LoadData) {
    this.#worker = new Worker(fileURLToPath(import.meta.url), { workerData: data });
    this.refused = new Promise<never>((_, reject) => {
      this.#worker.on('message', (m: { refused?: string }) => {
        if (m.refused) reject(new RS_ERR_BENCH_CHILD_FAILED('load', `a request got ${m.refused}`));
      });
      this.#worker.once('error', reject);
    });
    this.refused.catch(() => {});
    this.#done = new Promise<LoadOutcome>((resolve) => {
      this.#worker.on('message', (m: Partial<LoadOutcome>) => {
        if (m.completed !== undefined) resolve({ completed: m.completed, failed: m.failed ?? 0 });
      });
    });
  }

  /** Aborts every request; resolves with the counts (RS_ERR_BENCH_TIMEOUT after `timeoutMs`). */
  async stop(timeoutMs = 30_000): Promise<LoadOutcome> {
    this.#worker.postMessage('stop');
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new RS_ERR_BENCH_TIMEOUT('the load thread stop', timeoutMs)),
        timeoutMs,
      );
    });
    try {
      return await Promise.race([this.#done, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  terminate(): Promise<number> {
    return this.#worker.terminate();
  }
}

if (!isMainThread) void runLoad(workerData as LoadData);
