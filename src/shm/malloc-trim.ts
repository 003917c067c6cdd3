// The C heap's free pages back to the kernel, on a schedule. glibc's malloc keeps what a process
// frees in its arenas (one per allocating thread, up to 8 per core) and returns only the top of the
// main heap, so a long-lived process's RSS climbs to the worst fragmentation it ever saw and stays
// there. Every ringserve process starts one trimmer thread (native/ringserve_shm.cc, at its starter's priority) that
// calls malloc_trim(0) every --malloc-trim-interval-s: RSS then follows the memory in use, which is
// what an operator (and the soak's RSS slope) should be looking at.
import { shmAddon } from './native.js';

export type TrimmerStart = 'started' | 'running' | 'unsupported' | 'off';

/** Starts this process's trimmer (once; later calls report 'running'). 0 seconds = off. */
export function startMallocTrimmer(intervalS: number): TrimmerStart {
  if (intervalS <= 0) return 'off';
  return shmAddon().startMallocTrimmer(Math.max(10, Math.round(intervalS * 1000)));
}

/** The environment variable glibc reads its arena limit from at a process's start. */
export const MALLOC_ARENA_MAX_ENV = 'MALLOC_ARENA_MAX';

/**
 * The MALLOC_ARENA_MAX to set for `arenas` (--malloc-arena-max), or null where none is: 0 (glibc's
 * own limit, 8 per core), or the operator set the variable already (kept, as children inherit it).
 */
function arenaCapToSet(arenas: number, env: NodeJS.ProcessEnv): string | null {
  return arenas <= 0 || env[MALLOC_ARENA_MAX_ENV] !== undefined ? null : String(arenas);
}

/** The arena limit this process's children start with (an empty object where none is set). */
export function childArenaEnv(
  arenas: number,
  env: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  const cap = arenaCapToSet(arenas, env);
  return cap === null ? {} : { [MALLOC_ARENA_MAX_ENV]: cap };
}

type Execve = (file: string, args: string[], env: NodeJS.ProcessEnv) => never;

/**
 * The primary's own arena limit. glibc reads MALLOC_ARENA_MAX only when a process starts, and by the
 * time the primary has read its flags it already has 7 arenas (V8's and libuv's threads). Where Node
 * can replace the running process (`process.execve`: Node >= 22.15 and >= 23.11, on Linux), the
 * primary starts over with the variable set: the same pid, arguments, standard streams and
 * environment otherwise, a Node start (~50 ms) later. Where it cannot (`arenas` 0, MALLOC_ARENA_MAX
 * already set, no execve: Node 20) this returns and the primary goes on with glibc's limit.
 */
export function restartWithArenaCap(arenas: number, env: NodeJS.ProcessEnv = process.env): void {
  const execve = (process as unknown as { execve?: Execve }).execve;
  const cap = arenaCapToSet(arenas, env);
  if (typeof execve !== 'function' || process.platform !== 'linux' || cap === null) return;
  const args = [process.execPath, ...process.execArgv, ...process.argv.slice(1)];
  execve.call(process, process.execPath, args, { ...env, [MALLOC_ARENA_MAX_ENV]: cap });
}
