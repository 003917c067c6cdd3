/**
 * A progress bar on stderr (stdout carries the table and the JSON line). On a terminal it redraws
 * one line in place; otherwise (CI logs, a pipe) it prints a plain line every LOG_EVERY_MS.
 */

const BAR_WIDTH = 24;
const LOG_EVERY_MS = 10_000;

export class ProgressBar {
  readonly #totalMs: number;
  readonly #startedAt = Date.now();
  readonly #tty = process.stderr.isTTY === true;
  #lastLogAt = 0;
  #lastWidth = 0;

  /** @param totalMs the whole run's expected duration, for the overall bar and the ETA */
  constructor(totalMs: number) {
    this.#totalMs = totalMs;
  }

  /**
   * @param doneMs expected duration already behind us (finished arms + this arm's elapsed part)
   * @param label what runs now, e.g. `packed-mask 3/5`
   * @param detail live figures, e.g. `done 120  health max 3 ms`
   */
  update(doneMs: number, label: string, detail: string): void {
    const now = Date.now();
    const fraction = Math.min(1, Math.max(0, doneMs / this.#totalMs));
    const filled = Math.round(fraction * BAR_WIDTH);
    const bar = `${'#'.repeat(filled)}${'-'.repeat(BAR_WIDTH - filled)}`;
    const elapsed = formatDuration(now - this.#startedAt);
    const eta = formatDuration(Math.max(0, this.#totalMs - doneMs));
    const line = `[${bar}] ${(fraction * 100).toFixed(0).padStart(3)}%  ${label}  ${detail}  (${elapsed} elapsed, ~${eta} left)`;
    if (this.#tty) {
      process.stderr.write(`\r${line.padEnd(this.#lastWidth)}`);
      this.#lastWidth = line.length;
    } else if (now - this.#lastLogAt >= LOG_EVERY_MS) {
      process.stderr.write(`${line}\n`);
      this.#lastLogAt = now;
    }
  }

  /** A line of its own (an arm's summary), keeping the bar below it on a terminal. */
  note(text: string): void {
    if (this.#tty) process.stderr.write(`\r${' '.repeat(this.#lastWidth)}\r`);
    this.#lastWidth = 0;
    process.stderr.write(`${text}\n`);
  }

  done(): void {
    if (this.#tty && this.#lastWidth > 0) process.stderr.write('\n');
    this.#lastWidth = 0;
  }
}

export function formatDuration(ms: number): string {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
}
