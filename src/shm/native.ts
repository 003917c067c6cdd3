// Loads the native addon (build/Release/ringserve_shm.node). The package root is found by walking up
// from this module to the directory holding package.json, so the same code works from src/ (vitest)
// and from dist/src/ (compiled), in the main thread, worker threads and child processes.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RS_ERR_ADDON_MISSING } from '../errors.js';

/** futexWait results. */
export const FUTEX_WOKEN = 0;
export const FUTEX_NOT_EQUAL = 1;
export const FUTEX_TIMED_OUT = 2;
export type FutexWaitResult = typeof FUTEX_WOKEN | typeof FUTEX_NOT_EQUAL | typeof FUTEX_TIMED_OUT;

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
}

const ADDON_RELATIVE_PATH = join('build', 'Release', 'ringserve_shm.node');

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

function loadAddon(): ShmAddon {
  const here = dirname(fileURLToPath(import.meta.url));
  const addonPath = join(findPackageRoot(here), ADDON_RELATIVE_PATH);
  if (!existsSync(addonPath)) {
    throw new RS_ERR_ADDON_MISSING(addonPath, 'file not found');
  }
  try {
    return createRequire(import.meta.url)(addonPath) as ShmAddon;
  } catch (err) {
    throw new RS_ERR_ADDON_MISSING(addonPath, (err as Error).message);
  }
}

/** The addon, loaded on first use (so importing this module never fails by itself). */
export function shmAddon(): ShmAddon {
  loaded ??= loadAddon();
  return loaded;
}
