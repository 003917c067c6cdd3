/**
 * Entry point of API server k (a node:cluster worker): maps the region, starts the output side
 * (output worker + packer pool, or the inline baseline), builds the fastify app and serves the
 * connections the primary hands it; with --listener reuseport also those of its own listener on the
 * port (listener.ts). Supervisor messages switch it between engine-up and engine-down, and drain it.
 */

import type { Server } from 'node:http';
import type { Server as NetServer, Socket } from 'node:net';
import { ExitCode } from '../errors.js';
import { createLogger, type Logger, rateLimit } from '../obs/log.js';
import { shareMemoryCollect } from '../obs/memory-collect.js';
import { ProcessHealth } from '../obs/process-health.js';
import { RequestTimeline } from '../obs/request-timeline.js';
import { shareThreadHealth } from '../obs/thread-health-share.js';
import { shareRequestMetrics } from '../obs/worker-metrics.js';
import { createOutputPath } from '../server/create-output-path.js';
import { EngineClient } from '../server/main/engine-client.js';
import { buildApp } from '../server/main/http/app.js';
import type { OutputPath } from '../server/main/output-path.js';
import { RequestCoordinator } from '../server/main/request-coordinator.js';
import {
  ENGINE_STATE_PAUSED,
  healthIndex,
  outputRingOffset,
  requestMetricsIndex,
  THREAD_MAIN,
  THREAD_STRIDE,
  threadClaimIndex,
  threadHealthIndex,
} from '../shm/layout.js';
import { startMallocTrimmer } from '../shm/malloc-trim.js';
import { openRegion, populateRegion, type Region } from '../shm/region.js';
import { engineState, ringUsedBytes, setServerPid } from '../shm/words.js';
import { TokenizerPool } from '../tokenizer/pool.js';
import { getModelCard } from '../wire/model-card.js';
import { listenReusePort } from './listener.js';
import { type ChildEnv, readChildEnv, type SupervisorMessage, sendToParent } from './roles.js';

/** How often an API server looks at how full its output ring is. */
const RING_CHECK_MS = 100;
/** An output ring fuller than this is worth a warning: the engine will soon wait on this server. */
const OUTPUT_RING_WARN_FRACTION = 0.75;

async function main(env: ChildEnv, region: Region, log: Logger): Promise<void> {
  const { config, server } = env;
  process.title = `ringserve-api-${server}`;
  setServerPid(region.i32, region.params, server, process.pid);
  const engine = new EngineClient(region, server);
  // The output worker records request metrics into this server's slots of the region and the
  // timeline; it finds them in its environment data, so they are shared before it starts.
  const timeline = new RequestTimeline(config.maxQueueLen);
  shareRequestMetrics({
    metricsSab: region.sab,
    metricsIndex: requestMetricsIndex(region.params, server),
    timelineSab: timeline.sab,
    maxModelLen: config.maxModelLen,
  });
  const coordinator = new RequestCoordinator(config, engine, { timeline, log });
  // The served tokenizer lives on its thread; this thread keeps its byte table, which the output
  // worker detokenizes with.
  const tokenizers = await TokenizerPool.start({
    source: { preset: config.model, dir: config.tokenizer },
  });
  const output = await createOutputPath(config, region, server, coordinator, tokenizers.view.bytes);
  coordinator.attach(output);
  const preset = getModelCard(config.model);
  const app = buildApp({
    config,
    engine,
    coordinator,
    tokenizers,
    startedAt: Date.now(),
    log: (line) => log.error(line),
    requestOptions: {
      vocabSize: preset.vocabSize,
      maxModelLen: config.maxModelLen,
      defaultReturnSamplingMask: config.returnSamplingMask,
      defaultReturnRoutedExperts: config.returnRoutedExperts,
    },
    broadcastAbort: (ids) => sendToParent({ type: 'abort-ids', ids, from: server }),
  });
  const health = new ProcessHealth(region.f64, healthIndex(region.params, server), {
    inFlight: () => coordinator.table.active,
    packerQueue: () => output.queueDepth(),
    responsePool: () => output.poolStats(),
    inlineAnswers: () => output.inlineAnswers(),
    onLoopBlocked: (lateMs) => log.warn({ blocked_ms: Math.round(lateMs) }, 'event loop blocked'),
    threadBase: threadHealthIndex(region.params, server) + THREAD_MAIN * THREAD_STRIDE,
  });
  health.start();
  const ringCheck = startRingCheck(region, server, output, log);

  let closing = false;
  /** --listener reuseport: this server's own listener on the port, once it listens. */
  let listener: NetServer | null = null;
  const shutdown = async (timeoutMs: number): Promise<void> => {
    if (closing) return;
    closing = true;
    // Out of the port's SO_REUSEPORT group first: new connections go to the primary's 503 answer
    // (or its siblings), none to a server that no longer admits requests.
    listener?.close();
    listener = null;
    clearInterval(ringCheck);
    // Requests on a paused engine can never finish: waiting for them would only delay the exit.
    await coordinator.drain(timeoutMs, () => enginePaused(region));
    await app.close();
    await output.close();
    await tokenizers.close();
    health.stop();
    process.exit(ExitCode.Ok);
  };
  process.on('message', (message: SupervisorMessage, handle: unknown) => {
    if (message.type === 'conn') takeConnection(app.server, handle as Socket);
    else if (message.type === 'engine-down') coordinator.engineDown();
    else if (message.type === 'engine-up') coordinator.engineUp();
    else if (message.type === 'abort-ids') for (const id of message.ids) coordinator.abortById(id);
    else if (message.type === 'drain') void shutdown(message.timeoutMs);
  });
  process.on('SIGTERM', () => void shutdown(config.drainTimeoutS * 1000));
  process.on('SIGINT', () => void shutdown(config.drainTimeoutS * 1000));

  // The primary listens and hands connections over ('conn' messages): connection-distributor.ts.
  // With reuseport, this server also listens on the port itself, before it reports ready (a
  // restarted one rejoins the port so), and the primary stops listening once one does.
  await app.ready();
  if (config.listener === 'reuseport') {
    const own = await listenReusePort(app.server, config.host, config.port);
    // A drain that began while it was getting ready: no listener any more.
    if (closing) own.close();
    else listener = own;
  }
  log.info(
    { output_processing: config.outputProcessing, listener: config.listener },
    'API server ready',
  );
  sendToParent({ type: 'ready', role: 'api', server });
}

/**
 * A connection from the primary: acknowledged before a byte is read (until then the primary may
 * still give it to another server), then served as if this server had accepted it.
 */
function takeConnection(http: Server, socket: Socket | undefined): void {
  if (socket === undefined) return;
  sendToParent({ type: 'conn-ack' });
  http.emit('connection', socket);
  socket.resume();
}

function enginePaused(region: Region): boolean {
  return engineState(region.i32) === ENGINE_STATE_PAUSED;
}

/**
 * A warning while the server's output ring fills up. (Its liveness, heap, RSS and requests in
 * flight are published by ProcessHealth into its health slots.)
 */
function startRingCheck(
  region: Region,
  server: number,
  output: OutputPath,
  log: Logger,
): NodeJS.Timeout {
  const ring = outputRingOffset(region.params, server);
  const capacity = region.params.outputRingBytes;
  const warnRing = rateLimit(10_000);
  const check = setInterval(() => {
    const used = ringUsedBytes(region.i32, ring);
    if (used > capacity * OUTPUT_RING_WARN_FRACTION && warnRing()) {
      log.warn(
        { used_bytes: used, capacity_bytes: capacity, packer_queue: output.queueDepth() },
        'output ring filling up: the output worker is behind the engine',
      );
    }
  }, RING_CHECK_MS);
  check.unref();
  return check;
}

const env = readChildEnv();
const region = openRegion(env.region);
populateRegion(region, env.server);
startMallocTrimmer(env.config.mallocTrimIntervalS);
// Before any other thread starts, as the share below: SIGUSR2 collects in every thread.
const collect = shareMemoryCollect();
// Every thread of this server publishes its GC and heap into the server's thread-health entries,
// which it finds in its environment data: shared before the first thread (pino's) starts.
shareThreadHealth({
  sab: region.sab,
  entries: threadHealthIndex(region.params, env.server),
  claim: threadClaimIndex(region.params, env.server),
});
const log = createLogger(env.config.logLevel, { name: 'ringserve-api', api_server: env.server });
collect.onSignal(log);
main(env, region, log).catch((error: unknown) => {
  log.fatal({ err: error }, 'API server failed to start');
  process.exit(ExitCode.Failure);
});
