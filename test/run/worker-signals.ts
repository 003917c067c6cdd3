/**
 * Runs in every vitest worker before its test file (setupFiles). A signal that ends a process by
 * default, sent to a worker by mistake (a test signalling a pid its process no longer holds: pids
 * wrap at 32768 several times in a run here), ends the worker with only "Worker exited unexpectedly"
 * from vitest. For the catchable ones the tests send (SIGUSR2, see test/cluster/memory-collect.test.ts)
 * and SIGHUP, the worker says which file it ran and which signal it got, then ends as the default
 * action would have ended it. SIGKILL cannot be caught; test/run/unreported-files.ts still names the
 * file.
 */
import { expect } from 'vitest';

for (const signal of ['SIGUSR2', 'SIGHUP'] as const) {
  if (process.listenerCount(signal) > 0) continue;
  process.once(signal, () => {
    process.stderr.write(
      `vitest worker ${process.pid} got ${signal} while it ran ${expect.getState().testPath ?? 'no test file'}; ending\n`,
    );
    // The listener is gone (once): unless a test listens too, the default action ends the process.
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  });
}
