/**
 * MirrorEngine: an independent headless vLLM engine for tests. It dials a frontend's handshake
 * socket as `vllm serve --headless` does (VH §2; VE §3): HELLO, takes the init, connects a DEALER
 * to each input and a PUSH to each output, sends its era's registration on every input, READY.
 * Then every `stepMs` it emits tokens from the formulas in formula.ts for every running request,
 * answers utility calls, and records everything it decoded. Built only from the mirror's codec.
 */
import { Dealer, Push } from 'zeromq';
import {
  type DecodedAdd,
  decodeAbort,
  decodeAdd,
  decodeInit,
  decodeStartDpWave,
  decodeUtilityCall,
  ENGINE_CORE_DEAD,
  encodeOutputs,
  encodeRegistration,
  encodeStatus,
  engineIdentity,
  type HandshakeStatus,
  type InitMessage,
  type Registration,
  RequestType,
  type UtilityCall,
} from './codec.js';
import { type Addressed, EngineControl, type PauseMode } from './engine-control.js';
import { registrationFor } from './engine-registration.js';
import { LiveRequest, type StepShape, stepRequest } from './engine-step.js';
import { DEFAULT_VLLM_VERSION, type Era, eraAtLeast } from './eras.js';
import type { MirrorNixl } from './nixl.js';
import { SendQueue, withTimeout } from './wait.js';

export * from './formula.js';

export interface MirrorEngineOptions {
  era: Era;
  maxModelLen?: number;
  /** Routed layers per routing row. */
  layers?: number;
  /** Experts per token. */
  topk?: number;
  /** Experts of the model: > 256 makes routed experts '<u2'. */
  numExperts?: number;
  stepMs?: number;
  /** Engine-wide, as --enable-return-routed-experts: every request carries them. */
  returnRoutedExperts?: boolean;
  /** Engine-wide, as --enable-return-sampling-mask; era '0.28' and later only. */
  returnSamplingMask?: boolean;
  vocab?: number;
  /** Tokens per step after the first (speculative decoding accepts several). */
  tokensPerStep?: number;
  /** K+1 of the step's widest request for every request that asked logprobs, as vLLM. */
  stepWideLogprobs?: boolean;
  /** Prompt logprobs n positions a step before the first token (0: all with it, as vLLM). */
  promptLogprobsChunk?: number;
  /** The prompt-logprob K the engine computes whatever was asked (Model Runner V2: 0). */
  promptLogprobsTopK?: number | null;
  /** torch dtype of prompt-logprob ids and ranks: 'int32' (vLLM's default) or 'int64'. */
  promptLogprobsDtype?: 'int32' | 'int64';
  /** The DP rank: the DEALER identity and data_parallel_rank. */
  rank?: number;
  vllmVersion?: string;
  numGpuBlocks?: number;
  blockSize?: number;
  /** Registration keys to set (or, with undefined, to drop) over the era's. */
  registration?: Readonly<Record<string, unknown>>;
  /** vLLM's NixlConnector (nixl.ts): P/D handles in and out; absent: kv_transfer_params ignored. */
  nixl?: MirrorNixl | null;
  /** A data-parallel rank's hooks (dp-engine.ts): then a DP group steps it, it has no timer. */
  dp?: EngineDpHooks | null;
}

/**
 * What a DP rank (dp-engine.ts) changes in an engine: it joins its group between the init and the
 * registration (vLLM's core.py @ 00080ee1, VDP's source A: `EngineCoreProc.__init__` calls
 * `_init_data_parallel` inside the handshake, before the model, the registration and READY), adds
 * parallel_config_hash to READY, handles START_DP_WAVE, stamps its wave into SchedulerStats, and
 * holds its input while blocked in a collective (its busy loop reads input only between steps).
 */
export interface EngineDpHooks {
  beforeRegister(init: InitMessage): Promise<void>;
  /** READY's parallel_config_hash, or null to send none. */
  readyHash: string | null;
  startDpWave(wave: { wave: number; exclude: number | null }): void;
  currentWave(): number;
  /** Runs `handle` (one decoded input message) now, or later. */
  deliver(handle: () => void): void;
}

const LINGER_MS = 500;

export class MirrorEngine {
  readonly adds: DecodedAdd[] = [];
  readonly aborts: string[] = [];
  readonly calls: UtilityCall[] = [];
  readonly waves: { wave: number; exclude: number | null }[] = [];
  /** What the engine could not take: a malformed message, a duplicate id, a bad argument. */
  readonly errors: Error[] = [];
  init: InitMessage | null = null;
  registration: Registration | null = null;
  readonly #shape: StepShape;
  readonly #opts: Required<
    Omit<MirrorEngineOptions, 'registration' | 'vllmVersion' | 'nixl' | 'dp'>
  >;
  readonly #version: string;
  readonly #overrides: Readonly<Record<string, unknown>>;
  readonly #control: EngineControl;
  readonly #sockets: (Dealer | Push)[] = [];
  #outputs: SendQueue[] = [];
  #timer: NodeJS.Timeout | null = null;
  #step = 0;
  readonly #dp: EngineDpHooks | null;
  #closed = false;

  constructor(options: MirrorEngineOptions) {
    this.#opts = {
      maxModelLen: 4096,
      layers: 3,
      topk: 4,
      numExperts: 16,
      stepMs: 3,
      returnRoutedExperts: false,
      returnSamplingMask: false,
      vocab: 510,
      tokensPerStep: 1,
      stepWideLogprobs: false,
      promptLogprobsChunk: 0,
      promptLogprobsTopK: null,
      promptLogprobsDtype: 'int32',
      rank: 0,
      numGpuBlocks: 1000,
      blockSize: 16,
      ...options,
    };
    this.#dp = options.dp ?? null;
    this.#version = options.vllmVersion ?? DEFAULT_VLLM_VERSION[options.era];
    this.#overrides = options.registration ?? {};
    this.#shape = { ...this.#opts, nixl: options.nixl ?? null };
    this.#control = new EngineControl({
      era: options.era,
      reply: (call, failure, value) => this.#reply(call, failure, value),
      emit: (outputs) => this.#emit(outputs),
    });
  }

  get era(): Era {
    return this.#opts.era;
  }

  get running(): number {
    return this.#control.running.size;
  }

  get waiting(): number {
    return this.#control.waiting.length;
  }

  get paused(): PauseMode | null {
    return this.#control.paused;
  }

  /** Dials `handshake` (tcp://host:port); resolves once READY is sent. */
  async connect(handshake: string, timeoutMs = 5000): Promise<void> {
    const id = engineIdentity(this.#opts.rank);
    // zeromq takes a Buffer routing id (setStringOption accepts one); typed as a string.
    const routingId = id as unknown as string;
    const hs = new Dealer({ routingId, linger: LINGER_MS });
    this.#sockets.push(hs);
    hs.connect(handshake);
    await hs.send(encodeStatus({ status: 'HELLO', local: false, headless: true }));
    const [initFrame] = await withTimeout(hs.receive(), timeoutMs, 'init from the frontend');
    this.init = decodeInit(initFrame ?? Buffer.alloc(0));
    if (this.#dp !== null) {
      await withTimeout(this.#dp.beforeRegister(this.init), timeoutMs, 'DP group rendezvous');
    }
    if (this.#closed) throw new Error('mirror engine: closed during the handshake');
    const { inputs, outputs } = this.init.addresses;
    this.#outputs = outputs.map((address) => {
      const push = new Push({ linger: LINGER_MS });
      this.#sockets.push(push);
      push.connect(address);
      return new SendQueue((frames) => push.send(frames));
    });
    this.registration = registrationFor({
      ...this.#opts,
      vllmVersion: this.#version,
      overrides: this.#overrides,
    });
    const payload = encodeRegistration(this.registration);
    for (const address of inputs) {
      const input = new Dealer({ routingId, linger: LINGER_MS });
      this.#sockets.push(input);
      input.connect(address);
      await input.send(payload);
      void this.#read(input);
    }
    const ready: HandshakeStatus = { status: 'READY', local: false, headless: true };
    if (this.#dp?.readyHash != null) ready.parallel_config_hash = this.#dp.readyHash;
    await hs.send(encodeStatus(ready));
    if (this.#dp === null) this.#timer = setInterval(() => this.step(), this.#opts.stepMs);
  }

  /** Puts `frames` on output socket `clientIndex` as they are: malformed messages for tests. */
  sendRaw(frames: Buffer[], clientIndex = 0): Promise<void> {
    return this.#send(clientIndex, frames);
  }

  /** ENGINE_CORE_DEAD on every output, as a dying engine loop sends it, then close(). */
  async dieLoudly(): Promise<void> {
    await Promise.all(this.#outputs.map((q) => q.push([ENGINE_CORE_DEAD]).catch(() => {})));
    this.close();
  }

  /** Stops everything it started, silently, as a killed engine. */
  close(): void {
    this.#closed = true;
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    for (const s of this.#sockets.splice(0)) s.close();
    this.#outputs = [];
  }

  #send(clientIndex: number, frames: Buffer[]): Promise<void> {
    const q = this.#outputs[clientIndex];
    if (q === undefined) {
      // vLLM's output thread dies on an unknown client_index (VE §6): nothing more comes out.
      this.errors.push(new Error(`mirror engine: no output socket for client ${clientIndex}`));
      return Promise.resolve();
    }
    return q.push(frames).catch((e: unknown) => {
      if (!this.#closed) this.errors.push(e as Error);
    });
  }

  async #read(input: Dealer): Promise<void> {
    try {
      for await (const [type, payload, ...aux] of input) {
        if (this.#dp === null) this.#onMessage(type, payload, aux);
        else this.#dp.deliver(() => this.#onMessage(type, payload, aux));
      }
    } catch {
      // closed
    }
  }

  #onMessage(type: Buffer | undefined, payload: Buffer | undefined, aux: Buffer[]): void {
    try {
      if (type?.length !== 1 || payload === undefined) throw new Error('not [type, payload, ...]');
      const kind = type[0];
      if (kind === RequestType.ADD) this.#onAdd(decodeAdd(this.era, payload, aux));
      else if (kind === RequestType.ABORT) this.#onAbort(decodeAbort(payload));
      else if (kind === RequestType.START_DP_WAVE) {
        const wave = decodeStartDpWave(payload);
        this.waves.push(wave);
        this.#dp?.startDpWave(wave);
      } else if (kind === RequestType.UTILITY) {
        const call = decodeUtilityCall(payload);
        this.calls.push(call);
        this.#control.call(call);
      } else throw new Error(`request type byte ${kind}`);
    } catch (e) {
      this.errors.push(e as Error);
    }
  }

  #onAdd(add: DecodedAdd): void {
    this.adds.push(add);
    const r = add.request;
    const promptLen = r.prompt_token_ids?.length ?? 0;
    const start = r.sampling_params?.routed_experts_prompt_start ?? 0;
    if (promptLen === 0) throw new Error(`request ${r.request_id}: no prompt_token_ids`);
    if (this.#opts.returnRoutedExperts && start >= promptLen) {
      // vLLM's scheduler dies of it (VE §6); the mirror records it.
      throw new Error(
        `request ${r.request_id}: routed_experts_prompt_start ${start} >= ${promptLen}`,
      );
    }
    const sp = r.sampling_params ?? {};
    if (this.#opts.returnSamplingMask && eraAtLeast(this.era, '0.28')) {
      // VM §10: with masks on, vLLM refuses temperature <= 0 and top_k <= 0 (its default 0).
      // The mirror serves the request anyway and records what vLLM would not take.
      const temperature = sp.temperature ?? 1;
      const topK = sp.top_k ?? 0;
      if (!(temperature > 0 && topK > 0)) {
        const why = `temperature ${temperature}, top_k ${topK}: vLLM refuses it with sampling masks on`;
        this.errors.push(new Error(`request ${r.request_id}: ${why}`));
      }
    }
    this.#control.add(new LiveRequest(r, performance.now() / 1000));
  }

  #onAbort(ids: string[]): void {
    this.aborts.push(...ids);
    this.#control.abort(ids);
  }

  /** Echoes the call id as it came (a uint64 stays one): [call_id, failure, [nil, value] | nil]. */
  #reply(call: UtilityCall, failure: string | null, value: unknown): void {
    const frames = encodeOutputs(this.era, {
      engine_index: this.#opts.rank,
      utility_output: {
        call_id: call.call_id,
        failure_message: failure,
        result: failure === null ? { value } : null,
      },
      timestamp: performance.now() / 1000,
    });
    void this.#send(call.client_index, frames);
  }

  /** One step: an output for every running request; false when it had none to run. */
  step(): boolean {
    if (!this.#control.admit()) return false;
    const running = [...this.#control.running.values()];
    const now = performance.now() / 1000;
    const asked = running.map((l) => l.logprobs).filter((k): k is number => k !== null);
    const widest = Math.max(0, ...asked);
    const outputs: Addressed[] = [];
    for (const live of running) {
      const width = 1 + (this.#opts.stepWideLogprobs ? widest : (live.logprobs ?? 0));
      const { output, finished } = stepRequest(this.#shape, live, now, width);
      if (finished) this.#control.finish(live.request.request_id);
      outputs.push({ output, client: live.clientIndex });
    }
    this.#emit(outputs);
    this.#control.drained();
    return true;
  }

  /** One message per client, scheduler stats on the first (scheduler.py update_from_output). */
  #emit(outputs: readonly Addressed[]): void {
    const byClient = new Map<number, Addressed['output'][]>([[outputs[0]?.client ?? 0, []]]);
    for (const { output, client } of outputs) {
      byClient.set(client, [...(byClient.get(client) ?? []), output]);
    }
    const stats = this.#control.stats(this.#step++, this.#opts.numGpuBlocks * this.#opts.blockSize);
    if (this.#dp !== null) stats.current_wave = this.#dp.currentWave();
    let first = true;
    for (const [client, group] of byClient) {
      const frames = encodeOutputs(this.era, {
        engine_index: this.#opts.rank,
        outputs: group,
        scheduler_stats: first ? stats : null,
        timestamp: performance.now() / 1000,
      });
      first = false;
      void this.#send(client, frames);
    }
  }
}
