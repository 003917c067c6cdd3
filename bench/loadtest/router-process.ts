import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BenchCluster, type StartOptions, startServerProcess } from './cluster.js';

/**
 * Starts `node dist/src/cli.js router` on 127.0.0.1 (a kernel-chosen port) in front of the given
 * instances, for the P/D tests and bench/router.ts; stop() as for a cluster.
 */
const READY = /routing on http:\/\/([^:\s]+):(\d+)/;

export function startRouter(
  prefill: readonly string[],
  decode: readonly string[],
  options: StartOptions = {},
  startTimeoutMs = 30_000,
): Promise<BenchCluster> {
  const args = [
    cli(),
    'router',
    '--host',
    '127.0.0.1',
    '--port',
    '0',
    '--health-interval-ms',
    '500',
    '--prefill',
    prefill.join(','),
    '--decode',
    decode.join(','),
  ];
  return startServerProcess('router', args, READY, startTimeoutMs, options);
}

function cli(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
  return join(dir, 'dist', 'src', 'cli.js');
}
