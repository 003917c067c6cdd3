import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BenchChild } from '../loadtest/child.js';
import { type BenchCluster, type ClusterEvents, startCluster } from '../loadtest/cluster.js';
import { RS_ERR_BENCH_CHILD_FAILED } from '../loadtest/errors.js';
import { startFloorServer } from '../loadtest/floor.js';
import type {
  LoadProgress,
  LoadResult,
  LoadSpec,
  ProbeProgress,
  ProbeResult,
  ProbeSpec,
} from '../loadtest/messages.js';
import type { ArmDef } from './arms.js';
import { measureClientParse } from './client-parse.js';
import type { RolloutOptions } from './options.js';

/**
 * One arm: a fresh cluster, a load generator, a probe and a floor server (each its own process;
 * floor-server.ts says what the floor is for), `armSeconds` of
 * load, then the results. Whatever happens, every process started here is stopped before it
 * returns or throws. The client-parse measurement runs after the cluster has stopped, on bodies
 * the generator saved, so it times the decoding alone rather than the machine's contention.
 */

const LOAD_GENERATOR = fileURLToPath(new URL('../loadtest/load-generator.js', import.meta.url));
const PROBE = fileURLToPath(new URL('../loadtest/probe.js', import.meta.url));
const READY_TIMEOUT_MS = 15_000;
/**
 * The generator aborts its in-flight requests; the probe takes a last scrape and waits for its
 * calls still out (30 s bounds), then for the drain (20 s) and its scrape after it (30 s).
 */
const RESULT_TIMEOUT_MS = 120_000;
const TICK_MS = 500;

export const HEALTH_EVERY_MS = 50;
export const METRICS_EVERY_MS = 1_000;
export const CYCLE_EVERY_MS = 10_000;

export interface ArmRun {
  arm: ArmDef;
  /** Epoch ms the load started (warm-up included). */
  startedAtMs: number;
  /** The measured window: epoch ms it began (after the warm-up) and its length. */
  windowStartMs: number;
  wallMs: number;
  load: LoadResult;
  probe: ProbeResult;
  /** Mean decode ms per sampled body (empty when none were sampled). */
  clientParseMs: number[];
  clientParseProblems: string[];
  /** Children the supervisor restarted during the arm, and the tail of the cluster's log. */
  clusterEvents: ClusterEvents;
  clusterLog: string;
}

export type ArmTicker = (
  elapsedMs: number,
  load: LoadProgress | null,
  probe: ProbeProgress | null,
) => void;

export function clusterFlags(arm: ArmDef, options: RolloutOptions): string[] {
  const p = options.profile;
  const speed = p.speedup === null ? ['--max-speed'] : ['--speedup', String(p.speedup)];
  return [
    '--model',
    p.model,
    ...speed,
    '--max-num-seqs',
    String(Math.max(256, p.concurrency)),
    // In-flight requests are cut at the end of an arm; there is nothing to drain.
    '--drain-timeout-s',
    '1',
    ...p.clusterFlags,
    ...arm.flags,
  ];
}

interface Helpers {
  generator: BenchChild;
  probe: BenchChild;
  /** The floor server's URL. */
  floorUrl: string;
  load: LoadProgress | null;
  probed: ProbeProgress | null;
}

async function startHelpers(children: BenchChild[]): Promise<Helpers> {
  const generator = new BenchChild(LOAD_GENERATOR, 'load generator');
  const probe = new BenchChild(PROBE, 'probe');
  children.push(generator, probe);
  const floor = await startFloorServer();
  children.push(floor.child);
  await Promise.all([
    generator.next('ready', READY_TIMEOUT_MS),
    probe.next('ready', READY_TIMEOUT_MS),
  ]);
  const floorUrl = floor.url;
  const helpers: Helpers = { generator, probe, floorUrl, load: null, probed: null };
  generator.onProgress((m) => (helpers.load = m.progress as LoadProgress));
  probe.onProgress((m) => (helpers.probed = m.progress as ProbeProgress));
  return helpers;
}

/** Waits out warm-up and window, ticking the progress bar, failing fast if the cluster dies. */
async function waitArm(
  cluster: BenchCluster,
  h: Helpers,
  totalMs: number,
  tick: ArmTicker,
): Promise<void> {
  const startedAtMs = Date.now();
  for (let elapsed = 0; elapsed < totalMs; elapsed = Date.now() - startedAtMs) {
    await new Promise((r) => setTimeout(r, Math.min(TICK_MS, totalMs - elapsed)));
    if (cluster.crashed()) {
      throw new RS_ERR_BENCH_CHILD_FAILED('cluster', `exited during the arm:\n${cluster.log()}`);
    }
    tick(Date.now() - startedAtMs, h.load, h.probed);
  }
}

/**
 * Runs one arm. The load and the probes start together; the first `warmupSeconds` (the closed
 * loop's simultaneous start, JIT warm-up of every process) are run but not measured.
 */
export async function runArm(
  arm: ArmDef,
  options: RolloutOptions,
  tick: ArmTicker,
): Promise<ArmRun> {
  const sampleDir = await mkdtemp(join(tmpdir(), `ringserve-bench-${process.pid}-`));
  const children: BenchChild[] = [];
  let cluster: BenchCluster | null = null;
  try {
    cluster = await startCluster(clusterFlags(arm, options));
    const h = await startHelpers(children);
    h.probe.send({
      type: 'start',
      spec: probeSpec(cluster.url, cluster.regionName(), h.floorUrl),
    });
    h.generator.send({ type: 'start', spec: loadSpec(cluster.url, arm, options, sampleDir) });
    const startedAtMs = Date.now();
    const warmupMs = options.profile.warmupSeconds * 1000;
    await waitArm(cluster, h, warmupMs + options.profile.armSeconds * 1000, tick);
    const loadResult = h.generator.next('result', RESULT_TIMEOUT_MS);
    const probeResult = h.probe.next('result', RESULT_TIMEOUT_MS);
    h.generator.send({ type: 'stop' });
    h.probe.send({ type: 'stop' });
    const windowStartMs = startedAtMs + warmupMs;
    const wallMs = Date.now() - windowStartMs;
    const load = (await loadResult).result as LoadResult;
    // The generator's requests are done: the probe takes its scrape after drain.
    h.probe.send({ type: 'load-done' });
    const probe = (await probeResult).result as ProbeResult;
    await Promise.all(children.map((c) => c.stop()));
    await cluster.stop();
    const clusterEvents = cluster.events();
    const clusterLog = cluster.log();
    cluster = null;
    const parsed = await measureClientParse(load.sampledBodies, arm.legacy);
    return {
      arm,
      startedAtMs,
      windowStartMs,
      wallMs,
      load,
      probe,
      clientParseMs: parsed.msPerBody,
      clientParseProblems: parsed.problems,
      clusterEvents,
      clusterLog,
    };
  } finally {
    await Promise.all(children.map((c) => c.stop()));
    await cluster?.stop();
    await rm(sampleDir, { recursive: true, force: true });
  }
}

function probeSpec(url: string, regionName: string | null, floorUrl: string): ProbeSpec {
  return {
    regionName,
    floorUrl,
    url,
    healthEveryMs: HEALTH_EVERY_MS,
    metricsEveryMs: METRICS_EVERY_MS,
    cycleEveryMs: CYCLE_EVERY_MS,
    callTimeoutMs: 30_000,
  };
}

function loadSpec(url: string, arm: ArmDef, options: RolloutOptions, sampleDir: string): LoadSpec {
  const p = options.profile;
  return {
    url,
    path: '/inference/v1/generate',
    concurrency: p.concurrency,
    promptTokens: p.promptTokens,
    meanTokens: p.meanTokens,
    sigma: p.sigma,
    minTokens: p.minTokens,
    maxTokens: p.maxTokens,
    promptIdCeiling: options.promptIdCeiling,
    accept: arm.accept,
    seed: options.seed,
    requestTimeoutMs: 30 * 60_000,
    sampleBodies: p.sampleBodies,
    sampleDir,
  };
}
