/**
 * Entry point of the engine-core process (forked by the supervisor). It maps the cluster's region,
 * builds the simulated engine from the validated config and runs the core loop until told to stop.
 * A crash here is engine-dead: the supervisor tells the API servers and starts a new engine.
 */
import { readChildEnv, type SupervisorMessage, sendToParent } from '../cluster/roles.js';
import type { RingserveConfig } from '../config.js';
import { openRegion } from '../shm/region.js';
import { CoreLoop } from './core-loop.js';
import { SimEngine } from './engine.js';
import type { EngineConfig } from './engine-config.js';

function engineConfigFrom(config: RingserveConfig): EngineConfig {
  return {
    preset: config.model,
    maxNumSeqs: config.maxNumSeqs,
    maxNumBatchedTokens: config.maxNumBatchedTokens,
    numGpuBlocks: config.numGpuBlocks,
    blockSize: config.blockSize,
    maxModelLen: config.maxModelLen,
    seed: config.seed,
    policy: config.schedulingPolicy,
    lengthProfile: config.lengthProfile,
    speedup: config.speedup,
    maxSpeed: config.maxSpeed,
  };
}

function main(): void {
  process.title = 'ringserve-engine';
  const { region: name, config } = readChildEnv();
  const region = openRegion(name);
  const engine = new SimEngine(engineConfigFrom(config));
  const loop = new CoreLoop(region, engine, {
    serverFailed: (server, error) =>
      console.error(
        `ringserve-engine: output ring of API server ${server} failed: ${error.message}`,
      ),
    badRecord: (server, detail) =>
      console.error(`ringserve-engine: bad record from API server ${server}: ${detail}`),
  });
  process.on('message', (message: SupervisorMessage) => {
    if (message.type === 'server-down') {
      loop.serverDown(message.server);
      sendToParent({ type: 'server-reset', server: message.server });
    }
  });
  const stop = (): void => loop.stop();
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.on('disconnect', stop);
  const done = loop.run();
  sendToParent({ type: 'ready', role: 'engine' });
  done.then(
    () => process.exit(0),
    (error: unknown) => {
      console.error('ringserve-engine: loop failed:', error);
      process.exit(1);
    },
  );
}

main();
