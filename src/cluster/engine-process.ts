/**
 * Entry point of the engine-core process (forked by the supervisor). It maps the cluster's region,
 * builds the simulated engine from the validated config and runs the core loop until told to stop.
 * A crash here is engine-dead: the supervisor tells the API servers and starts a new engine.
 */

import type { RingserveConfig } from '../config.js';
import { CoreLoop } from '../engine/core-loop.js';
import { ExitCode } from '../errors.js';
import { carryEngineCounters } from '../obs/engine-carry.js';
import { createLogger } from '../obs/log.js';
import { shareMemoryCollect } from '../obs/memory-collect.js';
import { ProcessHealth } from '../obs/process-health.js';
import { healthIndex } from '../shm/layout.js';
import { startMallocTrimmer } from '../shm/malloc-trim.js';
import { openRegion, populateRegion } from '../shm/region.js';
import { getPreset, type ModelPreset } from '../sim/presets.js';
import { SimEngine } from '../sim/sim-engine.js';
import { TokenizerPool } from '../tokenizer/pool.js';
import { readChildEnv, readEngineRestore, type SupervisorMessage, sendToParent } from './roles.js';
import { engineConfigFrom } from './sim-engine-config.js';
import { startVllmBridge } from './vllm-bridge.js';

/** A loop turn (one engine step, or one bounded idle wait) longer than this is logged as slow. */
const SLOW_TURN_MS = 1_000;

/**
 * The model (a preset, or a model directory whose card counts its own tokenizer's text ids), or
 * with `--tokenizer DIR` the model sampling only ids below that tokenizer's text vocabulary too, so every token the simulated model emits decodes to text. The tokenizer is
 * loaded on a short-lived thread, so this process's heap never holds its tables.
 */
async function servedPreset(config: RingserveConfig): Promise<string | ModelPreset> {
  if (config.tokenizer === null) return config.model;
  const preset = getPreset(config.model);
  const tokenizers = await TokenizerPool.start({
    source: { preset: config.model, dir: config.tokenizer },
  });
  const text = tokenizers.view.textVocabSize;
  await tokenizers.close();
  return { ...preset, textVocabSize: Math.min(preset.textVocabSize ?? preset.vocabSize, text) };
}

async function main(): Promise<void> {
  process.title = 'ringserve-engine';
  const { region: name, config } = readChildEnv();
  // Before any other thread starts (pino's): SIGUSR2 collects in every thread.
  const collect = shareMemoryCollect();
  const log = createLogger(config.logLevel, { name: 'ringserve-engine' });
  collect.onSignal(log);
  const region = openRegion(name);
  populateRegion(region, 'all');
  startMallocTrimmer(config.mallocTrimIntervalS);
  const bridge = config.engine === 'vllm' ? await startVllmBridge(config, log) : null;
  // A restarted simulator comes back as its predecessor was: paused if the trainer had paused it
  // (a trainer mid weight-swap must not see generation resume behind its back), same weights. A
  // vLLM engine keeps its own state across a restart of the bridge process.
  const restore = bridge === null ? readEngineRestore() : null;
  const engine =
    bridge?.engine ??
    new SimEngine({
      ...engineConfigFrom(config, await servedPreset(config)),
      ...(restore === null ? {} : { weightVersion: restore.weightVersion }),
    });
  if (restore?.paused === true) engine.pause();
  // Before the loop publishes its first (zero) counters over a predecessor's final ones.
  carryEngineCounters(region);
  const loop = new CoreLoop(region, engine, {
    serverGone: (server, error) => {
      log.error(
        { api_server: server, err: error },
        'the output ring of an API server has no consumer any more: its requests were dropped',
      );
      // A process that died is restarted by the supervisor anyway; one that lives on without its
      // output worker would hold its clients forever, so the supervisor kills and restarts it. (A
      // slow or stopped API server is never reported: the engine holds its requests instead.)
      sendToParent({ type: 'server-failed', server });
    },
    badRecord: (server, detail) =>
      log.error({ api_server: server, detail }, 'bad record from an API server'),
  });
  const health = new ProcessHealth(region.f64, healthIndex(region.params, -1), {
    blockedMs: SLOW_TURN_MS,
    onLoopBlocked: (lateMs) =>
      log.warn({ blocked_ms: Math.round(lateMs) }, 'slow engine step: the loop did not turn'),
  });
  health.start();
  process.on('message', (message: SupervisorMessage) => {
    if (message.type === 'server-down') {
      loop.serverDown(message.server);
      log.info({ api_server: message.server }, 'dropped the requests of a dead API server');
      sendToParent({ type: 'server-reset', server: message.server });
    }
  });
  const stop = (): void => {
    loop.stop();
    void bridge?.link.close();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.on('disconnect', stop);
  const done = loop.run();
  log.info(
    {
      model: config.model,
      max_num_seqs: config.maxNumSeqs,
      max_num_batched_tokens: config.maxNumBatchedTokens,
      num_gpu_blocks: config.numGpuBlocks,
      block_size: config.blockSize,
      max_speed: config.maxSpeed,
      paused: engine.paused,
      weight_version: engine.weightVersion,
    },
    'engine core running',
  );
  sendToParent({ type: 'ready', role: 'engine' });
  done.then(
    () => {
      health.stop();
      process.exit(ExitCode.Ok);
    },
    (error: unknown) => {
      log.fatal({ err: error }, 'engine loop failed');
      process.exit(ExitCode.Failure);
    },
  );
}

main().catch((error: unknown) => {
  console.error(`ringserve-engine: ${(error as Error).stack ?? String(error)}`);
  process.exit(ExitCode.Failure);
});
