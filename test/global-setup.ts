import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  RUN_DIR_ENV,
  RUN_ID_ENV,
  type RunProcess,
  runProcesses,
  runRegions,
  shmRegions,
} from './test-run.js';

/** How long processes of the run may take to exit on their own after the last test file. */
const SETTLE_MS = 5_000;

const root = fileURLToPath(new URL('..', import.meta.url));

// Processes and worker threads that tests start run the compiled code in dist/, so the build is
// brought up to date once before any test file runs (incremental: a no-op when nothing changed).
function build(): void {
  execFileSync(
    process.execPath,
    [join(root, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'],
    { cwd: root, stdio: 'inherit' },
  );
}

function describe(processes: readonly RunProcess[]): string {
  return processes.map((p) => `  pid ${p.pid}: ${p.command}`).join('\n');
}

async function settle(id: string): Promise<RunProcess[]> {
  const deadline = Date.now() + SETTLE_MS;
  let left = runProcesses(id, root);
  while (left.length > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    left = runProcesses(id, root);
  }
  return left;
}

/**
 * Marks the run (test/test-run.ts) before any worker starts, so every process a test starts
 * carries the mark. The teardown kills whatever ringserve process of this run is still alive and
 * unlinks its regions, then fails the run naming them: a test that fails must still stop what it
 * started (test/cluster/harness.ts does it for clusters), and nothing survives a run.
 */
export default function setup(): () => Promise<void> {
  build();
  const id = randomBytes(6).toString('hex');
  const dir = mkdtempSync(join(tmpdir(), 'ringserve-test-run-'));
  process.env[RUN_ID_ENV] = id;
  process.env[RUN_DIR_ENV] = dir;
  const before = shmRegions();
  return async () => {
    const processes = await settle(id);
    for (const p of processes) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    const regions = runRegions(id, dir, before, processes);
    for (const name of regions) unlinkSync(join('/dev/shm', name));
    rmSync(dir, { recursive: true, force: true });
    const found: string[] = [];
    if (processes.length > 0) {
      found.push(`${processes.length} process(es), now SIGKILLed:\n${describe(processes)}`);
    }
    if (regions.length > 0) found.push(`${regions.length} region(s), now unlinked: ${regions}`);
    if (found.length > 0) {
      // Vitest only logs a teardown's error ("error during close") and would still exit 0.
      process.exitCode = 1;
      throw new Error(`the test run left ringserve behind: ${found.join('; ')}`);
    }
  };
}
