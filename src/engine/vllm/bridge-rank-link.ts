/**
 * The bridge's link to one data-parallel rank of a headless vLLM engine (docs/vllm-protocol.md,
 * "Sockets", "Handshake", "Data parallelism"): the input ROUTER and output PULL that rank is told
 * to connect to, its side of the handshake (HELLO -> init, registration, READY; the handshake ROUTER
 * itself is shared by every rank and owned by bridge-link.ts), and its liveness ping. The
 * registration picks the message layout (detect.ts; `--vllm-version` may pin one) and the first
 * output confirms it. Once the rank is READY the bridge is attached to it; ENGINE_CORE_DEAD, or no
 * answer to is_scheduler_paused within --vllm-ping-timeout-s, detaches it (its requests in flight
 * fail, no other rank's), its data sockets are bound afresh (so nothing of the dead engine arrives
 * any more) and the link waits for the rank's next HELLO: a restarted engine is taken back without
 * restarting the API servers. An engine no layout fits is refused the same way, with the reason in
 * /health. Anything else the engine sends that does not decode costs only the requests it names
 * (outputs-reader.ts): the link stays.
 *
 * Each rank gets data sockets of its own where vLLM's frontend gives every rank the same pair: an
 * engine connects to whatever addresses its init names, and separate sockets keep a dead rank's
 * leftovers away from the others without looking at every message's engine_index.
 *
 * zeromq.js allows one send in progress per socket, so each socket's sends go through a queue.
 */
import { Router } from 'zeromq';
import {
  RS_ERR_CONTROL_TIMEOUT,
  RS_ERR_ENGINE_DEAD,
  RS_ERR_VLLM_HANDSHAKE,
  RS_ERR_VLLM_LAYOUT,
} from '../../errors.js';
import type { VllmBridge, VllmEngineLink } from './bridge.js';
import type { BridgeAdd } from './bridge-request.js';
import { guessLayout } from './detect.js';
import {
  type DpGroupConfig,
  decodeRegistration,
  encodeInit,
  engineIdentity,
  type HandshakeMessage,
  type Registration,
} from './handshake.js';
import { AUTO_VLLM_VERSION, describeLayouts, getVllmLayout, type VllmLayout } from './layouts.js';
import { MsgWriter } from './msgpack-writer.js';
import { OutputsReader, type OutputsSink } from './outputs-reader.js';
import {
  encodeAbort,
  encodeAdd,
  encodeStartDpWave,
  encodeUtility,
  REQUEST_TYPE_FRAMES,
  RequestType,
} from './requests.js';
import { ZmtpPull } from './zmtp-pull.js';

export type LinkLog = (
  level: 'info' | 'warn' | 'error',
  message: string,
  fields?: Record<string, unknown>,
) => void;

export interface RankLinkOptions {
  /** The address the data sockets bind on (the handshake's). */
  address: string;
  /** `auto` (the layout from the registration and the first output) or a layout's name. */
  version: string;
  /** An engine that answers no ping for this long is dead. */
  pingTimeoutMs: number;
  /** The DP group's rendezvous sent in the init (a MoE model with DP > 1), else null. */
  dpGroup: DpGroupConfig | null;
  /** The bridge's --data-parallel-size: a rank registering another size (but 1) is refused. */
  dataParallelSize: number;
  /** Sends a handshake message to an engine (the shared handshake ROUTER). */
  sendHandshake: (identity: Buffer, payload: Buffer) => Promise<void>;
  log: LinkLog;
}

/**
 * Between HELLO and attached, the registration (input socket) and READY (handshake socket) come on
 * different sockets, so either may be read first: the engine is attached once both are in.
 */
type Phase = 'waiting-hello' | 'handshaking' | 'attached' | 'refused';

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

export class RankLink implements VllmEngineLink {
  readonly rank: number;
  readonly #identity: Buffer;
  readonly #bridge: VllmBridge;
  readonly #options: RankLinkOptions;
  #input: Router | null = null;
  #output: ZmtpPull | null = null;
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
  /** The reader of the attached engine's outputs (a new one per engine: its layout is confirmed). */
  #reader: OutputsReader | null = null;
  readonly #sink: OutputsSink;
  /** The layout --vllm-version pins, or null (auto). */
  readonly #pinned: VllmLayout | null;

  constructor(bridge: VllmBridge, rank: number, options: RankLinkOptions) {
    this.rank = rank;
    this.#identity = engineIdentity(rank);
    this.#bridge = bridge;
    this.#options = options;
    this.#pinned = options.version === AUTO_VLLM_VERSION ? null : getVllmLayout(options.version);
    this.#sink = {
      output: (o) => bridge.output(o, rank),
      outputFailed: (o, error) => {
        this.#undecodable('an output did not decode: its request failed', error);
        bridge.outputFailed(o, rank);
      },
      messageFailed: (body, at, error) => {
        this.#undecodable('a message broke off: the requests it named failed', error);
        bridge.messageFailed(body, at, rank);
      },
      partFailed: (part, error) => {
        this.#undecodable(`${part} did not decode and was skipped`, error);
        bridge.partFailed();
      },
      schedulerStats: (s) => bridge.schedulerStats(s, rank),
      utility: (callId, failure, value) => this.#utilityReply(callId, failure, value),
      wave: (_engineIndex, complete, start) => bridge.wave(rank, complete, start),
      engineDead: () => this.#engineLost('the engine sent ENGINE_CORE_DEAD'),
      end: () => bridge.outputsDone(),
    };
  }

  /** Binds the rank's data sockets (their endpoints go in its init). */
  async start(): Promise<void> {
    this.#dataReady = this.#openData();
    await this.#dataReady;
  }

  close(): void {
    this.#closed = true;
    this.#stopPing();
    this.#failCalls(new RS_ERR_ENGINE_DEAD('the bridge is stopping'));
    this.#input?.close();
    this.#output?.close();
  }

  // ---- VllmEngineLink ------------------------------------------------------------------------------

  add(request: BridgeAdd): void {
    const payload = encodeAdd(this.#layout(), request, this.#writer);
    this.#sendInput(RequestType.Add, payload);
  }

  abort(ids: readonly string[]): void {
    this.#sendInput(RequestType.Abort, encodeAbort(ids));
  }

  startDpWave(wave: number, exclude: number | null): void {
    this.#sendInput(RequestType.StartDpWave, encodeStartDpWave(wave, exclude));
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

  /** The layout requests go out in: the reader's (confirmed, or the registration's guess). */
  #layout(): VllmLayout {
    const layout = this.#reader?.layout;
    if (layout === undefined) throw new RS_ERR_ENGINE_DEAD('no vLLM engine is attached');
    return layout;
  }

  // ---- sockets -------------------------------------------------------------------------------------

  /**
   * Binds a fresh input ROUTER and output PULL on ephemeral ports (their endpoints go in the init).
   * The PULL is ringserve's own (zmtp-pull.ts): the engine's outputs are read without a Buffer
   * with a finalizer per frame.
   */
  async #openData(): Promise<void> {
    this.#input?.close();
    this.#output?.close();
    const host = hostPart(this.#options.address);
    const input = new Router({ ...socketOptions(this.#options.address), handover: true });
    let output: ZmtpPull | null = null;
    try {
      await input.bind(`tcp://${host}:0`);
      output = await ZmtpPull.bind(this.#options.address, {
        onMessage: (frames) => this.#onOutput(output!, frames),
        onPeerError: (error) =>
          this.#options.log('error', 'a connection to the vLLM output socket was closed', {
            rank: this.rank,
            err: error,
          }),
      });
    } finally {
      // Closed meanwhile (or a bind failed): nothing of these sockets may outlive the link.
      if (this.#closed || output === null) {
        input.close();
        output?.close();
      }
    }
    if (this.#closed) return;
    this.#input = input;
    this.#output = output;
    this.#readerParked = false;
    this.#inputEndpoint = input.lastEndpoint ?? '';
    this.#outputEndpoint = output.endpoint;
    this.#inputQueue = new SendQueue(
      (frames) => input.send(frames),
      (error) => this.#options.log('error', 'vLLM input socket send failed', { err: error }),
    );
    void this.#readInput(input);
  }

  #sendInput(type: number, payload: Buffer): void {
    if (this.#phase !== 'attached' || this.#inputQueue === null) {
      throw new RS_ERR_ENGINE_DEAD('no vLLM engine is attached');
    }
    this.#inputQueue.push([this.#identity, REQUEST_TYPE_FRAMES[type]!, payload]);
  }

  /** A handshake message from this rank's identity (bridge-link.ts read and decoded it). */
  async onHandshake(message: HandshakeMessage): Promise<void> {
    const log = this.#options.log;
    if (message.local || !message.headless) {
      log('warn', 'a handshake from an engine that is not headless was ignored', {
        rank: this.rank,
        local: message.local,
        headless: message.headless,
      });
      return;
    }
    if (message.status === 'HELLO') {
      if (this.#phase === 'attached') this.#engineLost('a new engine said HELLO');
      else if (this.#phase === 'handshaking') this.#rebind();
      await this.#dataReady;
      this.#registration = null;
      this.#readySeen = false;
      this.#phase = 'handshaking';
      const init = encodeInit({
        inputs: [this.#inputEndpoint],
        outputs: [this.#outputEndpoint],
        parallelConfig: this.#options.dpGroup,
      });
      await this.#options.sendHandshake(this.#identity, init);
      log('info', 'vLLM engine said HELLO; sent the socket addresses', {
        rank: this.rank,
        inputs: this.#inputEndpoint,
        outputs: this.#outputEndpoint,
      });
      return;
    }
    if (this.#phase === 'refused') return;
    if (this.#phase !== 'handshaking') {
      log('error', 'vLLM engine said READY without a HELLO first: ignored', {
        rank: this.rank,
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
          this.#registration = decodeRegistration(payload);
        } catch (error) {
          this.#refuse(`its registration did not decode (${(error as Error).message})`);
          continue;
        }
        this.#attachWhenComplete();
      }
    } catch (error) {
      if (!this.#closed && input === this.#input)
        this.#options.log('error', 'vLLM input socket failed', { err: error });
    }
  }

  /** One output message of the engine (every frame of it). */
  #onOutput(output: ZmtpPull, frames: Buffer[]): void {
    if (output !== this.#output) return;
    this.#lastHeard = Date.now();
    const reader = this.#reader;
    if (this.#phase !== 'attached' || reader === null) return;
    const confirmed = reader.confirmed;
    try {
      reader.read(frames, this.#sink);
    } catch (error) {
      if (error instanceof RS_ERR_VLLM_LAYOUT) this.#refuse(error.message);
      else this.#options.log('error', 'a vLLM output message was dropped', { err: error });
    }
    if (!confirmed && reader.confirmed) this.#layoutConfirmed(reader.layout);
    this.#bridge.notify();
    const room = this.#bridge.backlogRoom();
    if (room !== null && output === this.#output) this.#waitForRoom(output, room);
  }

  /**
   * Stops reading outputs while the bridge's backlog drains: the engine is not silent meanwhile,
   * we are, so the liveness deadline restarts when reading does.
   */
  #waitForRoom(output: ZmtpPull, room: Promise<void>): void {
    this.#readerParked = true;
    output.pause();
    void room.then(() => {
      if (output !== this.#output) return;
      this.#readerParked = false;
      this.#lastHeard = Date.now();
      output.resume();
    });
  }

  // ---- engine lifecycle ------------------------------------------------------------------------------

  #attach(registration: Registration): void {
    const log = this.#options.log;
    const size = registration.dataParallelSize ?? 1;
    if (size !== 1 && size !== this.#options.dataParallelSize) {
      this.#refuse(
        `rank ${this.rank} registered data_parallel_size ${size}, where this bridge fronts ${this.#options.dataParallelSize} ranks (--data-parallel-size)`,
        false,
      );
      return;
    }
    const guess = guessLayout(registration);
    const layout = this.#pinned ?? guess.layout;
    if (this.#pinned !== null && this.#pinned !== guess.layout) {
      log('warn', 'the registration suggests another vLLM layout than --vllm-version pins', {
        vllm_version: registration.vllmVersion,
        pinned: this.#pinned.name,
        suggested: guess.layout.name,
        why: guess.why,
      });
    }
    this.#reader = new OutputsReader(layout, this.#pinned === null ? 'auto' : 'pinned');
    this.#phase = 'attached';
    this.#lastHeard = Date.now();
    this.#bridge.attach(this.rank, this, {
      maxModelLen: registration.maxModelLen,
      numGpuBlocks: registration.numGpuBlocks,
      vllmVersion: registration.vllmVersion,
      dataParallelSize: registration.dataParallelSize ?? 1,
      layout,
    });
    log('info', 'vLLM engine READY', {
      rank: this.rank,
      data_parallel_size: registration.dataParallelSize,
      vllm_version: registration.vllmVersion,
      vllm_layout: layout.name,
      layout_from: this.#pinned === null ? guess.why : '--vllm-version',
      max_model_len: registration.maxModelLen,
      num_gpu_blocks: registration.numGpuBlocks,
      dtype: registration.dtype,
      registration_keys: registration.keys,
    });
    this.#startPing();
  }

  #layoutConfirmed(layout: VllmLayout): void {
    this.#bridge.layoutConfirmed(this.rank, layout);
    this.#options.log('info', "vLLM layout confirmed by the engine's first output", {
      vllm_layout: layout.name,
      series: layout.series,
      output_fields: layout.output.length,
    });
    // Not a log record: scripts and tests read the layout in use from this line on stderr.
    console.error(`ringserve: vLLM engine speaks layout ${layout.name} (vLLM ${layout.series})`);
  }

  /**
   * An engine none of the layouts fits: its requests fail, nothing more is taken from it, /health
   * answers 503 with `why` until an engine says HELLO again.
   */
  #refuse(why: string, layout = true): void {
    const reason = layout
      ? `the vLLM engine was refused: ${why}; layouts: ${describeLayouts()}`
      : `the vLLM engine was refused: ${why}`;
    this.#options.log(
      'error',
      layout ? 'vLLM engine refused: no message layout fits it' : 'vLLM engine refused',
      { rank: this.rank, reason },
    );
    this.#phase = 'refused';
    this.#reader = null;
    this.#stopPing();
    this.#failCalls(layout ? new RS_ERR_VLLM_LAYOUT(why) : new RS_ERR_VLLM_HANDSHAKE(why));
    this.#bridge.detach(this.rank, reason);
    // Fresh data sockets: nothing more of the refused engine arrives.
    this.#rebind();
  }

  /** Counted and logged; the requests concerned already failed. */
  #undecodable(what: string, error: Error): void {
    this.#options.log('warn', `vLLM engine message: ${what}`, { err: error });
  }

  /** The engine is dead or silent: fail what it held and wait for the next HELLO. */
  #engineLost(why: string): void {
    if (this.#phase === 'waiting-hello' || this.#phase === 'refused') return;
    const wasAttached = this.#phase === 'attached';
    this.#phase = 'waiting-hello';
    this.#reader = null;
    this.#stopPing();
    this.#failCalls(new RS_ERR_ENGINE_DEAD(why));
    if (wasAttached)
      this.#bridge.detach(
        this.rank,
        `the vLLM engine of rank ${this.rank} was lost (${why}); waiting for a new one`,
      );
    this.#options.log(
      'error',
      'vLLM engine lost: its requests in flight failed; waiting for a new HELLO',
      { rank: this.rank, reason: why },
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

  #utilityReply(callId: number | bigint, failure: string | null, value: unknown): void {
    // The bridge's own call ids are small numbers: a bigint one is not ours.
    if (typeof callId !== 'number') return;
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
export function socketOptions(address: string) {
  return { sendHighWaterMark: 0, receiveHighWaterMark: 0, ipv6: address.includes(':') };
}

/** An IPv6 literal goes in brackets in a tcp:// endpoint. */
export function hostPart(address: string): string {
  return address.includes(':') && !address.startsWith('[') ? `[${address}]` : address;
}
