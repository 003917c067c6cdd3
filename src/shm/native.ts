// Loads the native addon (build/Release/ringserve_shm.node). The package root is found by walking up
// from this module to the directory holding package.json, so the same code works from src/ (vitest)
// and from dist/src/ (compiled), in the main thread, worker threads and child processes.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type RingserveError, RS_ERR_ADDON_MISSING } from '../errors.js';

/** futexWait results. */
export const FUTEX_WOKEN = 0;
export const FUTEX_NOT_EQUAL = 1;
export const FUTEX_TIMED_OUT = 2;
export type FutexWaitResult = typeof FUTEX_WOKEN | typeof FUTEX_NOT_EQUAL | typeof FUTEX_TIMED_OUT;

/** Linux time-sharing policies a thread may choose without privileges. */
export type ThreadSchedPolicy = 'other' | 'batch' | 'idle';

export interface ShmAddon {
  /** New region (O_CREAT|O_EXCL, mode 0600), zero-filled, pages reserved; throws RS_ERR_SHM_EXISTS. */
  create(name: string, bytes: number): SharedArrayBuffer;
  /** Maps an existing region whole; throws RS_ERR_SHM_NOT_FOUND. */
  open(name: string): SharedArrayBuffer;
  /** Removes the name; true if it existed. Existing mappings stay valid. */
  unlink(name: string): boolean;
  /** Shared (cross-process) futex wait on `array[index]` while it equals `expected`, bounded. */
  futexWait(array: Int32Array, index: number, expected: number, timeoutMs: number): FutexWaitResult;
  /** Wakes up to `count` waiters on `array[index]` in any process; returns how many woke. */
  futexWake(array: Int32Array, index: number, count: number): number;
  /** The calling thread's kernel id (gettid). */
  threadId(): number;
  /** The calling thread's nice value (Linux: per thread). */
  threadNice(): number;
  /** Sets the calling thread's nice, -20..19; raising it needs privileges (RS_ERR_SHM_PRIORITY). */
  setThreadNice(nice: number): void;
  /** The calling thread's scheduling policy ('fifo'/'rr' if something privileged set one). */
  threadSchedPolicy(): ThreadSchedPolicy | 'fifo' | 'rr' | 'unknown';
  /** Sets the calling thread's scheduling policy (static priority 0). */
  setThreadSchedPolicy(policy: ThreadSchedPolicy): void;
  /** Private anonymous memory as a SharedArrayBuffer; pages are committed on first touch. */
  reserve(bytes: number): SharedArrayBuffer;
  /**
   * Gives back the whole pages inside [offset, offset + length) of a reserve()d buffer (they read
   * as zeros afterwards); returns the bytes given back.
   */
  discard(sab: SharedArrayBuffer, offset: number, length: number): number;
  /**
   * Maps the whole pages inside [offset, offset + length) of `sab` into this process now, not on
   * first touch (the region's pages already exist: this allocates nothing); returns the bytes.
   */
  populate(sab: SharedArrayBuffer, offset: number, length: number): number;
  /**
   * Starts the process's malloc trimmer: a thread (at the caller's priority) calling malloc_trim(0) every
   * `intervalMs` (10..86,400,000). 'running' if one already runs; 'unsupported' without glibc.
   */
  startMallocTrimmer(intervalMs: number): 'started' | 'running' | 'unsupported';
  /** [trims done, trims that gave memory back] by this process's trimmer. */
  mallocTrims(): [number, number];
  /** malloc_trim(0) now, on the calling thread; true if it gave memory back (false without glibc). */
  trimMalloc(): boolean;
  /**
   * V8's LowMemoryNotification on the calling thread's isolate: collects all it can (compacting)
   * and gives its free pages back. The pause grows with the heap (tens of ms for an API server's
   * main thread at rest): for a process at rest.
   */
  collectGarbage(): void;
  /** glibc's malloc_info(3) XML (per arena: from the system, free); '' without glibc. */
  mallocInfo(): string;
  /**
   * An ArrayBuffer over the same bytes as `sab` (no copy; keeps them alive), for APIs that send
   * only ArrayBuffer-backed Buffers as bytes. V8 counts its length as external memory once, when
   * it is made. Pass it to worker_threads.markAsUntransferable: a transfer would detach it.
   */
  arrayBufferOf(sab: SharedArrayBuffer): ArrayBuffer;
  /**
   * From now on each GC pause of the calling thread's isolate, as it ends, adds its seconds to
   * `f64[secondsIndex]`, 1 to `f64[countIndex]`, and raises `f64[maxIndex]` to the longest (V8's
   * GC callbacks; nothing allocated per GC). Another call retargets; the thread's exit ends it.
   */
  watchGc(f64: Float64Array, secondsIndex: number, countIndex: number, maxIndex: number): void;
  /** Ends the calling thread's watchGc; false if it had none. */
  unwatchGc(): boolean;
}

const ADDON_RELATIVE_PATH = join('build', 'Release', 'ringserve_shm.node');
/** Written beside the addon by scripts/build-addon.mjs: the Node that built it. */
const BUILT_FOR_RELATIVE_PATH = join('build', 'Release', 'ringserve_shm.built-for.json');
const BUILD_SCRIPT_RELATIVE_PATH = join('scripts', 'build-addon.mjs');

/** What scripts/build-addon.mjs records about the Node it built the addon for. */
export interface AddonBuiltFor {
  node: string;
  modules: string;
  execPath: string;
}

/** The running Node, in the terms of AddonBuiltFor. */
export interface RunningNode {
  version: string;
  modules: string;
  execPath: string;
}

// Node's dlopen message: "... compiled against a different Node.js version using
// NODE_MODULE_VERSION 115. This version of Node.js requires NODE_MODULE_VERSION 137. ..."
const ABI_MISMATCH = /NODE_MODULE_VERSION (\d+)\.[\s\S]*?requires\s+NODE_MODULE_VERSION (\d+)/;

let loaded: ShmAddon | undefined;

function findPackageRoot(startDir: string): string {
  let dir = startDir;
  for (;;) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) return startDir;
    dir = parent;
  }
}

function readBuiltFor(packageRoot: string): AddonBuiltFor | null {
  try {
    return JSON.parse(readFileSync(join(packageRoot, BUILT_FOR_RELATIVE_PATH), 'utf8'));
  } catch {
    return null;
  }
}

/**
 * The coded error for an addon that would not load. An ABI mismatch (built by another Node major)
 * names the Node it was built for, the one running, and the command that rebuilds it for the latter.
 */
export function addonLoadError(
  packageRoot: string,
  cause: Error,
  builtFor: AddonBuiltFor | null,
  running: RunningNode,
): RingserveError {
  const addonPath = join(packageRoot, ADDON_RELATIVE_PATH);
  const mismatch = ABI_MISMATCH.exec(cause.message);
  if (mismatch === null) return new RS_ERR_ADDON_MISSING(addonPath, cause.message);
  const [, builtModules, runningModules] = mismatch;
  const builder =
    builtFor !== null && builtFor.modules === builtModules
      ? `Node ${builtFor.node} (NODE_MODULE_VERSION ${builtModules}, ${builtFor.execPath})`
      : `NODE_MODULE_VERSION ${builtModules}`;
  const script = join(packageRoot, BUILD_SCRIPT_RELATIVE_PATH);
  return new RS_ERR_ADDON_MISSING(
    `${addonPath} for the running Node ${running.version} (NODE_MODULE_VERSION ${runningModules})`,
    `the one there was built for ${builder}; rebuild it with the running Node: ` +
      `\`${running.execPath} ${script}\`, or \`npm run build:addon\` with ` +
      `${dirname(running.execPath)} first on PATH`,
  );
}

function loadAddon(): ShmAddon {
  const here = dirname(fileURLToPath(import.meta.url));
  const packageRoot = findPackageRoot(here);
  const addonPath = join(packageRoot, ADDON_RELATIVE_PATH);
  if (!existsSync(addonPath)) {
    throw new RS_ERR_ADDON_MISSING(addonPath, 'file not found');
  }
  try {
    return createRequire(import.meta.url)(addonPath) as ShmAddon;
  } catch (err) {
    throw addonLoadError(packageRoot, err as Error, readBuiltFor(packageRoot), {
      version: process.version,
      modules: process.versions.modules,
      execPath: process.execPath,
    });
  }
}

/** The addon, loaded on first use (so importing this module never fails by itself). */
export function shmAddon(): ShmAddon {
  loaded ??= loadAddon();
  return loaded;
}
