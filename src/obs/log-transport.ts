/**
 * The target of the pino transport of ringserve's processes (log.ts): pino's own `pino/file`, in a
 * worker thread of pino's that also publishes its GC and heap into its API server's thread-health
 * entry (thread-health-share.ts), so the figures for the whole process include this isolate too.
 * Outside an API server (supervisor, engine) there is no share, and it is `pino/file` alone.
 */
import { createRequire } from 'node:module';
import { startThreadHealth } from './thread-health-share.js';

const pinoFile = createRequire(import.meta.url)('pino/file') as (
  options: Record<string, unknown>,
) => Promise<unknown>;

export default function logTransport(options: Record<string, unknown>): Promise<unknown> {
  startThreadHealth('log');
  return pinoFile(options);
}
