/**
 * Starts a real ringserve cluster (`node dist/src/cli.js serve`) on an ephemeral port for a test,
 * with the starter the benchmarks use (bench/loadtest/cluster.ts), and makes sure it ends.
 *
 * Every cluster started here is registered. One that a test starts and does not stop is stopped
 * after that test (afterEach), one that a beforeAll starts after the file (afterAll), whatever the
 * test did or threw, timeouts included: SIGTERM, SIGKILL after a bound, then SIGKILL for any of its
 * processes still alive and unlink of its region. test/global-setup.ts checks the whole run again.
 * The hooks are registered when a test file imports this module (vitest isolates test files, so
 * each file gets its own).
 */
import { existsSync, readdirSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { Client } from 'undici';
import { afterAll, afterEach, beforeEach } from 'vitest';
import { type BenchCluster, startCluster as startServe } from '../../bench/loadtest/cluster.js';
import { API_SERVER_HEADER } from '../../src/protocol/api-server-header.js';
import {
  ENGINE_STATS,
  HEALTH_HEAP_USED,
  HEALTH_IN_FLIGHT,
  healthIndex,
} from '../../src/shm/layout.js';
import { shmAddon } from '../../src/shm/native.js';
import { openRegion, type Region } from '../../src/shm/region.js';
import { notePrimary } from '../test-run.js';
import { until } from '../until.js';

/** How long stop() lets a cluster drain after SIGTERM before it SIGKILLs the primary. */
const STOP_TIMEOUT_MS = 20_000;

export interface Cluster {
  readonly url: string;
  readonly port: number;
  readonly process: BenchCluster['child'];
  /** Everything the cluster has written to stdout and stderr so far. */
  log(): string;
  /** PIDs of the cluster's processes by title (ringserve-engine, ringserve-api-0, ...). */
  pids(): Promise<Map<string, number>>;
  /** The cluster's shared region, mapped into the test process (read-only use). */
  region(): Region;
  /** Engine stats slot (a STAT_* constant) from the region. */
  engineStat(slot: number): number;
  /** API server k's published main-thread heap in use, bytes. */
  serverHeap(server: number): number;
  serverInFlight(server: number): number;
  /** SIGTERM (the cluster drains and unlinks its region), SIGKILL after a bound. */
  stop(): Promise<void>;
}

interface Registered {
  cluster: Cluster;
  /** Started inside a test (stopped after it) or in a beforeAll (stopped after the file). */
  scope: 'test' | 'file';
}

const registered = new Set<Registered>();
let inTest = false;

beforeEach(() => {
  inTest = true;
});
afterEach(async () => {
  inTest = false;
  await stopRegistered('test');
});
afterAll(async () => {
  await stopRegistered('file');
});

/**
 * Starts a cluster and registers it. The start bound stays under vitest's 60 s hook timeout: a start
 * takes about a second alone, and was seen past 30 s on a 2-core machine at load 24.
 */
export async function startCluster(args: string[] = [], timeoutMs = 50_000): Promise<Cluster> {
  const base = await startServe(args, timeoutMs, {
    port: 0,
    logKeepChars: Number.POSITIVE_INFINITY,
    stopTimeoutMs: STOP_TIMEOUT_MS,
    // Noted at once: a cluster that never gets ready is stopped by the starter, and should its
    // primary not unlink the region, test/global-setup.ts still knows whose region it is.
    onSpawn: (child) => {
      if (child.pid !== undefined) notePrimary(child.pid);
    },
  });
  const scope = inTest ? 'test' : 'file';
  const entry: Registered = {
    scope,
    // Stopped by the test: no longer the hooks' business (what is left is the test's to check).
    cluster: withRegion(base, () => {
      registered.delete(entry);
      return base.stop();
    }),
  };
  registered.add(entry);
  return entry.cluster;
}

function withRegion(base: BenchCluster, stop: () => Promise<void>): Cluster {
  const primary = base.pid;
  let mapped: Region | null = null;
  const region = (): Region => {
    mapped ??= openRegion(regionNameOf(primary));
    return mapped;
  };
  // What each API server publishes about itself (src/obs/process-health.ts, every 100 ms).
  const serverHealth = (server: number, slot: number): number => {
    const r = region();
    return r.f64[healthIndex(r.params, server) + slot]!;
  };
  return {
    url: base.url,
    port: base.port,
    process: base.child,
    log: base.log,
    pids: () => clusterPids(primary),
    region,
    engineStat: (slot) => region().f64[(ENGINE_STATS >> 3) + slot]!,
    serverHeap: (server) => serverHealth(server, HEALTH_HEAP_USED),
    serverInFlight: (server) => serverHealth(server, HEALTH_IN_FLIGHT),
    stop,
  };
}

/** Stops the clusters of `scope` that their test left running, and anything they left behind. */
async function stopRegistered(scope: Registered['scope']): Promise<void> {
  const left = [...registered].filter((r) => r.scope === scope);
  for (const entry of left) registered.delete(entry);
  await Promise.all(left.map((entry) => stopAndSweep(entry.cluster)));
}

async function stopAndSweep(cluster: Cluster): Promise<void> {
  const primary = cluster.process.pid!;
  const children = await Promise.all(
    [...(await clusterPids(primary)).values()].map(async (pid) => ({
      pid,
      start: await processStart(pid),
    })),
  );
  await cluster.stop();
  // A primary SIGKILLed after the bound leaves its children to exit on their own and its region.
  // The usual case is that they are gone and their pids free: one may already be another process's
  // (pids wrap at 32768 several times in a run), so only the same process is signalled.
  for (const { pid, start } of children) {
    if (start === undefined || (await processStart(pid)) !== start) continue;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone between the check and the signal
    }
  }
  const name = readdirSync('/dev/shm').find((n) => n.startsWith(`ringserve-${primary}-`));
  if (name !== undefined) shmAddon().unlink(name);
}

/**
 * When the process now holding `pid` started (/proc/<pid>/stat field 22, in clock ticks since
 * boot), or undefined when no process holds it: with the pid, what names one process and not a
 * later one that got its number.
 */
export async function processStart(pid: number): Promise<string | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  // Fields after the command (which may hold spaces and parentheses) start at field 3.
  return stat?.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
}

/** The cluster's processes, found through /proc by parent pid and process title. */
export async function clusterPids(primaryPid: number): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid !== primaryPid) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const title = cmdline.split('\0')[0] ?? '';
    out.set(title, Number(entry));
  }
  return out;
}

/** The region a primary created: `ringserve-<pid>-<random>`. */
export function regionNameOf(primaryPid: number): string {
  const name = readdirSync('/dev/shm').find((n) => n.startsWith(`ringserve-${primaryPid}-`));
  if (name === undefined) throw new Error(`no region of primary ${primaryPid} in /dev/shm`);
  return name;
}

export function regionExists(name: string): boolean {
  return existsSync(`/dev/shm/${name}`);
}

/**
 * Probes /health on a new connection each time until every one of `servers` API servers has
 * answered 200 (each answer names its server): each judges the engine from its own view of the
 * heartbeat, so one answering 200 does not say the other does yet.
 */
export async function everyServerHealthy(
  base: string,
  servers: number,
  timeoutMs: number,
): Promise<Set<string>> {
  const healthy = new Set<string>();
  return until(
    async () => {
      const client = new Client(base);
      try {
        const res = await client.request({ path: '/health', method: 'GET' });
        await res.body.dump();
        if (res.statusCode === 200) healthy.add(String(res.headers[API_SERVER_HEADER]));
        return healthy;
      } finally {
        await client.close();
      }
    },
    (h) => h.size === servers,
    { timeoutMs, intervalMs: 20, what: `/health 200 from each of ${servers} API servers` },
  );
}
