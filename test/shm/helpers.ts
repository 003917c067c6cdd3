// Test helpers for the shared-memory tests: unique region names (tests run side by side) and child
// processes that are always stopped.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { testRunId } from '../test-run.js';
import { until as pollUntil } from '../until.js';

/** A region name of this test run (test/test-run.ts finds what a run left by its id). */
export function uniqueRegionName(tag: string): string {
  return `ringserve-test-${testRunId()}-${process.pid}-${tag}-${randomBytes(4).toString('hex')}`;
}

export function fixturePath(file: string): string {
  return fileURLToPath(new URL(`../fixtures/${file}`, import.meta.url));
}

export interface Fixture {
  child: ChildProcess;
  /** Resolves with the first stdout line (parsed JSON) whose `event` is `event`. */
  waitFor(event: string, timeoutMs: number): Promise<Record<string, unknown>>;
  stderr(): string;
}

/** Starts `node test/fixtures/<file> ...args`; every line it prints on stdout is one JSON object. */
export function startFixture(file: string, args: string[]): Fixture {
  const child = spawn(process.execPath, [fixturePath(file), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const events: Array<Record<string, unknown>> = [];
  const waiters: Array<() => void> = [];
  let errors = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    errors += chunk.toString();
  });
  createInterface({ input: child.stdout! }).on('line', (line) => {
    events.push(JSON.parse(line) as Record<string, unknown>);
    for (const wake of waiters.splice(0)) wake();
  });
  child.on('exit', () => {
    for (const wake of waiters.splice(0)) wake();
  });
  const waitFor = (event: string, timeoutMs: number) =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(
          new Error(`fixture ${file}: no '${event}' within ${timeoutMs} ms; stderr: ${errors}`),
        );
      }, timeoutMs);
      const check = () => {
        const found = events.find((e) => e.event === event);
        if (found) {
          clearTimeout(timer);
          resolve(found);
        } else if (child.exitCode !== null || child.signalCode !== null) {
          clearTimeout(timer);
          reject(new Error(`fixture ${file} exited before '${event}'; stderr: ${errors}`));
        } else {
          waiters.push(check);
        }
      };
      check();
    });
  return { child, waitFor, stderr: () => errors };
}

/** Kills the child if it still runs and waits until it has exited (so it is reaped). */
export async function stopFixture(fixture: Fixture | undefined): Promise<void> {
  if (!fixture) return;
  const { child } = fixture;
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGKILL');
  await exited;
}

/**
 * The old form of `until` (test/until.ts), kept for the test/server/** files that import it from
 * here: polls `condition` every 5 ms, throws after `timeoutMs` naming `what`. New tests use
 * test/until.ts.
 * @deprecated use `until` of test/until.ts.
 */
export async function until(
  condition: () => boolean,
  timeoutMs: number,
  what: string,
): Promise<void> {
  await pollUntil(condition, (holds) => holds, { timeoutMs, intervalMs: 5, what });
}
