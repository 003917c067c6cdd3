import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { RS_ERR_BENCH_CHILD_FAILED, RS_ERR_BENCH_TIMEOUT } from './errors.js';

/**
 * A ringserve cluster for one benchmark arm: `node dist/src/cli.js serve` on an ephemeral port of
 * 127.0.0.1, exactly as a user starts it, so the arm measures the product and not a test double.
 * The supervisor creates and unlinks its own shared-memory region; stop() sends SIGTERM (drain)
 * and SIGKILLs after a bound, so a benchmark never leaves a cluster behind.
 */

const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url));
const READY = /serving .* on http:\/\/([^:\s]+):(\d+)/;
/** How much of the cluster's stderr is kept for error messages. */
const LOG_KEEP_CHARS = 16_384;

/** Server processes still running, so an exiting benchmark can take them down with it. */
const live = new Set<ChildProcess>();
let exitHooked = false;

function track(child: ChildProcess): void {
  if (!exitHooked) process.once('exit', stopAllOnExit);
  exitHooked = true;
  live.add(child);
  child.once('exit', () => live.delete(child));
}

/** On the benchmark's own exit (an error, Ctrl-C): SIGTERM every server it left running. */
function stopAllOnExit(): void {
  for (const child of live) child.kill('SIGTERM');
}

export interface BenchCluster {
  readonly url: string;
  readonly pid: number;
  /** The tail of what the cluster wrote to stderr. */
  log(): string;
  /** The shared region the cluster's supervisor created (`ringserve-<pid>-<hex>`), or null. */
  regionName(): string | null;
  /** True if the cluster exited before stop() was called. */
  crashed(): boolean;
  /** What the supervisor reported so far: children that died and were restarted. */
  events(): ClusterEvents;
  stop(): Promise<void>;
}

export interface ClusterEvents {
  apiServerRestarts: number;
  engineRestarts: number;
  /** "JavaScript heap out of memory" reports (V8's last words before an OOM abort). */
  outOfMemory: number;
}

/** Supervisor log lines (src/cluster/supervisor.ts) and V8's OOM message, counted as they pass. */
const EVENT_PATTERNS: readonly [keyof ClusterEvents, RegExp][] = [
  ['apiServerRestarts', /API server exited; restarting it/g],
  ['engineRestarts', /engine core exited; restarting it/g],
  ['outOfMemory', /JavaScript heap out of memory/g],
];

/**
 * A free TCP port on 127.0.0.1. The cluster gets a fixed port rather than 0: with --port 0 a
 * restarted sole API server would listen on a new random port, and the arm would go on against a
 * dead one.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export async function startCluster(
  flags: string[],
  startTimeoutMs = 60_000,
): Promise<BenchCluster> {
  const port = String(await freePort());
  const args = [
    CLI,
    'serve',
    '--host',
    '127.0.0.1',
    '--port',
    port,
    '--log-level',
    'warn',
    ...flags,
  ];
  return startServerProcess('cluster', args, READY, startTimeoutMs);
}

/**
 * Spawns `node <args>` and resolves once its stderr matches `ready` (group 2: the port), e.g. a
 * ringserve cluster or the scaling benchmark's bare server.
 */
export async function startServerProcess(
  name: string,
  args: string[],
  ready: RegExp,
  startTimeoutMs: number,
): Promise<BenchCluster> {
  // stdout carries the cluster's JSON logs (pino), stderr its ready line and crash reports.
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  track(child);
  let log = '';
  let stopping = false;
  let exited = false;
  const events: ClusterEvents = { apiServerRestarts: 0, engineRestarts: 0, outOfMemory: 0 };
  const collect = (chunk: string): void => {
    log = (log + chunk).slice(-LOG_KEEP_CHARS);
    for (const [key, pattern] of EVENT_PATTERNS) events[key] += chunk.match(pattern)?.length ?? 0;
  };
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.setEncoding('utf8');
    stream.on('data', collect);
  }
  child.once('exit', () => {
    exited = true;
  });
  const port = await waitReady(name, child, ready, () => log, startTimeoutMs);
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    log: () => log,
    regionName: () =>
      readdirSync('/dev/shm').find((n) => n.startsWith(`ringserve-${child.pid}-`)) ?? null,
    crashed: () => exited && !stopping,
    events: () => ({ ...events }),
    stop: () => {
      stopping = true;
      return stopProcess(child, 15_000);
    },
  };
}

function waitReady(
  name: string,
  child: ChildProcess,
  ready: RegExp,
  log: () => string,
  timeoutMs: number,
): Promise<number> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new RS_ERR_BENCH_TIMEOUT(`the ${name}'s start (${log().slice(-2000)})`, timeoutMs));
    }, timeoutMs);
    const onData = (): void => {
      const match = ready.exec(log());
      if (match === null) return;
      clearTimeout(timer);
      child.stderr!.off('data', onData);
      child.off('exit', onExit);
      resolve(Number(match[2]));
    };
    const onExit = (code: number | null): void => {
      clearTimeout(timer);
      reject(
        new RS_ERR_BENCH_CHILD_FAILED(name, `exited with ${code} before it was ready:\n${log()}`),
      );
    };
    // After the log collector above, so log() already holds the chunk.
    child.stderr!.on('data', onData);
    child.once('exit', onExit);
  });
}

/** SIGTERM, then SIGKILL after timeoutMs; resolves once the process has exited. */
export function stopProcess(child: ChildProcess, timeoutMs: number): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}
