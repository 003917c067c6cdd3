/**
 * `--engine vllm`: the engine-core process builds the bridge to a headless vLLM engine instead of
 * the simulator (src/engine/vllm/bridge.ts), binds its sockets and says where the engine should
 * dial and which vLLM message layouts it speaks (`auto`: the engine's own, detected). With
 * --data-parallel-size N, N engine ranks dial the same handshake port.
 */
import type { Logger } from 'pino';
import type { RingserveConfig } from '../config.js';
import { VllmBridge } from '../engine/vllm/bridge.js';
import { VllmBridgeLink } from '../engine/vllm/bridge-link.js';
import { AUTO_VLLM_VERSION, describeLayouts, getVllmLayout } from '../engine/vllm/layouts.js';
import { getModelCard } from '../wire/model-card.js';

export interface StartedBridge {
  engine: VllmBridge;
  link: VllmBridgeLink;
}

export async function startVllmBridge(
  config: RingserveConfig,
  log: Logger,
): Promise<StartedBridge> {
  const version = config.vllmVersion;
  // A pinned series must exist (RS_ERR_CONFIG_INVALID naming --vllm-version otherwise).
  const pinned = version === AUTO_VLLM_VERSION ? null : getVllmLayout(version);
  const card = getModelCard(config.model);
  const engine = new VllmBridge({
    card,
    dataParallelSize: config.dataParallelSize,
    maxModelLen: config.maxModelLen,
    blockSize: config.blockSize,
    returnSamplingMask: config.enableReturnSamplingMask,
    // The API server bounds the call by the same flag (routes/control.ts).
    weightsTimeoutMs: config.updateWeightsTimeoutS * 1000,
    onEvent: (message, fields) => log.warn(fields ?? {}, message),
  });
  const link = new VllmBridgeLink(engine, {
    address: config.dataParallelAddress,
    port: config.dataParallelRpcPort,
    version,
    pingTimeoutMs: config.vllmPingTimeoutS * 1000,
    dataParallelSize: config.dataParallelSize,
    // The ranks of a MoE model form a DP group (lockstep waves); a dense model's run apart.
    moe: card.routingLayers > 0,
    log: (level, message, fields) => log[level](fields ?? {}, message),
  });
  const endpoint = await link.start();
  log.info(
    {
      handshake: endpoint,
      vllm_version: version,
      data_parallel_size: config.dataParallelSize,
      layouts: describeLayouts(),
    },
    'vLLM bridge waiting for a headless engine',
  );
  const speaks = pinned === null ? 'auto' : `${pinned.name}, vLLM ${pinned.series}`;
  // Not a log record: scripts and tests read the handshake port from this line on stderr.
  console.error(`ringserve: vLLM bridge (protocol ${speaks}) listening on ${endpoint}`);
  return { engine, link };
}
