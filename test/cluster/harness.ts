/**
 * Starts a real ringserve cluster (`node dist/src/cli.js serve`) on an ephemeral port for a test and
 * stops it: every process it starts is stopped, and the test can check that the region is unlinked.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  ENGINE_STATS,
  HEALTH_HEAP_USED,
  HEALTH_IN_FLIGHT,
  healthIndex,
} from '../../src/shm/layout.js';
import { openRegion, type Region } from '../../src/shm/region.js';

const CLI = fileURLToPath(new URL('../../dist/src/cli.js', import.meta.url));
const READY = /serving .* on http:\/\/([^:]+):(\d+)/;

export interface Cluster {
  readonly url: string;
  readonly port: number;
  readonly process: ChildProcess;
  /** Everything the cluster has written to stderr so far. */
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
  stop(): Promise<void>;
}

export async function startCluster(args: string[] = [], timeoutMs = 30_000): Promise<Cluster> {
  const child = spawn(
    process.execPath,
    [CLI, 'serve', '--host', '127.0.0.1', '--port', '0', '--log-level', 'warn', ...args],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env } },
  );
  let stderr = '';
  child.stderr!.setEncoding('utf8');
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (chunk: string) => {
    stderr += chunk;
  });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`cluster did not start:\n${stderr}`)),
      timeoutMs,
    );
    child.stderr!.on('data', (chunk: string) => {
      stderr += chunk;
      const match = READY.exec(stderr);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[2]));
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`cluster exited with ${code} before it was ready:\n${stderr}`));
    });
  });
  const stop = (): Promise<void> =>
    new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      child.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
      child.kill('SIGTERM');
    });
  let mapped: Region | null = null;
  const region = (): Region => {
    mapped ??= openRegion(regionNameOf(child.pid!));
    return mapped;
  };
  // What each API server publishes about itself (src/obs/process-health.ts, every 100 ms).
  const serverHealth = (server: number, slot: number): number => {
    const r = region();
    return r.f64[healthIndex(r.params, server) + slot]!;
  };
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    process: child,
    log: () => stderr,
    pids: () => clusterPids(child.pid!),
    region,
    engineStat: (slot) => region().f64[(ENGINE_STATS >> 3) + slot]!,
    serverHeap: (server) => serverHealth(server, HEALTH_HEAP_USED),
    serverInFlight: (server) => serverHealth(server, HEALTH_IN_FLIGHT),
    stop,
  };
}

/** The cluster's processes, found through /proc by parent pid and process title. */
export async function clusterPids(primaryPid: number): Promise<Map<string, number>> {
  const { readdir, readFile } = await import('node:fs/promises');
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

/** Polls `read` until `accept` holds or `timeoutMs` passes; returns the last value read. */
export async function waitFor<T>(
  read: () => T | Promise<T>,
  accept: (v: T) => boolean,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (accept(value) || Date.now() > deadline) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
}

export function regionExists(name: string): boolean {
  return existsSync(`/dev/shm/${name}`);
}
