/**
 * What the headless DP tests share: a log that keeps its lines, and bench's free-port helper (for
 * what must be given a fixed port, such as a DP group's master port).
 */
import type { HeadlessLog } from '../../../src/engine/vllm/headless/engine.js';

export { freePort } from '../../../bench/loadtest/cluster.js';

/** A HeadlessLog that keeps each message (a fatal one prefixed `fatal: `). */
export class RecordingLog implements HeadlessLog {
  readonly lines: string[] = [];
  info(_f: object, m: string): void {
    this.lines.push(m);
  }
  warn(_f: object, m: string): void {
    this.lines.push(m);
  }
  error(_f: object, m: string): void {
    this.lines.push(m);
  }
  fatal(_f: object, m: string): void {
    this.lines.push(`fatal: ${m}`);
  }
}
