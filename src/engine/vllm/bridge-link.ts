/**
 * The bridge's link to a headless vLLM engine of one or more data-parallel ranks
 * (docs/vllm-protocol.md, "Handshake", "Data parallelism"): the handshake ROUTER on the
 * --data-parallel-rpc-port that every rank dials, as vLLM's frontend binds one for all of them, and
 * one RankLink per rank (bridge-rank-link.ts) with that rank's data sockets, handshake state and
 * liveness ping. A handshake message goes to the rank its identity names (the rank as 2 bytes
 * little-endian); one from a rank outside the data-parallel size is logged and ignored.
 *
 * For a MoE model with more than one rank the init tells every rank where their DP group meets
 * (data_parallel_master_ip / _port / _port_list, the keys vLLM's frontend sends for coordinated
 * data parallelism): this bridge's address and free ports picked once at start, so a restarted rank
 * meets the same group.
 */
import { createServer } from 'node:net';
import { Router } from 'zeromq';
import { RS_ERR_CONFIG_INVALID } from '../../errors.js';
import type { VllmBridge } from './bridge.js';
import { hostPart, type LinkLog, RankLink, socketOptions } from './bridge-rank-link.js';
import { type DpGroupConfig, decodeHandshake } from './handshake.js';

export interface BridgeLinkOptions {
  address: string;
  port: number;
  /** `auto` (the layout from the registration and the first output) or a layout's name. */
  version: string;
  /** An engine that answers no ping for this long is dead. */
  pingTimeoutMs: number;
  /** Engine ranks that dial this handshake port (vLLM's --data-parallel-size); 1 when absent. */
  dataParallelSize?: number;
  /**
   * Whether the ranks form a MoE DP group (lockstep waves): the init then carries the group's
   * rendezvous. Absent: when dataParallelSize > 1.
   */
  moe?: boolean;
  log: LinkLog;
}

/** Ports vLLM's ParallelConfig keeps in _data_parallel_master_port_list. */
const DP_MASTER_PORT_LIST = 5;

export class VllmBridgeLink {
  readonly #bridge: VllmBridge;
  readonly #options: BridgeLinkOptions;
  readonly #handshake: Router;
  readonly #ranks: RankLink[] = [];
  #closed = false;

  constructor(bridge: VllmBridge, options: BridgeLinkOptions) {
    const size = options.dataParallelSize ?? 1;
    if (!Number.isInteger(size) || size < 1 || size > 0xffff)
      throw new RS_ERR_CONFIG_INVALID('--data-parallel-size', `must be in [1, 65535], got ${size}`);
    this.#bridge = bridge;
    this.#options = options;
    // Handover: a restarted engine dials with the same identity as the one that died.
    this.#handshake = new Router({ ...socketOptions(options.address), handover: true });
  }

  /** The rank links, by rank. */
  get ranks(): readonly RankLink[] {
    return this.#ranks;
  }

  /**
   * Binds the sockets and starts listening; resolves with the handshake endpoint. A failure closes
   * what was bound.
   */
  async start(): Promise<string> {
    try {
      return await this.#start();
    } catch (error) {
      await this.close();
      throw error;
    }
  }

  async #start(): Promise<string> {
    const o = this.#options;
    const size = o.dataParallelSize ?? 1;
    const moeGroup = size > 1 && (o.moe ?? true);
    if (moeGroup && (o.address === '0.0.0.0' || o.address === '::'))
      throw new RS_ERR_CONFIG_INVALID(
        '--data-parallel-address',
        `the ranks of a MoE model meet at this address (their DP group's data_parallel_master_ip), so it must be one rank 0 can bind and every rank can reach, not ${o.address}`,
      );
    await this.#handshake.bind(`tcp://${hostPart(o.address)}:${o.port}`);
    const dpGroup = moeGroup ? await dpGroupConfig(o.address, size) : null;
    if (dpGroup !== null)
      o.log('info', 'the data-parallel ranks form a MoE DP group', {
        data_parallel_master_ip: dpGroup.masterIp,
        data_parallel_master_port: dpGroup.masterPort,
        data_parallel_size: size,
      });
    for (let rank = 0; rank < size; rank++) {
      const link = new RankLink(this.#bridge, rank, {
        address: o.address,
        version: o.version,
        pingTimeoutMs: o.pingTimeoutMs,
        dpGroup,
        dataParallelSize: size,
        sendHandshake: (identity, payload) => this.#handshake.send([identity, payload]),
        log: o.log,
      });
      await link.start();
      this.#ranks.push(link);
    }
    void this.#readHandshake();
    return this.#handshake.lastEndpoint ?? '';
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const link of this.#ranks) link.close();
    this.#handshake.close();
  }

  async #readHandshake(): Promise<void> {
    const log = this.#options.log;
    try {
      for await (const [identity, payload] of this.#handshake) {
        if (identity === undefined || payload === undefined) continue;
        const rank = identity.length === 2 ? identity.readUInt16LE(0) : -1;
        const link = this.#ranks[rank];
        if (link === undefined) {
          log('warn', 'a handshake from an engine outside the data-parallel ranks was ignored', {
            identity: identity.toString('hex'),
            data_parallel_size: this.#ranks.length,
          });
          continue;
        }
        let message: ReturnType<typeof decodeHandshake>;
        try {
          message = decodeHandshake(payload);
        } catch (error) {
          log('warn', 'an undecodable handshake message was ignored', { rank, err: error });
          continue;
        }
        // One rank's failure (a send to it, a rebind) must not end the loop every rank uses.
        await link
          .onHandshake(message)
          .catch((error: unknown) =>
            log('error', 'a vLLM handshake step failed', { rank, err: error }),
          );
      }
    } catch (error) {
      if (!this.#closed) log('error', 'vLLM handshake socket failed', { err: error });
    }
  }
}

/**
 * The DP group's rendezvous at the bridge's address: ports free on this host now (vLLM's frontend
 * picks its data_parallel_master_port and port list the same way, get_open_port), kept for the
 * bridge's life so that a restarted rank meets the same group.
 */
async function dpGroupConfig(address: string, size: number): Promise<DpGroupConfig> {
  const ports: number[] = [];
  for (let i = 0; i <= DP_MASTER_PORT_LIST; i++) ports.push(await freePort(address));
  return { masterIp: address, masterPort: ports[0]!, masterPortList: ports.slice(1), size };
}

function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
