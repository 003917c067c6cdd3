/**
 * The bridge's sockets (VLLM-ENGINE.md sections 2, 3, 6): the handshake ROUTER on the
 * --data-parallel-rpc-port a headless vLLM engine dials, the input ROUTER and output PULL it is
 * told to connect to, the handshake (HELLO -> init, registration, READY), and the liveness ping.
 * Once an engine is READY the bridge is attached to this link; ENGINE_CORE_DEAD, or no answer to
 * is_scheduler_paused within --vllm-ping-timeout-s, detaches it (every request in flight fails),
 * the data sockets are bound afresh (so nothing of the dead engine arrives any more) and the link
 * waits for the next HELLO: a restarted engine is taken back without restarting the API servers.
 *
 * zeromq.js allows one send in progress per socket, so each socket's sends go through a queue.
 * Only rank 0 of a data-parallel size of 1 is served (DP > 1 is out of scope).
 */
import { Pull, Router } from 'zeromq';
import { RS_ERR_CONTROL_TIMEOUT, RS_ERR_ENGINE_DEAD, RS_ERR_VLLM_HANDSHAKE } from '../../errors.js';
import type { VllmBridge, VllmEngineLink } from './bridge.js';
import type { VllmAddRequest } from './bridge-request.js';
import {
  decodeHandshake,
  decodeRegistration,
  encodeInit,
  engineIdentity,
  type Registration,
} from './handshake.js';
import type { VllmLayout } from './layouts.js';
import { MsgWriter } from './msgpack-writer.js';
import { OutputsReader, type OutputsSink } from './outputs-reader.js';
import {
  encodeAbort,
  encodeAdd,
  encodeUtility,
  REQUEST_TYPE_FRAMES,
  RequestType,
} from './requests.js';

export interface BridgeLinkOptions {
  address: string;
  port: number;
  layout: VllmLayout;
  /** An engine that answers no ping for this long is dead. */
  pingTimeoutMs: number;
  log: (
    level: 'info' | 'warn' | 'error',
    message: string,
    fields?: Record<string, unknown>,
  ) => void;
}

/** Engine identity of DP rank 0. */
const RANK0 = engineIdentity(0);

/**
 * Between HELLO and attached, the registration (input socket) and READY (handshake socket) come on
 * different sockets, so either may be read first: the engine is attached once both are in.
 */
type Phase = 'waiting-hello' | 'handshaking' | 'attached';

interface PendingCall {
  resolve(value: unknown): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout;
  method: string;
}

/** Sends one multipart message at a time on a socket, in order. */
class SendQueue {
  readonly #send: (frames: Buffer[]) => Promise<void>;
  readonly #queue: Buffer[][] = [];
  #busy = false;
  readonly #onError: (error: Error) => void;

  constructor(send: (frames: Buffer[]) => Promise<void>, onError: (error: Error) => void) {
    this.#send = send;
    this.#onError = onError;
  }

  push(frames: Buffer[]): void {
    this.#queue.push(frames);
    if (!this.#busy) void this.#pump();
  }

  async #pump(): Promise<void> {
    this.#busy = true;
    for (let next = this.#queue.shift(); next !== undefined; next = this.#queue.shift()) {
      try {
        await this.#send(next);
      } catch (error) {
        this.#onError(error as Error);
      }
    }
    this.#busy = false;
  }
}

export class VllmBridgeLink implements VllmEngineLink {
  readonly #bridge: VllmBridge;
  readonly #options: BridgeLinkOptions;
  readonly #handshake: Router;
  #input: Router | null = null;
  #output: Pull | null = null;
  #inputQueue: SendQueue | null = null;
  #inputEndpoint = '';
  #outputEndpoint = '';
  #phase: Phase = 'waiting-hello';
  /** Settles once the data sockets of the next engine are bound (their endpoints are known). */
  #dataReady: Promise<void> = Promise.resolve();
  #registration: Registration | null = null;
  #readySeen = false;
  readonly #writer = new MsgWriter(1 << 16);
  readonly #calls = new Map<number, PendingCall>();
  #nextCallId = 1;
  #pingTimer: NodeJS.Timeout | null = null;
  /** Date.now() of the last message from the engine or ping answer. */
  #lastHeard = 0;
  /** The output reader is waiting for the bridge's backlog to drain (see #waitForRoom). */
  #readerParked = false;
  #pingInFlight = false;
  #closed = false;
  readonly #reader: OutputsReader;
  readonly #sink: OutputsSink;

  constructor(bridge: VllmBridge, options: BridgeLinkOptions) {
    this.#bridge = bridge;
    this.#options = options;
    // Handover: a restarted engine dials with the same identity as the one that died.
    this.#handshake = new Router({ ...socketOptions(options.address), handover: true });
    this.#reader = new OutputsReader(options.layout);
    this.#sink = {
      output: (o) => bridge.output(o),
      schedulerStats: (s) => bridge.schedulerStats(s),
      utility: (callId, failure, value) => this.#utilityReply(callId, failure, value),
      engineDead: () => this.#engineLost('the engine sent ENGINE_CORE_DEAD'),
      end: () => bridge.outputsDone(),
    };
  }

  /** Binds the sockets and starts listening; resolves with the handshake endpoint. */
  async start(): Promise<string> {
    const { address, port } = this.#options;
    await this.#handshake.bind(`tcp://${hostPart(address)}:${port}`);
    this.#dataReady = this.#openData();
    await this.#dataReady;
    void this.#readHandshake();
    return this.#handshake.lastEndpoint ?? '';
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#stopPing();
    this.#failCalls(new RS_ERR_ENGINE_DEAD('the bridge is stopping'));
    this.#handshake.close();
    this.#input?.close();
    this.#output?.close();
  }

  // ---- VllmEngineLink ------------------------------------------------------------------------------

  add(request: VllmAddRequest): void {
    const payload = encodeAdd(this.#options.layout, request, this.#writer);
    this.#sendInput(RequestType.Add, payload);
  }

  abort(ids: readonly string[]): void {
    this.#sendInput(RequestType.Abort, encodeAbort(ids));
  }

  call(method: string, args: unknown[], timeoutMs: number): Promise<unknown> {
    if (this.#phase !== 'attached') {
      return Promise.reject(new RS_ERR_ENGINE_DEAD('no vLLM engine is attached'));
    }
    const callId = this.#nextCallId++;
    const payload = encodeUtility({ clientIndex: 0, callId, method, args });
    return new Promise<unknown>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#calls.delete(callId);
        reject(new RS_ERR_CONTROL_TIMEOUT(method, timeoutMs));
      }, timeoutMs);
      this.#calls.set(callId, { resolve, reject, timer, method });
      this.#sendInput(RequestType.Utility, payload);
    });
  }

  // ---- sockets -------------------------------------------------------------------------------------

  /** Binds a fresh input ROUTER and output PULL on ephemeral ports (their endpoints go in the init). */
  async #openData(): Promise<void> {
    this.#input?.close();
    this.#output?.close();
    const host = hostPart(this.#options.address);
    const input = new Router({ ...socketOptions(this.#options.address), handover: true });
    const output = new Pull({ receiveHighWaterMark: 0, ipv6: this.#options.address.includes(':') });
    await input.bind(`tcp://${host}:0`);
    await output.bind(`tcp://${host}:0`);
    this.#input = input;
    this.#output = output;
    this.#inputEndpoint = input.lastEndpoint ?? '';
    this.#outputEndpoint = output.lastEndpoint ?? '';
    this.#inputQueue = new SendQueue(
      (frames) => input.send(frames),
      (error) => this.#options.log('error', 'vLLM input socket send failed', { err: error }),
    );
    void this.#readInput(input);
    void this.#readOutput(output);
  }

  #sendInput(type: number, payload: Buffer): void {
    if (this.#phase !== 'attached' || this.#inputQueue === null) {
      throw new RS_ERR_ENGINE_DEAD('no vLLM engine is attached');
    }
    this.#inputQueue.push([RANK0, REQUEST_TYPE_FRAMES[type]!, payload]);
  }

  async #readHandshake(): Promise<void> {
    try {
      for await (const [identity, payload] of this.#handshake) {
        if (identity === undefined || payload === undefined) continue;
        await this.#onHandshake(identity, payload);
      }
    } catch (error) {
      if (!this.#closed) this.#options.log('error', 'vLLM handshake socket failed', { err: error });
    }
  }

  async #onHandshake(identity: Buffer, payload: Buffer): Promise<void> {
    const log = this.#options.log;
    let message: ReturnType<typeof decodeHandshake>;
    try {
      message = decodeHandshake(payload);
    } catch (error) {
      log('warn', 'an undecodable handshake message was ignored', { err: error });
      return;
    }
    if (!identity.equals(RANK0) || message.local || !message.headless) {
      log('warn', 'a handshake from an engine that is not a headless DP rank 0 was ignored', {
        identity: identity.toString('hex'),
        local: message.local,
        headless: message.headless,
      });
      return;
    }
    if (message.status === 'HELLO') {
      if (this.#phase === 'attached') this.#engineLost('a new engine said HELLO');
      else if (this.#phase !== 'waiting-hello') this.#rebind();
      await this.#dataReady;
      this.#registration = null;
      this.#readySeen = false;
      this.#phase = 'handshaking';
      const init = encodeInit({ inputs: [this.#inputEndpoint], outputs: [this.#outputEndpoint] });
      await this.#handshake.send([identity, init]);
      log('info', 'vLLM engine said HELLO; sent the socket addresses', {
        inputs: this.#inputEndpoint,
        outputs: this.#outputEndpoint,
      });
      return;
    }
    if (this.#phase !== 'handshaking') {
      log('error', 'vLLM engine said READY without a HELLO first: ignored', {
        err: new RS_ERR_VLLM_HANDSHAKE(`READY in phase ${this.#phase}`),
      });
      return;
    }
    this.#readySeen = true;
    this.#attachWhenComplete();
  }

  #attachWhenComplete(): void {
    if (this.#phase === 'handshaking' && this.#readySeen && this.#registration !== null)
      this.#attach(this.#registration);
  }

  async #readInput(input: Router): Promise<void> {
    try {
      for await (const [, payload] of input) {
        if (payload === undefined || input !== this.#input) continue;
        if (this.#phase !== 'handshaking' || this.#registration !== null) continue;
        try {
          this.#registration = decodeRegistration(this.#options.layout, payload);
        } catch (error) {
          this.#options.log('error', 'undecodable vLLM registration', { err: error });
          continue;
        }
        this.#attachWhenComplete();
      }
    } catch (error) {
      if (!this.#closed && input === this.#input)
        this.#options.log('error', 'vLLM input socket failed', { err: error });
    }
  }

  async #readOutput(output: Pull): Promise<void> {
    try {
      for await (const frames of output) {
        if (output !== this.#output) break;
        this.#lastHeard = Date.now();
        if (this.#phase !== 'attached') continue;
        try {
          this.#reader.read(frames, this.#sink);
        } catch (error) {
          this.#options.log('error', 'undecodable vLLM outputs: the engine is treated as dead', {
            err: error,
          });
          this.#engineLost('undecodable outputs');
        }
        this.#bridge.notify();
        const room = this.#bridge.backlogRoom();
        if (room !== null) await this.#waitForRoom(room);
      }
    } catch (error) {
      if (!this.#closed && output === this.#output)
        this.#options.log('error', 'vLLM output socket failed', { err: error });
    }
  }

  /**
   * Stops reading outputs while the bridge's backlog drains: the engine is not silent meanwhile,
   * we are, so the liveness deadline restarts when reading does.
   */
  async #waitForRoom(room: Promise<void>): Promise<void> {
    this.#readerParked = true;
    try {
      await room;
    } finally {
      this.#readerParked = false;
      this.#lastHeard = Date.now();
    }
  }

  // ---- engine lifecycle ------------------------------------------------------------------------------

  #attach(registration: Registration): void {
    const log = this.#options.log;
    this.#phase = 'attached';
    this.#lastHeard = Date.now();
    this.#bridge.attach(this, {
      maxModelLen: registration.maxModelLen,
      numGpuBlocks: registration.numGpuBlocks,
      samplingMasks: registration.samplingMasks,
    });
    if (registration.unknownKeys.length > 0) {
      log(
        'warn',
        'the engine registered with keys this vLLM layout does not know: check --vllm-version',
        {
          vllm_version: this.#options.layout.name,
          unknown_keys: registration.unknownKeys,
        },
      );
    }
    log('info', 'vLLM engine READY', {
      vllm_version: this.#options.layout.name,
      max_model_len: registration.maxModelLen,
      num_gpu_blocks: registration.numGpuBlocks,
      dtype: registration.dtype,
      sampling_masks: registration.samplingMasks,
    });
    this.#startPing();
  }

  /** The engine is dead or silent: fail what it held and wait for the next HELLO. */
  #engineLost(why: string): void {
    if (this.#phase === 'waiting-hello') return;
    const wasAttached = this.#phase === 'attached';
    this.#phase = 'waiting-hello';
    this.#stopPing();
    this.#failCalls(new RS_ERR_ENGINE_DEAD(why));
    if (wasAttached) this.#bridge.detach();
    this.#options.log(
      'error',
      'vLLM engine lost: requests in flight failed; waiting for a new HELLO',
      {
        reason: why,
      },
    );
    this.#rebind();
  }

  /** Fresh data sockets: nothing a dead (or abandoned) engine left in flight can arrive any more. */
  #rebind(): void {
    this.#dataReady = this.#openData().catch((error: unknown) =>
      this.#options.log('error', 'could not bind new vLLM data sockets', { err: error }),
    );
  }

  #startPing(): void {
    this.#stopPing();
    const timeout = this.#options.pingTimeoutMs;
    this.#pingTimer = setInterval(() => this.#ping(timeout), Math.max(50, timeout / 4));
  }

  #stopPing(): void {
    if (this.#pingTimer !== null) clearInterval(this.#pingTimer);
    this.#pingTimer = null;
    this.#pingInFlight = false;
  }

  /**
   * is_scheduler_paused as a liveness ping. The engine answers utility calls between steps, so a
   * long call (collective_rpc loading weights) holds the answer back: no deadline runs while one is
   * in flight, it has its own bound.
   */
  #ping(timeout: number): void {
    if (this.#phase !== 'attached') return;
    const busy = this.#calls.size > (this.#pingInFlight ? 1 : 0);
    if (!busy && !this.#readerParked && Date.now() - this.#lastHeard > timeout) {
      this.#engineLost(`no answer from the engine within ${timeout} ms`);
      return;
    }
    if (this.#pingInFlight) return;
    this.#pingInFlight = true;
    this.call('is_scheduler_paused', [], timeout).then(
      () => {
        this.#pingInFlight = false;
      },
      () => {
        this.#pingInFlight = false;
      },
    );
  }

  #utilityReply(callId: number, failure: string | null, value: unknown): void {
    const call = this.#calls.get(callId);
    if (call === undefined) return;
    this.#calls.delete(callId);
    clearTimeout(call.timer);
    if (failure === null) call.resolve(value);
    else call.reject(new Error(failure));
  }

  #failCalls(error: Error): void {
    for (const call of this.#calls.values()) {
      clearTimeout(call.timer);
      call.reject(error);
    }
    this.#calls.clear();
  }
}

/** vLLM's socket options (N:310-316): no high-water marks; IPv6 when the address is one. */
function socketOptions(address: string) {
  return { sendHighWaterMark: 0, receiveHighWaterMark: 0, ipv6: address.includes(':') };
}

/** An IPv6 literal goes in brackets in a tcp:// endpoint. */
function hostPart(address: string): string {
  return address.includes(':') && !address.startsWith('[') ? `[${address}]` : address;
}
