/**
 * The headless engine as one side of a NIXL prefill/decode pair (vLLM's NixlConnector, modelled;
 * docs/vllm-protocol.md, "Prefill/decode"). A request's kv_transfer_params come in
 * `SamplingParams.extra_args`, read with `.get()` as vLLM's connector reads them:
 *
 * - Prefill (`do_remote_decode: true`): the simulator keeps the prompt's blocks pinned when the
 *   request finishes LENGTH or STOP, and the final output answers a handle naming this engine:
 *   block ids, engine id, request id, the side channel's host and port (tp_size 1). The pin lasts
 *   the lease (`kv_lease_s`), unless a decode engine reads the blocks and says it is done first.
 * - Decode (`do_remote_prefill: true` and all of remote_block_ids, remote_engine_id,
 *   remote_request_id, remote_host, remote_port; else the prompt is computed here): asks the prefill
 *   engine's side channel for the blocks, which checks the engine id, the request id and that
 *   they are still held; the simulator then imports them (their transfer time modelled at
 *   --kv-transfer-bandwidth-gbs, external-kv.ts), and once the request has run a step the prefill
 *   engine is told to free them. A load that fails follows kv_load_failure_policy.
 *
 * Per request, never per token: the objects here are made once per request.
 */
import { FinishReason } from '../../../wire/types.js';
import type { StepOutputs } from '../../step-outputs.js';
import { decodeKvParams } from '../kv-params.js';
import type { LiveRequests } from './live-requests.js';
import type { NixlConfig } from './nixl-config.js';
import {
  type SideChannelMessage,
  SideChannelServer,
  sideChannelCall,
} from './nixl-side-channel.js';

/** A finished request's pinned KV, as the simulator keeps it (SimEngine.heldKv). */
export interface HeldKv {
  id: number;
  blockIds: number[];
  numTokens: number;
  /** performance.now() time the pin ends. */
  untilMs: number;
}

/** What the connector needs of the engine core (the simulator has both). */
export interface KvHolder {
  heldKv(server: number, slot: number): HeldKv | null;
  releaseHeldKv(id: number): boolean;
}

/** A prefill engine's handle, as a decode request names it. */
export interface RemoteHandle {
  engineId: string;
  requestId: string;
  host: string;
  port: number;
  blockIds: unknown;
}

export type KvLoad = { ok: true; numTokens: number } | { ok: false; why: string };

/** What an ADD's kv_transfer_params ask of this engine. */
export interface KvPlan {
  remoteDecode: boolean;
  handle: RemoteHandle | null;
}

/** What a request's kv_transfer_params settled before the engine admits it. */
export interface AdmitKv {
  pinKv: boolean;
  importKvTokens: number;
  /** Tells the prefill engine the blocks were read (after the request's first step). */
  done: (() => void) | null;
  /** The load failed under kv_load_failure_policy "fail": the request ends with ERROR. */
  failed: boolean;
}

export const PLAIN_KV: AdmitKv = { pinKv: false, importKvTokens: 0, done: null, failed: false };

const NO_PLAN: KvPlan = { remoteDecode: false, handle: null };
/** How long a decode engine waits for the prefill engine's side channel. */
const SIDE_CHANNEL_TIMEOUT_MS = 5_000;
/** How often expired pins are freed while the engine may have nothing else to do. */
const SWEEP_MS = 1_000;

interface Pin {
  held: HeldKv;
  /** JSON of the block ids the handle named: what a read must name. */
  blocks: string;
}

export interface NixlLog {
  warn(fields: object, message: string): void;
}

export class NixlConnector {
  readonly config: NixlConfig;
  readonly #holder: KvHolder;
  readonly #server: SideChannelServer;
  readonly #log: NixlLog;
  /** Pinned prompts a decode engine may read, by the prefill request's id. */
  readonly #pins = new Map<string, Pin>();
  /** The simulator's ids of the pins in #pins (a pin is answered once). */
  readonly #pinIds = new Set<number>();
  readonly #sweep: NodeJS.Timeout;

  private constructor(
    config: NixlConfig,
    holder: KvHolder,
    server: SideChannelServer,
    log: NixlLog,
  ) {
    this.config = config;
    this.#holder = holder;
    this.#server = server;
    this.#log = log;
    this.#sweep = setInterval(() => this.#freeExpired(), SWEEP_MS);
    this.#sweep.unref();
  }

  /** Starts the side channel (listening before any handle can name it). */
  static async start(config: NixlConfig, holder: KvHolder, log: NixlLog): Promise<NixlConnector> {
    let connector: NixlConnector | null = null;
    const server = await SideChannelServer.listen(
      config.sideChannelHost,
      config.sideChannelPort,
      (m) => connector?.answer(m) ?? { ok: false, error: 'not started' },
    );
    connector = new NixlConnector(config, holder, server, log);
    return connector;
  }

  /** The side channel's port (the one bound, when 0 was asked). */
  get port(): number {
    return this.#server.port;
  }

  close(): void {
    clearInterval(this.#sweep);
    this.#server.close();
  }

  /** What a request's kv_transfer_params (msgpack bytes, or null) ask of this engine. */
  plan(bytes: Uint8Array | null, requestId: string): KvPlan {
    if (bytes === null) return NO_PLAN;
    let p: Record<string, unknown>;
    try {
      p = decodeKvParams(bytes, 'extra_args.kv_transfer_params');
    } catch (error) {
      this.#log.warn({ err: error, request_id: requestId }, 'kv_transfer_params ignored');
      return NO_PLAN;
    }
    const role = this.config.role;
    const remoteDecode = p.do_remote_decode === true && role !== 'kv_consumer';
    if (p.do_remote_prefill !== true || role === 'kv_producer')
      return { remoteDecode, handle: null };
    const { remote_engine_id: engineId, remote_request_id: id, remote_host: host } = p;
    const port = p.remote_port;
    const complete =
      Array.isArray(p.remote_block_ids) &&
      typeof engineId === 'string' &&
      typeof id === 'string' &&
      typeof host === 'string' &&
      typeof port === 'number' &&
      Number.isInteger(port);
    if (!complete) return { remoteDecode, handle: null };
    return {
      remoteDecode,
      handle: { engineId, requestId: id, host, port, blockIds: p.remote_block_ids },
    };
  }

  /**
   * After a step: a prefill request that finished LENGTH or STOP gets its handle (the simulator
   * pinned its blocks); a decode request that ran (a token, or its end) releases its remote blocks.
   */
  afterStep(out: StepOutputs, table: LiveRequests): void {
    for (let i = 0; i < out.count; i++) {
      const r = table.atSlot(out.slot[i] as number);
      if (r === undefined) continue;
      const finish = out.finish[i] as FinishReason;
      if (r.kvDone !== null && ((out.token[i] as number) >= 0 || finish !== FinishReason.None)) {
        r.kvDone();
        r.kvDone = null;
      }
      if (!r.remoteDecode || r.kvTransferParams !== null) continue;
      if (finish === FinishReason.Length || finish === FinishReason.Stop)
        r.kvTransferParams = this.#handleFor(r.id, r.slot);
    }
  }

  /** Decode: asks the prefill engine for the handle's blocks; they stay held there until done(). */
  async load(h: RemoteHandle): Promise<KvLoad> {
    try {
      const answer = await this.#call(h, { op: 'read', block_ids: h.blockIds });
      const n = answer.num_tokens;
      if (answer.ok === true && typeof n === 'number' && Number.isInteger(n) && n > 0)
        return { ok: true, numTokens: n };
      return { ok: false, why: String(answer.error ?? 'refused') };
    } catch (error) {
      return { ok: false, why: (error as Error).message };
    }
  }

  /**
   * Decode: loads a plan's handle (request `id`) and says how to admit the request: with the
   * import, or, the load failed, as kv_load_failure_policy says (logged).
   */
  async loadFor(id: string, plan: KvPlan): Promise<AdmitKv> {
    const handle = plan.handle as RemoteHandle;
    const load = await this.load(handle);
    const kv: AdmitKv = { ...PLAIN_KV, pinKv: plan.remoteDecode };
    if (load.ok) {
      kv.importKvTokens = load.numTokens;
      kv.done = () => this.done(handle);
      return kv;
    }
    const policy = this.config.failurePolicy;
    kv.failed = policy === 'fail';
    this.#log.warn(
      { request_id: id, remote_request_id: handle.requestId, why: load.why },
      `KV load failed: ${policy === 'fail' ? 'the request fails' : 'the prompt is recomputed'} (kv_load_failure_policy ${policy})`,
    );
    return kv;
  }

  /** Decode: the blocks were read, the prefill engine may free them (its lease would otherwise). */
  done(h: RemoteHandle): void {
    this.#call(h, { op: 'done' }).catch((error: unknown) => {
      this.#log.warn({ err: error, remote_request_id: h.requestId }, 'done not delivered');
    });
  }

  /** The side channel's answer to one message (SideChannelServer's handler). */
  answer(m: SideChannelMessage): SideChannelMessage {
    if (m.engine_id !== this.config.engineId) {
      return { ok: false, error: `engine id ${String(m.engine_id)} is not this engine's` };
    }
    const id = String(m.request_id);
    const pin = this.#pins.get(id);
    if (m.op === 'done') {
      if (pin !== undefined) this.#release(id, pin);
      return { ok: true };
    }
    if (m.op !== 'read') return { ok: false, error: `unknown op ${String(m.op)}` };
    if (pin === undefined) return { ok: false, error: `request ${id} holds no KV here` };
    if (pin.held.untilMs <= performance.now()) {
      this.#release(id, pin);
      return {
        ok: false,
        error: `the KV of request ${id} expired (lease ${this.config.leaseS} s)`,
      };
    }
    if (JSON.stringify(m.block_ids) !== pin.blocks)
      return { ok: false, error: `request ${id} holds other blocks` };
    return { ok: true, num_tokens: pin.held.numTokens };
  }

  /** The handle of a prefill request that kept its blocks (vLLM's keys), registered for reads. */
  #handleFor(requestId: string, slot: number): Record<string, unknown> | null {
    const held = this.#holder.heldKv(0, slot);
    if (held === null || this.#pinIds.has(held.id)) return null;
    const blockIds = [held.blockIds];
    this.#pins.set(requestId, { held, blocks: JSON.stringify(blockIds) });
    this.#pinIds.add(held.id);
    const c = this.config;
    return {
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_block_ids: blockIds,
      remote_engine_id: c.engineId,
      remote_request_id: requestId,
      remote_host: c.sideChannelHost,
      remote_port: this.port,
      tp_size: 1,
      dcp_size: 1,
      pp_size: 1,
      remote_num_tokens: held.numTokens,
      remote_blocks_expiry_time: (Date.now() + held.untilMs - performance.now()) / 1000,
    };
  }

  #call(h: RemoteHandle, m: SideChannelMessage): Promise<SideChannelMessage> {
    const message = { ...m, engine_id: h.engineId, request_id: h.requestId };
    return sideChannelCall(h.host, h.port, message, SIDE_CHANNEL_TIMEOUT_MS);
  }

  #release(id: string, pin: Pin): void {
    this.#pins.delete(id);
    this.#pinIds.delete(pin.held.id);
    this.#holder.releaseHeldKv(pin.held.id);
  }

  #freeExpired(): void {
    const now = performance.now();
    for (const [id, pin] of this.#pins) if (pin.held.untilMs <= now) this.#release(id, pin);
  }
}
