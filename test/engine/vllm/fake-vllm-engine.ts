/**
 * A tiny headless "vLLM engine" for the bridge's tests, built from the codec (src/engine/vllm/): it
 * dials the bridge as `vllm serve --headless` does (HELLO, registration, READY), answers utility
 * calls, and every few milliseconds emits one token per running request from a formula the test can
 * recompute: token i of a prompt summing to S is (S + 7i) % 500 + 1, its logprob -(i + 1) / 16,
 * routing row of position p, layer l, k-th expert (p + 3l + k) % 16 over `layers` layers, the
 * prompt's rows with the first token (from routed_experts_prompt_start), then one per token. It
 * records every ADD, ABORT and utility call, and can die loudly (ENGINE_CORE_DEAD) or silently.
 */
import { Dealer, Push } from 'zeromq';
import {
  decodeInit,
  encodeHandshake,
  encodeRegistration,
  engineIdentity,
} from '../../../src/engine/vllm/handshake.js';
import { DEFAULT_VLLM_LAYOUT } from '../../../src/engine/vllm/layouts.js';
import {
  ENGINE_CORE_DEAD,
  encodeUtilityReply,
  OutputRecord,
  OutputsEncoder,
  VllmFinishReason,
} from '../../../src/engine/vllm/outputs.js';
import {
  type DecodedAddRequest,
  decodeAbort,
  decodeAdd,
  decodeUtility,
  RequestType,
} from '../../../src/engine/vllm/requests.js';

const LAYOUT = DEFAULT_VLLM_LAYOUT;

export interface FakeEngineOptions {
  maxModelLen?: number;
  /** Routing layers per row (the card's routed layers, or its hidden layers). */
  layers?: number;
  topk?: number;
  stepMs?: number;
}

interface Running {
  add: DecodedAddRequest;
  sum: number;
  emitted: number;
}

export function expectedToken(prompt: readonly number[], i: number): number {
  const sum = prompt.reduce((a, b) => a + b, 0);
  return ((sum + 7 * i) % 500) + 1;
}

export function expectedExpert(pos: number, layer: number, k: number): number {
  return (pos + 3 * layer + k) % 16;
}

export class FakeVllmEngine {
  readonly adds: DecodedAddRequest[] = [];
  readonly aborts: string[] = [];
  readonly calls: { method: string; args: unknown[] }[] = [];
  paused = false;
  readonly #running = new Map<string, Running>();
  readonly #opts: Required<FakeEngineOptions>;
  #handshake: Dealer | null = null;
  #input: Dealer | null = null;
  #output: Push | null = null;
  #timer: NodeJS.Timeout | null = null;
  #pushing: Promise<void> = Promise.resolve();

  constructor(options: FakeEngineOptions = {}) {
    this.#opts = { maxModelLen: 4096, layers: 3, topk: 4, stepMs: 3, ...options };
  }

  /** Dials `handshake` (tcp://host:port) and resolves once READY is sent. */
  async connect(handshake: string): Promise<void> {
    const id = engineIdentity(0);
    const hs = new Dealer({ routingId: id.toString('latin1'), linger: 0 });
    this.#handshake = hs;
    hs.connect(handshake);
    await hs.send(
      encodeHandshake({ status: 'HELLO', local: false, headless: true, parallelConfigHash: null }),
    );
    const [initFrame] = await hs.receive();
    const init = decodeInit(initFrame!);
    const input = new Dealer({ routingId: id.toString('latin1'), linger: 0 });
    const output = new Push({ linger: 1000 });
    input.connect(init.inputs[0]!);
    output.connect(init.outputs[0]!);
    this.#input = input;
    this.#output = output;
    await input.send(
      encodeRegistration(LAYOUT, {
        maxModelLen: this.#opts.maxModelLen,
        numGpuBlocks: 1000,
        dpStatsAddress: null,
        dtype: 'bfloat16',
        samplingMasks: false,
        unknownKeys: [],
      }),
    );
    await hs.send(
      encodeHandshake({ status: 'READY', local: false, headless: true, parallelConfigHash: null }),
    );
    void this.#read(input);
    this.#timer = setInterval(() => this.#step(), this.#opts.stepMs);
  }

  /** Sends ENGINE_CORE_DEAD, then closes everything. */
  async dieLoudly(): Promise<void> {
    await this.#output?.send(ENGINE_CORE_DEAD);
    this.close();
  }

  /** Stops answering anything, as a SIGKILLed engine does. */
  close(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    this.#handshake?.close();
    this.#input?.close();
    this.#output?.close();
    this.#handshake = this.#input = null;
    this.#output = null;
  }

  get running(): number {
    return this.#running.size;
  }

  async #read(input: Dealer): Promise<void> {
    try {
      for await (const [type, payload] of input) {
        if (type === undefined || payload === undefined) continue;
        this.#onRequest(type[0]!, payload);
      }
    } catch {
      // closed
    }
  }

  #onRequest(type: number, payload: Buffer): void {
    if (type === RequestType.Add) {
      const add = decodeAdd(LAYOUT, payload);
      this.adds.push(add);
      const sum = Array.from(add.promptTokenIds).reduce((a, b) => a + b, 0);
      this.#running.set(add.requestId, { add, sum, emitted: 0 });
    } else if (type === RequestType.Abort) {
      for (const id of decodeAbort(payload)) {
        this.aborts.push(id);
        this.#running.delete(id);
      }
    } else if (type === RequestType.Utility) {
      const call = decodeUtility(payload);
      this.calls.push({ method: call.method, args: call.args });
      let result: unknown = null;
      if (call.method === 'pause_scheduler') this.paused = true;
      else if (call.method === 'resume_scheduler') this.paused = false;
      else if (call.method === 'is_scheduler_paused') result = this.paused;
      else if (call.method === 'reset_prefix_cache') result = true;
      else if (call.method === 'collective_rpc') result = [null];
      this.#push(encodeUtilityReply(LAYOUT, 0, { callId: call.callId, failure: null, result }, 0));
    }
  }

  #push(frames: Buffer[]): void {
    const output = this.#output;
    if (output === null) return;
    this.#pushing = this.#pushing.then(() => output.send(frames)).catch(() => {});
  }

  /** One engine step: a token for every running request. */
  #step(): void {
    if (this.paused || this.#running.size === 0) return;
    const encoder = new OutputsEncoder(LAYOUT, false);
    encoder.begin(0, this.#running.size);
    const { layers, topk } = this.#opts;
    for (const [id, r] of this.#running) {
      const p = r.add.params;
      const prompt = r.add.promptTokenIds;
      const i = r.emitted;
      const o = new OutputRecord();
      o.requestId = id;
      o.tokenIds = new Int32Array([((r.sum + 7 * i) % 500) + 1]);
      o.tokenBytes = new Uint8Array(o.tokenIds.buffer);
      o.tokenCount = 1;
      if (p.logprobs !== null)
        o.logprobBytes = new Uint8Array(new Float32Array([-(i + 1) / 16]).buffer);
      const first = i === 0 ? p.routedExpertsPromptStart : prompt.length + i - 1;
      const rows = i === 0 ? prompt.length - first : 1;
      const ids = new Uint8Array(rows * layers * topk);
      for (let row = 0; row < rows; row++)
        for (let l = 0; l < layers; l++)
          for (let k = 0; k < topk; k++)
            ids[(row * layers + l) * topk + k] = expectedExpert(first + row, l, k);
      o.routedBytes = ids;
      o.routedRows = rows;
      o.routedLayers = layers;
      o.routedTopk = topk;
      r.emitted++;
      if (r.emitted >= p.maxTokens) {
        o.finishReason = VllmFinishReason.Length;
        this.#running.delete(id);
      }
      encoder.output(o);
    }
    this.#push(encoder.end(null, 0, null));
  }
}
