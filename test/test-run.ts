/**
 * One `vitest run` as a unit that owns processes and regions. test/global-setup.ts marks the run
 * (an id in the environment, which every process a test starts inherits, and a directory where
 * test/cluster/harness.ts notes each cluster's primary) and, at the end, finds whatever the run
 * left: processes carrying its mark, regions created since it began by one of them, by a primary
 * it noted, or named with its id. Parallel runs on the same machine (other worktrees) are never
 * counted nor touched: they carry another id.
 */
import { appendFileSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The run's id; set in the environment by test/global-setup.ts before any test file runs. */
export const RUN_ID_ENV = 'RINGSERVE_TEST_RUN';
/** A directory of the run: `primaries` lists the pid of every cluster the harness started. */
export const RUN_DIR_ENV = 'RINGSERVE_TEST_RUN_DIR';

const SHM_DIR = '/dev/shm';

/** The run's id, or `local` outside a vitest run with the global setup. */
export function testRunId(): string {
  return process.env[RUN_ID_ENV] ?? 'local';
}

/** Notes a cluster's primary, so its region can be found even after it was SIGKILLed. */
export function notePrimary(pid: number): void {
  const dir = process.env[RUN_DIR_ENV];
  if (dir !== undefined) appendFileSync(join(dir, 'primaries'), `${pid}\n`);
}

function notedPrimaries(dir: string): Set<number> {
  try {
    const text = readFileSync(join(dir, 'primaries'), 'utf8');
    return new Set(text.split('\n').filter(Boolean).map(Number));
  } catch {
    return new Set();
  }
}

export interface RunProcess {
  pid: number;
  /** The process title or command line, as ps shows it. */
  command: string;
}

function readProc(pid: string, file: string): string {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8');
  } catch {
    return ''; // gone meanwhile, or not readable: not ours to judge
  }
}

/**
 * Live processes of run `id` that are ringserve's: a cluster process (its title starts with
 * `ringserve-`), or `node` running this repository's compiled code or a test fixture. Vitest's own
 * workers also carry the mark and are left out.
 */
export function runProcesses(id: string, root: string): RunProcess[] {
  const mark = `${RUN_ID_ENV}=${id}`;
  const found: RunProcess[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    if (!readProc(entry, 'environ').split('\0').includes(mark)) continue;
    const command = readProc(entry, 'cmdline').split('\0').join(' ').trim();
    const ours =
      command.startsWith('ringserve-') ||
      command.includes(join(root, 'dist/')) ||
      command.includes(join(root, 'test/fixtures/'));
    if (ours) found.push({ pid: Number(entry), command });
  }
  return found;
}

/** The ringserve regions in /dev/shm now. */
export function shmRegions(): Set<string> {
  try {
    return new Set(readdirSync(SHM_DIR).filter((n) => n.startsWith('ringserve-')));
  } catch {
    return new Set();
  }
}

/**
 * Regions run `id` left: created since `before` and named with the run's id (test regions), or by
 * a primary the harness noted, or by one of `processes` (ringserve-<pid>-...).
 */
export function runRegions(
  id: string,
  dir: string,
  before: ReadonlySet<string>,
  processes: readonly RunProcess[],
): string[] {
  const creators = notedPrimaries(dir);
  for (const p of processes) creators.add(p.pid);
  return [...shmRegions()].filter((name) => {
    if (before.has(name)) return false;
    if (name.includes(`-${id}-`)) return true;
    const pid = /^ringserve-(\d+)-/.exec(name)?.[1];
    return pid !== undefined && creators.has(Number(pid));
  });
}
