/**
 * Outside tools some ops tests run when the machine has them (haproxy, promtool, systemd-analyze):
 * such a test is skipped, saying which tool it lacks, and never installs anything itself.
 */
import { execFileSync } from 'node:child_process';

export function hasTool(name: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** A test title that says why the test is skipped when `tool` is missing. */
export function titleNeeding(title: string, tool: string): string {
  return hasTool(tool) ? title : `${title} (skipped: ${tool} is not installed)`;
}
