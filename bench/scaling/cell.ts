import { writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { BenchChild } from '../loadtest/child.js';
import { type BenchCluster, startCluster, startServerProcess } from '../loadtest/cluster.js';
import { RS_ERR_BENCH_CHILD_FAILED } from '../loadtest/errors.js';
import { requestBody } from '../loadtest/load-plan.js';
import type { LoadResult, LoadSpec } from '../loadtest/messages.js';
import { familyCpuMs, machineTicks, processCpuMs } from '../loadtest/proc-cpu.js';
import { percentile } from '../loadtest/stats.js';

/**
 * One cell of the scaling benchmark: a server (a ringserve cluster with k API servers, or the bare
 * fastify route with k workers), a closed-loop load generator in its own process, warm-up, then a
 * measured window. Every process started here is stopped before it returns or throws.
 */

const LOAD_GENERATOR = fileURLToPath(new URL('../loadtest/load-generator.js', import.meta.url));
const BARE_SERVER = fileURLToPath(new URL('./bare-server.js', import.meta.url));
const BARE_READY = /bare server (listening) on port (\d+)/;
const READY_TIMEOUT_MS = 15_000;
const RESULT_TIMEOUT_MS = 60_000;

export interface RequestKind {
  name: string;
  promptTokens: number;
  maxTokens: number;
  concurrency: number;
}

export type Target =
  | { kind: 'ringserve'; flags: string[] }
  | { kind: 'bare'; bodyFile: string; contentType: string };

export interface CellResult {
  requestsPerS: number;
  tokensPerS: number;
  p50Ms: number | null;
  p99Ms: number | null;
  errors: number;
  errorSample: string | null;
  /** Requests answered in the measured window (what the rates and the CPU are per). */
  answered: number;
  /** Where the CPU went in the measured window; null when /proc could not be read. */
  cpu: CellCpu | null;
}

/**
 * CPU per answered request in the measured window (us, every thread of each process), from /proc:
 * the server's processes together (ringserve's primary, engine core and API servers; the bare
 * route's primary and workers), the engine core's share of that (null for the bare route), and
 * the load generator; and the share of the machine's CPU time that was idle.
 */
export interface CellCpu {
  serverUs: number;
  engineUs: number | null;
  loadUs: number;
  idlePct: number;
}

/** The engine core's process name (`ringserve-engine`, as /proc's 15-character comm shows it). */
const ENGINE_COMM = 'ringserve-engin';

interface CpuReading {
  server: Map<string, number>;
  load: number;
  machine: { total: number; idle: number };
}

function readCpu(serverPid: number, loadPid: number | undefined): CpuReading | null {
  try {
    return {
      server: familyCpuMs(serverPid),
      load: loadPid === undefined ? Number.NaN : processCpuMs(loadPid),
      machine: machineTicks(),
    };
  } catch {
    return null; // not Linux, or /proc unreadable: the cell is reported without CPU figures
  }
}

function cpuPerRequest(
  a: CpuReading | null,
  b: CpuReading | null,
  requests: number,
): CellCpu | null {
  if (a === null || b === null || requests === 0) return null;
  const msSum = (m: Map<string, number>): number => [...m.values()].reduce((x, y) => x + y, 0);
  const us = (ms: number): number => (ms * 1000) / requests;
  const engine = b.server.has(ENGINE_COMM)
    ? us((b.server.get(ENGINE_COMM) ?? 0) - (a.server.get(ENGINE_COMM) ?? 0))
    : null;
  const total = b.machine.total - a.machine.total;
  return {
    serverUs: us(msSum(b.server) - msSum(a.server)),
    engineUs: engine,
    loadUs: us(b.load - a.load),
    idlePct: total > 0 ? (100 * (b.machine.idle - a.machine.idle)) / total : 0,
  };
}

export function kindSpec(url: string, kind: RequestKind, promptIdCeiling: number): LoadSpec {
  return {
    url,
    path: '/inference/v1/generate',
    concurrency: kind.concurrency,
    promptTokens: kind.promptTokens,
    meanTokens: kind.maxTokens,
    sigma: 0,
    minTokens: kind.maxTokens,
    maxTokens: kind.maxTokens,
    promptIdCeiling,
    accept: 'json',
    seed: 7,
    requestTimeoutMs: 120_000,
    sampleBodies: 0,
    sampleDir: null,
  };
}

/** One real answer of this kind from a running ringserve, saved as the bare server's canned body. */
export async function captureBody(
  url: string,
  kind: RequestKind,
  ceiling: number,
  file: string,
): Promise<string> {
  const spec = kindSpec(url, kind, ceiling);
  const res = await request(new URL(spec.path, url), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: requestBody(spec, 0, kind.maxTokens),
    headersTimeout: spec.requestTimeoutMs,
    bodyTimeout: spec.requestTimeoutMs,
  });
  const bytes = Buffer.from(await res.body.arrayBuffer());
  if (res.statusCode !== 200) {
    throw new RS_ERR_BENCH_CHILD_FAILED(
      'cluster',
      `answered ${res.statusCode}: ${bytes.toString('utf8', 0, 300)}`,
    );
  }
  await writeFile(file, bytes);
  return String(res.headers['content-type'] ?? 'application/json');
}

function startTarget(target: Target, servers: number): Promise<BenchCluster> {
  if (target.kind === 'ringserve')
    return startCluster(['--api-server-count', String(servers), ...target.flags]);
  const args = [
    BARE_SERVER,
    '--workers',
    String(servers),
    '--body-file',
    target.bodyFile,
    '--content-type',
    target.contentType,
  ];
  return startServerProcess('bare server', args, BARE_READY, READY_TIMEOUT_MS);
}

export interface CellPlan {
  kind: RequestKind;
  target: Target;
  servers: number;
  warmupMs: number;
  windowMs: number;
  promptIdCeiling: number;
  /** Runs against the started server before the load (e.g. captureBody). */
  before?: (url: string) => Promise<void>;
}

export async function runCell(plan: CellPlan): Promise<CellResult> {
  let server: BenchCluster | null = null;
  let generator: BenchChild | null = null;
  try {
    server = await startTarget(plan.target, plan.servers);
    await plan.before?.(server.url);
    generator = new BenchChild(LOAD_GENERATOR, 'load generator');
    await generator.next('ready', READY_TIMEOUT_MS);
    generator.send({ type: 'start', spec: kindSpec(server.url, plan.kind, plan.promptIdCeiling) });
    await new Promise((r) => setTimeout(r, plan.warmupMs));
    const windowStartMs = Date.now();
    const before = readCpu(server.pid, generator.pid);
    await new Promise((r) => setTimeout(r, plan.windowMs));
    const after = readCpu(server.pid, generator.pid);
    const windowEndMs = Date.now();
    if (server.crashed())
      throw new RS_ERR_BENCH_CHILD_FAILED('server', `exited during the cell:\n${server.log()}`);
    const result = generator.next('result', RESULT_TIMEOUT_MS);
    generator.send({ type: 'stop' });
    const load = (await result).result as LoadResult;
    const cell = summarize(load, windowStartMs, windowEndMs);
    return { ...cell, cpu: cpuPerRequest(before, after, cell.answered) };
  } finally {
    await generator?.stop();
    await server?.stop();
  }
}

/** The requests that finished in [windowStartMs, windowEndMs). */
function summarize(
  load: LoadResult,
  windowStartMs: number,
  windowEndMs: number,
): Omit<CellResult, 'cpu'> {
  const windowS = (windowEndMs - windowStartMs) / 1000;
  const idx = load.finishedAtMs.flatMap((at, i) =>
    at >= windowStartMs && at < windowEndMs ? [i] : [],
  );
  const latency = idx.map((i) => load.latencyMs[i] as number);
  const tokens = idx.reduce((a, i) => a + Math.max(0, load.completionTokens[i] as number), 0);
  return {
    answered: idx.length,
    requestsPerS: idx.length / windowS,
    tokensPerS: tokens / windowS,
    p50Ms: percentile(latency, 50),
    p99Ms: percentile(latency, 99),
    errors: load.errors,
    errorSample: load.errorSamples[0] ?? null,
  };
}
