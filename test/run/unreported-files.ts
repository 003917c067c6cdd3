/**
 * A reporter beside vitest's own that names the test files whose worker died before it reported
 * them. When a forked worker exits mid-file (a signal, a native crash), vitest prints only "Worker
 * exited unexpectedly" and counts one file fewer ("189 passed (190)"), without saying which: this
 * names it, so the cause can be looked for in that file.
 */
import type { Reporter, TestModule } from 'vitest/node';

export default class UnreportedFiles implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    // A file can be listed more than once (queued, then run); it reported if any listing ended.
    const ended = new Set<string>();
    const all = new Set<string>();
    for (const m of testModules) {
      all.add(m.relativeModuleId);
      const state = m.state();
      if (state !== 'pending' && state !== 'queued') ended.add(m.relativeModuleId);
    }
    const unreported = [...all].filter((name) => !ended.has(name)).sort();
    if (unreported.length === 0) return;
    process.stderr.write(
      `\nTest files whose worker ended before they reported (${unreported.length}):\n` +
        unreported.map((name) => `  UNREPORTED ${name}\n`).join(''),
    );
  }
}
