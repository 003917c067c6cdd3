/**
 * Structured logs: one pino logger per process, one JSON line per event on stdout, written by a pino
 * transport (a worker thread of pino's own), so a slow terminal or pipe never blocks an event loop.
 * What is logged: startup configuration, one line per finished request, restarts and their cause,
 * warnings (a blocked event loop, a filling ring). Nothing is ever logged per token.
 *
 * The one line that is not a log record is the supervisor's
 * `ringserve: serving <name> (<model>) on http://<host>:<port> with <n> API server(s)` on stderr,
 * which scripts (and test/cluster/harness.ts) wait for.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type Logger, pino } from 'pino';
import type { RingserveConfig } from '../config.js';

export type { Logger };

/** A logger at `level` with `bindings` on every line (`silent` starts no transport thread). */
export function createLogger(
  level: RingserveConfig['logLevel'],
  bindings: Record<string, unknown>,
): Logger {
  const options = { level, base: { pid: process.pid, ...bindings } };
  if (level === 'silent') return pino(options);
  return pino(options, pino.transport({ target: TRANSPORT, options: { destination: 1 } }));
}

/** pino/file behind log-transport.js, which publishes the thread's health (compiled builds only). */
const OWN_TRANSPORT = fileURLToPath(new URL('./log-transport.js', import.meta.url));
const TRANSPORT = existsSync(OWN_TRANSPORT) ? OWN_TRANSPORT : 'pino/file';

/** A logger that writes nothing (tests, tools). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}

/**
 * A gate for warnings that can repeat (a ring that stays full): true at most once per `intervalMs`,
 * so a persistent condition is reported without flooding the log.
 */
export function rateLimit(intervalMs: number): () => boolean {
  let last = Number.NEGATIVE_INFINITY;
  return () => {
    const now = performance.now();
    if (now - last < intervalMs) return false;
    last = now;
    return true;
  };
}
