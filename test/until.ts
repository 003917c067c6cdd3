/**
 * The one polling wait of the tests. A wait that gives up fails the test with what it waited for,
 * the last value (or error) it saw and how long it waited; it never returns quietly.
 */
import { inspect } from 'node:util';

export interface UntilOptions {
  /** How long to keep probing; 10 s unless given. */
  timeoutMs?: number;
  /** The pause between two probes; 20 ms unless given. */
  intervalMs?: number;
  /** What is waited for, for the timeout's message; the source of `done` unless given. */
  what?: string;
}

const TIMEOUT_MS = 10_000;
const INTERVAL_MS = 20;
/** How much of the last value the message shows. */
const SHOWN_CHARS = 1_000;

/** Thrown by until() when its time is up. */
export class UntilTimeoutError extends Error {
  constructor(
    message: string,
    readonly waitedMs: number,
    readonly last: { value: unknown } | { error: unknown } | undefined,
  ) {
    super(message, last !== undefined && 'error' in last ? { cause: last.error } : {});
    this.name = 'UntilTimeoutError';
  }
}

/**
 * Polls `probe` until `done(value)` holds; resolves with that value. Throws (naming `what`, the
 * last value seen and the time waited) when `timeoutMs` passes: a wait that gives up fails the
 * test, never silently. A probe (or `done`) that throws is tried again until the timeout, and the
 * last error is in the message. The probe runs at least once, and once more after the last pause,
 * so a condition that holds in time is seen; a probe still running at the timeout is awaited.
 */
export async function until<T>(
  probe: () => T | Promise<T>,
  done: (value: T) => boolean,
  opts: UntilOptions = {},
): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? TIMEOUT_MS;
  const intervalMs = opts.intervalMs ?? INTERVAL_MS;
  const start = performance.now();
  let last: { value: T } | { error: unknown } | undefined;
  let probes = 0;
  for (;;) {
    probes++;
    try {
      const value = await probe();
      if (done(value)) return value;
      last = { value };
    } catch (error) {
      last = { error };
    }
    const waited = performance.now() - start;
    if (waited >= timeoutMs) {
      const what = opts.what ?? String(done);
      const seen =
        last === undefined
          ? 'nothing'
          : 'error' in last
            ? `the error ${shown(last.error)}`
            : `the value ${shown(last.value)}`;
      throw new UntilTimeoutError(
        `until: timed out after ${Math.round(waited)} ms (limit ${timeoutMs} ms, ${probes} probes) ` +
          `waiting for ${what}; last saw ${seen}`,
        waited,
        last,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, Math.min(intervalMs, timeoutMs - waited)));
  }
}

function shown(x: unknown): string {
  const text =
    x instanceof Error
      ? `${x.name}: ${x.message}`
      : inspect(x, { depth: 3, breakLength: Number.POSITIVE_INFINITY, maxArrayLength: 20 });
  return text.length > SHOWN_CHARS ? `${text.slice(0, SHOWN_CHARS)}… (${text.length} chars)` : text;
}
