/**
 * `serve --engine vllm` with the simulator as its headless vLLM engine (`ringserve engine
 * --vllm-protocol`), both real processes on loopback: the pair the bridge's identity tests and
 * bench:bridge run. Every engine process started here is SIGKILLed after the test (or the file)
 * that started it, whatever happened, as harness.ts does for clusters.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, afterEach } from 'vitest';
import { type Cluster, startCluster } from './harness.js';

const CLI = join(import.meta.dirname, '..', '..', 'dist', 'src', 'cli.js');
const engines = new Set<ChildProcess>();
/** Engines a beforeAll started: killed after the file. */
const fileEngines = new Set<ChildProcess>();

afterEach(() => killAll(engines));
afterAll(() => {
  killAll(engines);
  killAll(fileEngines);
});

function killAll(set: Set<ChildProcess>): void {
  for (const child of set) if (child.exitCode === null) child.kill('SIGKILL');
  set.clear();
}

export interface BridgePair {
  cluster: Cluster;
  /** tcp://host:port of the bridge's handshake socket. */
  endpoint: string;
}

/** A `serve --engine vllm` cluster on an ephemeral handshake port, no engine attached yet. */
export async function startBridgeCluster(args: string[]): Promise<BridgePair> {
  const cluster = await startCluster([
    '--engine',
    'vllm',
    '--data-parallel-address',
    '127.0.0.1',
    '--data-parallel-rpc-port',
    '0',
    '--vllm-ping-timeout-s',
    '5',
    ...args,
  ]);
  const match = /vLLM bridge \(protocol [^)]+\) listening on (tcp:\/\/\S+)/.exec(cluster.log());
  if (match === null)
    throw new Error(`no handshake endpoint in the cluster log:\n${cluster.log()}`);
  return { cluster, endpoint: match[1]! };
}

/**
 * Starts `ringserve engine --vllm-protocol` dialling `endpoint`; it is killed after the test (or,
 * `scope` 'file', after the file). Its log (stdout) is dropped unless `pipeLog`, when the caller
 * reads child.stdout.
 */
export function startHeadlessEngine(
  endpoint: string,
  args: string[],
  pipeLog = false,
  scope: 'test' | 'file' = 'test',
): ChildProcess {
  const url = new URL(endpoint.replace('tcp://', 'http://'));
  const child = spawn(
    process.execPath,
    [
      CLI,
      'engine',
      '--vllm-protocol',
      '--data-parallel-address',
      url.hostname,
      '--data-parallel-rpc-port',
      url.port,
      '--enable-return-routed-experts',
      ...args,
    ],
    { stdio: ['ignore', pipeLog ? 'pipe' : 'ignore', 'inherit'] },
  );
  (scope === 'file' ? fileEngines : engines).add(child);
  return child;
}

/** GET /health of a cluster, a router or any server at `url`: its status. */
export async function healthStatus(server: { url: string }): Promise<number> {
  const res = await request(`${server.url}/health`);
  await res.body.dump();
  return res.statusCode;
}
