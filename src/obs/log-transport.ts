/**
 * The target of the pino transport of ringserve's processes (log.ts): pino's own `pino/file`, in a
 * worker thread of pino's that also publishes its GC and heap into its API server's thread-health
 * entry (thread-health-share.ts), so the figures for the whole process include this isolate too.
 * Outside an API server (supervisor, engine) there is no such share. In every ringserve process it
 * also answers its main thread's requests to collect garbage (memory-collect.ts).
 */
import { createRequire } from 'node:module';
import { answerMemoryCollect } from './memory-collect.js';
import { startThreadHealth } from './thread-health-share.js';

const pinoFile = createRequire(import.meta.url)('pino/file') as (
  options: Record<string, unknown>,
) => Promise<unknown>;

export default function logTransport(options: Record<string, unknown>): Promise<unknown> {
  startThreadHealth('log');
  answerMemoryCollect('timer');
  return pinoFile(options);
}
