/**
 * `--engine vllm`: the engine-core process builds the bridge to a headless vLLM engine instead of
 * the simulator (src/engine/vllm/bridge.ts), binds its sockets and says where the engine should
 * dial and which vLLM message layout it speaks.
 */
import type { Logger } from 'pino';
import type { RingserveConfig } from '../config.js';
import { VllmBridge } from '../engine/vllm/bridge.js';
import { VllmBridgeLink } from '../engine/vllm/bridge-link.js';
import { getVllmLayout } from '../engine/vllm/layouts.js';
import { getModelCard } from '../wire/model-card.js';

export interface StartedBridge {
  engine: VllmBridge;
  link: VllmBridgeLink;
}

export async function startVllmBridge(
  config: RingserveConfig,
  log: Logger,
): Promise<StartedBridge> {
  const layout = getVllmLayout(config.vllmVersion);
  const engine = new VllmBridge({
    card: getModelCard(config.model),
    maxModelLen: config.maxModelLen,
    blockSize: config.blockSize,
    onEvent: (message, fields) => log.warn(fields ?? {}, message),
  });
  const link = new VllmBridgeLink(engine, {
    address: config.dataParallelAddress,
    port: config.dataParallelRpcPort,
    layout,
    pingTimeoutMs: config.vllmPingTimeoutS * 1000,
    log: (level, message, fields) => log[level](fields ?? {}, message),
  });
  const endpoint = await link.start();
  log.info(
    { handshake: endpoint, vllm_version: layout.name, vllm_source: layout.source },
    'vLLM bridge waiting for a headless engine',
  );
  // Not a log record: scripts and tests read the handshake port from this line on stderr.
  console.error(`ringserve: vLLM bridge (protocol ${layout.name}) listening on ${endpoint}`);
  return { engine, link };
}
