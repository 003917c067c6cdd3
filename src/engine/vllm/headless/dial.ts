import { Dealer } from 'zeromq';
import { RS_ERR_VLLM_HANDSHAKE } from '../../../errors.js';
import {
  decodeInit,
  encodeHandshake,
  encodeRegistration,
  engineIdentity,
  type InitMessage,
  type RegistrationValues,
} from '../handshake.js';
import type { VllmLayout } from '../layouts.js';
import { ZmtpPush } from '../zmtp-push.js';

/**
 * The engine's half of vLLM's startup handshake (docs/vllm-protocol.md, "Handshake"), as a
 * headless `vllm serve --headless` runs it: dial the frontend's handshake ROUTER with a DEALER
 * whose identity is the DP rank (2 bytes little-endian), say HELLO, take the socket addresses from
 * the init message, connect a DEALER to inputs[0] and a PUSH to outputs[0], register on the input
 * socket with every key of the layout's EngineCoreReadyResponse, then say READY. vLLM closes its
 * handshake socket after that, so this one is closed too. Between the init message and the
 * registration vLLM builds the engine, its DP process group included (a MoE rank of DP > 1): that
 * is `afterInit`, and READY then carries parallel_config_hash.
 */

/** vLLM's engine waits this long for the init message (HANDSHAKE_TIMEOUT_MINS = 5, core.py). */
export const INIT_TIMEOUT_MS = 5 * 60_000;
/** The engine PUSH socket's linger (core.py: 4000 ms), so a last ENGINE_CORE_DEAD still leaves. */
const OUTPUT_LINGER_MS = 4_000;

export interface HeadlessSockets {
  input: Dealer;
  /** ringserve's own PUSH (zmtp-push.ts): one write per message, no zero-copy frames. */
  output: ZmtpPush;
  inputAddress: string;
  outputAddress: string;
  /** Settles when the input connection drops (the frontend is gone). */
  gone: Promise<void>;
}

/** `tcp://A:P`, bracketing an IPv6 address (vllm/utils/network_utils.py). */
export function tcpAddress(host: string, port: number): string {
  return host.includes(':') ? `tcp://[${host}]:${port}` : `tcp://${host}:${port}`;
}

export interface DialOptions {
  /**
   * The DP rank the DEALER identities carry (vLLM: the global rank, also for a dense model's
   * independent ranks, which register data_parallel_rank 0). Default: the registration's.
   */
  rank?: number;
  /** READY's parallel_config_hash (vLLM sends it when data_parallel_size > 1), or null. */
  parallelConfigHash?: string | null;
  /** Runs after the init message, before the registration; a failure ends the handshake. */
  afterInit?: (init: InitMessage) => Promise<void>;
}

/**
 * DP rank `rank` as the routing id (two bytes, little-endian). zeromq.js types the option as a
 * string but sets a Buffer as it is; a string would go out as UTF-8, two bytes per char from 0x80
 * (rank 128 would be `c2 80 00`).
 */
function routingId(rank: number): string {
  return engineIdentity(rank) as unknown as string;
}

export async function dialFrontend(
  host: string,
  port: number,
  layout: VllmLayout,
  registration: RegistrationValues,
  initTimeoutMs = INIT_TIMEOUT_MS,
  options: DialOptions = {},
): Promise<HeadlessSockets> {
  const ipv6 = host.includes(':');
  const rank = options.rank ?? registration.dataParallelRank ?? 0;
  // Linger so that READY leaves before close() (vLLM's frontend waits for it).
  const handshake = new Dealer({ routingId: routingId(rank), linger: 2_000, ipv6 });
  let input: Dealer | null = null;
  let output: ZmtpPush | null = null;
  try {
    handshake.receiveTimeout = initTimeoutMs;
    handshake.connect(tcpAddress(host, port));
    await handshake.send(
      encodeHandshake({ status: 'HELLO', local: false, headless: true, parallelConfigHash: null }),
    );
    const frames = await handshake.receive().catch((error: unknown) => {
      throw new RS_ERR_VLLM_HANDSHAKE(
        `no init message within ${initTimeoutMs} ms (${String(error)})`,
      );
    });
    const init = decodeInit(frames[frames.length - 1] as Buffer);
    await options.afterInit?.(init);
    const inputAddress = init.inputs[0] as string;
    const outputAddress = init.outputs[0] as string;
    input = new Dealer({
      routingId: routingId(rank),
      linger: 0,
      ipv6,
      sendHighWaterMark: 0,
      receiveHighWaterMark: 0,
    });
    // Observed before connecting: a monitor sees only what happens after it was made.
    const gone = new Promise<void>((resolve) => {
      (input as Dealer).events.on('disconnect', () => resolve());
    });
    input.connect(inputAddress);
    output = ZmtpPush.connect(outputAddress, { lingerMs: OUTPUT_LINGER_MS });
    await input.send(encodeRegistration(layout, registration));
    await handshake.send(
      encodeHandshake({
        status: 'READY',
        local: false,
        headless: true,
        parallelConfigHash: options.parallelConfigHash ?? null,
      }),
    );
    return { input, output, inputAddress, outputAddress, gone };
  } catch (error) {
    input?.close();
    void output?.close(0);
    throw error;
  } finally {
    handshake.close();
  }
}
