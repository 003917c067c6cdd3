/**
 * Entry point of API server k (a node:cluster worker): maps the region, starts the output side
 * (output worker + packer pool, or the inline baseline), builds the fastify app and listens on the
 * shared port. Supervisor messages switch it between engine-up and engine-down, and drain it.
 */
import { readChildEnv, type SupervisorMessage, sendToParent } from '../cluster/roles.js';
import { getPreset } from '../engine/presets.js';
import {
  SRV_HEAP_USED,
  SRV_HEARTBEAT,
  SRV_IN_FLIGHT,
  SRV_LAST_BEAT_MS,
  SRV_PID,
  SRV_RSS,
  serverBlockOffset,
} from '../shm/layout.js';
import { openRegion } from '../shm/region.js';
import { buildApp } from './app.js';
import { createOutputPath } from './create-output-path.js';
import { EngineClient } from './engine-client.js';
import { RequestCoordinator } from './request-coordinator.js';

/** How often an API server publishes its heartbeat and own figures into its server block. */
const SERVER_BEAT_MS = 100;

async function main(): Promise<void> {
  const { region: name, config, server } = readChildEnv();
  process.title = `ringserve-api-${server}`;
  const region = openRegion(name);
  const block = serverBlockOffset(region.params, server);
  Atomics.store(region.i32, (block + SRV_PID) >> 2, process.pid);
  const log = (line: string): void => console.error(line);
  const engine = new EngineClient(region, server);
  const coordinator = new RequestCoordinator(config, engine);
  const output = await createOutputPath(config, region, server, coordinator);
  coordinator.attach(output);
  const preset = getPreset(config.model);
  const app = buildApp({
    config,
    engine,
    coordinator,
    startedAt: Date.now(),
    log,
    requestOptions: {
      vocabSize: preset.vocabSize,
      maxModelLen: config.maxModelLen,
      defaultReturnSamplingMask: config.returnSamplingMask,
      defaultReturnRoutedExperts: config.returnRoutedExperts,
    },
    broadcastAbort: (ids) => sendToParent({ type: 'abort-ids', ids, from: server }),
  });
  // The server's own figures, readable by any process that maps the region (metrics, tests).
  const beat = setInterval(() => {
    const f64 = region.f64;
    f64[(block + SRV_HEAP_USED) >> 3] = process.memoryUsage().heapUsed;
    f64[(block + SRV_RSS) >> 3] = process.memoryUsage.rss();
    f64[(block + SRV_IN_FLIGHT) >> 3] = coordinator.table.active;
    f64[(block + SRV_LAST_BEAT_MS) >> 3] = Date.now();
    Atomics.add(region.i32, (block + SRV_HEARTBEAT) >> 2, 1);
  }, SERVER_BEAT_MS);
  beat.unref();

  let closing = false;
  const shutdown = async (timeoutMs: number): Promise<void> => {
    if (closing) return;
    closing = true;
    await coordinator.drain(timeoutMs);
    await app.close();
    await output.close();
    process.exit(0);
  };
  process.on('message', (message: SupervisorMessage) => {
    if (message.type === 'engine-down') coordinator.engineDown();
    else if (message.type === 'engine-up') coordinator.engineUp();
    else if (message.type === 'abort-ids') for (const id of message.ids) coordinator.abortById(id);
    else if (message.type === 'drain') void shutdown(message.timeoutMs);
  });
  process.on('SIGTERM', () => void shutdown(config.drainTimeoutS * 1000));
  process.on('SIGINT', () => void shutdown(config.drainTimeoutS * 1000));

  await app.listen({ host: config.host, port: config.port });
  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : config.port;
  sendToParent({ type: 'ready', role: 'api', server, port });
}

main().catch((error: unknown) => {
  console.error(`ringserve-api: failed to start: ${(error as Error).stack ?? String(error)}`);
  process.exit(1);
});
