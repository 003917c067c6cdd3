import type { ChildProcess } from 'node:child_process';

/** Asks a child to end; the default sends SIGTERM (a ringserve process drains on it). */
export type AskToEnd = (child: ChildProcess) => void;

const sigterm: AskToEnd = (child) => {
  child.kill('SIGTERM');
};

/**
 * Ends a child process: asks it (SIGTERM unless `ask` says otherwise), then SIGKILLs it if it has
 * not exited within `timeoutMs`. Resolves once it has exited, so it is reaped and nothing is left.
 * The supervisor stops its engine and API servers with it (a cluster Worker's `.process`), the
 * benchmarks their clusters and helpers, the test harness its clusters.
 */
export function stopChild(
  child: ChildProcess,
  timeoutMs: number,
  ask: AskToEnd = sigterm,
): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    ask(child);
  });
}
