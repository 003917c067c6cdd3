import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** What measureRounds (alloc-probe.mjs) reports; a fixture adds its own fields (tokens, checks). */
export interface AllocFigures {
  grownBytes: number;
  newSpaceBytes: number;
  retainedBytes: number;
  gcsDuring: number;
}

/**
 * Runs an allocation-probe fixture in its own process and returns the JSON line it printed last.
 * Its own process, because it needs --expose-gc and a young generation large enough (64 MB
 * semi-spaces) that no scavenge hides garbage during a measured round, and a vitest worker has
 * background allocations of its own.
 */
export function runAllocProbe<T extends AllocFigures>(fixture: URL, args: string[] = []): T {
  const out = execFileSync(
    process.execPath,
    [
      '--expose-gc',
      '--min-semi-space-size=64',
      '--max-semi-space-size=64',
      fileURLToPath(fixture),
      ...args,
    ],
    { encoding: 'utf8', timeout: 60_000 },
  );
  return JSON.parse(out.trim().split('\n').at(-1) as string) as T;
}
