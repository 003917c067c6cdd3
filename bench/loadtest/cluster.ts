import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stopChild } from '../../src/cluster/stop-child.js';
import { RS_ERR_BENCH_CHILD_FAILED, RS_ERR_BENCH_TIMEOUT } from './errors.js';

/**
 * The one starter of a real ringserve cluster, for the benchmarks and for the tests
 * (test/cluster/harness.ts): `node dist/src/cli.js serve` on 127.0.0.1, exactly as a user starts
 * it, so what runs is the product and not a test double. The supervisor creates and unlinks its own
 * shared-memory region; stop() sends SIGTERM (drain) and SIGKILLs after a bound, and a process that
 * exits takes its clusters down with it, so nothing is left behind.
 */

/** The compiled CLI, from bench/loadtest/ (tests, through vitest) or dist/bench/loadtest/ alike. */
const CLI = join(packageRoot(), 'dist', 'src', 'cli.js');
const READY = /serving .* on http:\/\/([^:\s]+):(\d+)/;
/** How much of a cluster's output is kept for error messages, unless the caller wants it all. */
const LOG_KEEP_CHARS = 16_384;

function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
  return dir;
}

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
  readonly port: number;
  readonly pid: number;
  /** The primary (or the bare server): `node <cli> serve ...`. */
  readonly child: ChildProcess;
  /** What the cluster wrote to stdout and stderr (its tail, unless started with logKeepChars). */
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

export interface StartOptions {
  /**
   * --port. By default a free port found first: with --port 0 a restarted sole API server would
   * listen on a new random port. 0 lets the kernel choose, with no window for another process.
   */
  port?: number;
  /** Keep this much of the output for log() (default 16 KiB; Infinity keeps it all). */
  logKeepChars?: number;
  /** How long stop() waits after SIGTERM before SIGKILL (default 15 s). */
  stopTimeoutMs?: number;
  /** Called with the process as soon as it is spawned, before it is ready. */
  onSpawn?: (child: ChildProcess) => void;
}

/** `ringserve serve` on 127.0.0.1 with `flags` (which may override --log-level warn, --drain-grace-s 0). */
export async function startCluster(
  flags: string[],
  startTimeoutMs = 60_000,
  options: StartOptions = {},
): Promise<BenchCluster> {
  const port = String(options.port ?? (await freePort()));
  const args = [
    CLI,
    'serve',
    '--host',
    '127.0.0.1',
    '--port',
    port,
    '--log-level',
    'warn',
    // No load balancer sends to these clusters after a stop: they close at once (flags may override).
    '--drain-grace-s',
    '0',
    ...flags,
  ];
  return startServerProcess('cluster', args, READY, startTimeoutMs, options);
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
  options: StartOptions = {},
): Promise<BenchCluster> {
  const keep = options.logKeepChars ?? LOG_KEEP_CHARS;
  const stopTimeoutMs = options.stopTimeoutMs ?? 15_000;
  // stdout carries the cluster's JSON logs (pino), stderr its ready line and crash reports.
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  track(child);
  options.onSpawn?.(child);
  let log = '';
  let stopping = false;
  let exited = false;
  const events: ClusterEvents = { apiServerRestarts: 0, engineRestarts: 0, outOfMemory: 0 };
  const collect = (chunk: string): void => {
    log += chunk;
    if (log.length > keep) log = log.slice(-keep);
    for (const [key, pattern] of EVENT_PATTERNS) events[key] += chunk.match(pattern)?.length ?? 0;
  };
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.setEncoding('utf8');
    stream.on('data', collect);
  }
  child.once('exit', () => {
    exited = true;
  });
  const port = await waitReady(name, child, ready, () => log, startTimeoutMs, stopTimeoutMs);
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    pid: child.pid!,
    child,
    log: () => log,
    regionName: () =>
      readdirSync('/dev/shm').find((n) => n.startsWith(`ringserve-${child.pid}-`)) ?? null,
    crashed: () => exited && !stopping,
    events: () => ({ ...events }),
    stop: () => {
      stopping = true;
      return stopChild(child, stopTimeoutMs);
    },
  };
}

function waitReady(
  name: string,
  child: ChildProcess,
  ready: RegExp,
  log: () => string,
  timeoutMs: number,
  stopTimeoutMs: number,
): Promise<number> {
  return new Promise((resolve, reject) => {
    // Not ready in time: stopped like any other (SIGTERM first, so a primary unlinks its region).
    const timer = setTimeout(() => {
      child.stderr!.off('data', onData);
      child.off('exit', onExit);
      const error = new RS_ERR_BENCH_TIMEOUT(
        `the ${name}'s start (${log().slice(-2000)})`,
        timeoutMs,
      );
      stopChild(child, stopTimeoutMs).then(() => reject(error));
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
