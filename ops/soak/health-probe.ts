/**
 * The /health probe, in a worker thread of its own so the soak's 300 clients on the main thread do
 * not delay its timer or its reading of answers. Every PROBE_EVERY_MS it opens a new connection (so
 * successive probes reach different API servers: in turn through the node:cluster primary's
 * hand-off, by the kernel's hash under reuseport) and times `GET /health` to the last byte; it
 * posts batches of {start ms since epoch, latency ms, status (0: no answer within the bound), the
 * API server that answered}. It probes the floor server too, the same way, half a period out of
 * phase: a bare node:http process's /health under the same load.
 */
import { request } from 'node:http';
import { parentPort, workerData } from 'node:worker_threads';
import { API_SERVER_HEADER } from '../../src/protocol/api-server-header.js';

const PROBE_EVERY_MS = 200;
const PROBE_TIMEOUT_MS = 5_000;
const POST_EVERY_MS = 1_000;

export interface ProbeSample {
  atMs: number;
  latencyMs: number;
  status: number;
  /** The API server that answered (its x-ringserve-api-server header); -1 with no such header. */
  server: number;
}

export interface ProbeBatch {
  health: ProbeSample[];
  floor: ProbeSample[];
}

export interface ProbeWorkerData {
  port: number;
  /** The floor server's port (bench/loadtest/floor-server.ts). */
  floorPort: number;
}

function probe(port: number): Promise<ProbeSample> {
  const atMs = Date.now();
  const t0 = performance.now();
  return new Promise((resolve) => {
    const req = request(
      { host: '127.0.0.1', port, path: '/health', agent: false, timeout: PROBE_TIMEOUT_MS },
      (res) => {
        res.resume();
        const server = Number(res.headers[API_SERVER_HEADER] ?? -1);
        res.on('end', () =>
          resolve({ atMs, latencyMs: performance.now() - t0, status: res.statusCode ?? 0, server }),
        );
      },
    );
    req.on('timeout', () => req.destroy());
    req.on('error', () =>
      resolve({ atMs, latencyMs: performance.now() - t0, status: 0, server: -1 }),
    );
    req.end();
  });
}

/** Probes `port` every PROBE_EVERY_MS, from `phaseMs` on, into `into`, until `stopped()`. */
async function loop(
  port: number,
  phaseMs: number,
  into: () => ProbeSample[],
  stopped: () => boolean,
): Promise<void> {
  await new Promise((r) => setTimeout(r, phaseMs));
  while (!stopped()) {
    const started = performance.now();
    const sample = await probe(port);
    into().push(sample);
    const wait = PROBE_EVERY_MS - (performance.now() - started);
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
}

async function run({ port, floorPort }: ProbeWorkerData): Promise<void> {
  let batch: ProbeBatch = { health: [], floor: [] };
  let stopped = false;
  parentPort!.on('message', () => {
    stopped = true;
  });
  const post = setInterval(() => {
    parentPort!.postMessage(batch);
    batch = { health: [], floor: [] };
  }, POST_EVERY_MS);
  await Promise.all([
    loop(
      port,
      0,
      () => batch.health,
      () => stopped,
    ),
    loop(
      floorPort,
      PROBE_EVERY_MS / 2,
      () => batch.floor,
      () => stopped,
    ),
  ]);
  clearInterval(post);
  parentPort!.postMessage(batch);
  parentPort!.close();
}

if (parentPort !== null) void run(workerData as ProbeWorkerData);
