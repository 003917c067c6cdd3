/**
 * How much of /dev/shm a ringserve node needs: its one shared region (src/shm/layout.ts), sized for
 * the serve flags given, exactly as the supervisor sizes it (src/cluster/layout-params.ts). Nothing
 * else of ringserve's lives in /dev/shm (the output arenas and the response pool are private
 * mappings). The deployment files (ops/docker, ops/k8s, ops/systemd) quote it for the defaults.
 *
 *   node dist/ops/shm-size.js [serve flags]      e.g. --api-server-count 4 --max-model-len 131072
 */
import { fileURLToPath } from 'node:url';
import { parseArgs } from '../src/cli-args.js';
import { layoutParamsFor } from '../src/cluster/layout-params.js';
import { regionBytes } from '../src/shm/layout.js';

/** Bytes of the shared region a node started with `argv` creates in /dev/shm. */
export function shmBytes(argv: readonly string[]): number {
  // Keys do not size anything; one is given so that flags a keyless node may not combine with (a
  // public --host) still parse.
  return regionBytes(layoutParamsFor(parseArgs(argv, { VLLM_API_KEY: 'not-used' })));
}

export function mib(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(1);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const bytes = shmBytes(process.argv.slice(2));
  process.stdout.write(`${bytes} bytes (${mib(bytes)} MiB) of /dev/shm\n`);
}
