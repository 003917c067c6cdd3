/**
 * MirrorFrontend: an independent vLLM frontend for tests, as vLLM's AsyncMPClient sets one up (VH
 * §2; VE §2-3): it binds a handshake ROUTER, an input ROUTER and an output PULL per client on
 * loopback ephemeral ports, runs the startup handshake with one engine, sends ADD / ABORT /
 * UTILITY / START_DP_WAVE, and collects every output it decodes (each EngineCoreOutput's layout
 * chosen by its element count, the counts kept as evidence). Built only from the mirror's codec.
 */
import { randomBytes } from 'node:crypto';
import { Pull, Router } from 'zeromq';
import {
  type DecodedOutputs,
  decodeOutputs,
  decodeRegistration,
  decodeStatus,
  type EngineCoreOutput,
  type EngineCoreRequest,
  encodeAbort,
  encodeAdd,
  encodeInit,
  encodeStartDpWave,
  encodeUtilityCall,
  type HandshakeStatus,
  isEngineDead,
  type Registration,
  registrationEra,
  type SchedulerStats,
  type UtilityOutput,
} from './codec.js';
import type { Era } from './eras.js';
import { MirrorTimeoutError, SendQueue, withTimeout } from './wait.js';

export interface MirrorFrontendOptions {
  /** The era whose required registration keys the handshake demands; unset: infer it. */
  era?: Era;
  /** Input/output socket pairs, one per API-server client (client_index). */
  clients?: number;
  host?: string;
}

/** An ADD as a test writes it: the prompt, and any EngineCoreRequest field to set. */
export type AddInput = Partial<EngineCoreRequest> & { prompt_token_ids: number[] };

/** A message from output socket `client`. */
export interface Received {
  client: number;
  decoded: DecodedOutputs;
}

interface PendingCall {
  resolve(u: UtilityOutput): void;
}

/** One entry of a position's prompt logprobs, as vLLM's frontend keeps it (a Logprob). */
export interface PromptLogprobEntry {
  tokenId: number;
  logprob: number;
  rank: number;
}

/** A call id as Python draws one (uuid1().int >> 64), with the top bit set: always >= 2^63. */
export function highCallId(): bigint {
  return randomBytes(8).readBigUInt64BE() | (1n << 63n);
}

export class MirrorFrontend {
  readonly received: Received[] = [];
  /** Element counts of every EngineCoreOutput seen. */
  readonly outputLengths = new Set<number>();
  readonly stats: SchedulerStats[] = [];
  /** Messages it could not decode (a malformed injection lands here). */
  readonly errors: Error[] = [];
  hello: HandshakeStatus | null = null;
  ready: HandshakeStatus | null = null;
  registration: Registration | null = null;
  registrationEra: Era | null = null;
  engineIdentity: Buffer | null = null;
  dead = false;
  readonly #byRequest = new Map<string, EngineCoreOutput[]>();
  /** prompt_logprobs of each ADD sent (null: not asked). */
  readonly #promptK = new Map<string, number | null>();
  readonly #calls = new Map<bigint, PendingCall>();
  readonly #listeners = new Set<() => void>();
  readonly #inputs: SendQueue[];
  #nextId = 0;
  #closed = false;

  private constructor(
    readonly handshakeAddress: string,
    readonly inputAddresses: readonly string[],
    readonly outputAddresses: readonly string[],
    readonly era: Era | undefined,
    readonly sockets: { handshake: Router; inputs: Router[]; outputs: Pull[] },
  ) {
    this.#inputs = sockets.inputs.map((r) => new SendQueue((frames) => r.send(frames)));
    sockets.outputs.forEach((pull, client) => void this.#read(pull, client));
  }

  static async open(options: MirrorFrontendOptions = {}): Promise<MirrorFrontend> {
    const host = options.host ?? '127.0.0.1';
    const made: (Router | Pull)[] = [];
    const bind = async <S extends Router | Pull>(s: S): Promise<string> => {
      made.push(s);
      await s.bind(`tcp://${host}:*`);
      return s.lastEndpoint ?? '';
    };
    try {
      const handshake = new Router({ linger: 0 });
      const inputs = Array.from({ length: options.clients ?? 1 }, () => new Router({ linger: 0 }));
      const outputs = inputs.map(() => new Pull({ linger: 0 }));
      const hs = await bind(handshake);
      const ins = await Promise.all(inputs.map(bind));
      const outs = await Promise.all(outputs.map(bind));
      return new MirrorFrontend(hs, ins, outs, options.era, { handshake, inputs, outputs });
    } catch (e) {
      for (const s of made) s.close();
      throw e;
    }
  }

  /** HELLO -> init -> registration (on every input) and READY; resolves with the registration. */
  async runHandshake(timeoutMs = 5000): Promise<Registration> {
    const { handshake, inputs } = this.sockets;
    const [id, hello] = await withTimeout(handshake.receive(), timeoutMs, 'HELLO');
    this.hello = decodeStatus(hello ?? Buffer.alloc(0));
    if (this.hello.status !== 'HELLO') throw new Error(`expected HELLO, got ${this.hello.status}`);
    this.engineIdentity = id ?? null;
    const init = encodeInit({
      addresses: {
        inputs: [...this.inputAddresses],
        outputs: [...this.outputAddresses],
        coordinator_input: null,
        coordinator_output: null,
        frontend_stats_publish_address: null,
      },
      parallel_config: {},
    });
    await handshake.send([id!, init]);
    const [regs, ready] = await withTimeout(
      Promise.all([Promise.all(inputs.map((r) => r.receive())), handshake.receive()]),
      timeoutMs,
      'registration and READY',
    );
    this.ready = decodeStatus(ready[1] ?? Buffer.alloc(0));
    if (this.ready.status !== 'READY') throw new Error(`expected READY, got ${this.ready.status}`);
    const payload = regs[0]?.[1] ?? Buffer.alloc(0);
    this.registration = decodeRegistration(this.era ?? '0.22', payload);
    this.registrationEra = registrationEra(this.registration);
    return this.registration;
  }

  /** Sends an ADD of `era`'s length; resolves with its request_id. */
  async add(era: Era, input: AddInput): Promise<string> {
    const request: EngineCoreRequest = {
      request_id: `mirror-${this.#nextId++}`,
      mm_features: null,
      sampling_params: {},
      pooling_params: null,
      arrival_time: Date.now() / 1000,
      lora_request: null,
      cache_salt: null,
      data_parallel_rank: null,
      ...input,
    };
    this.#promptK.set(request.request_id, request.sampling_params?.prompt_logprobs ?? null);
    await this.sendRaw(encodeAdd(era, request), request.client_index ?? 0);
    return request.request_id;
  }

  abort(ids: readonly string[], client = 0): Promise<void> {
    return this.sendRaw(encodeAbort(ids), client);
  }

  startDpWave(wave: number, exclude: number | null): Promise<void> {
    return this.sendRaw(encodeStartDpWave(wave, exclude));
  }

  /** A utility call with a fresh call id >= 2^63; resolves with the engine's UtilityOutput. */
  async call(
    method: string,
    args: unknown[] = [],
    options: { client?: number; callId?: bigint; timeoutMs?: number } = {},
  ): Promise<UtilityOutput> {
    const client = options.client ?? 0;
    const callId = options.callId ?? highCallId();
    const reply = new Promise<UtilityOutput>((resolve) => this.#calls.set(callId, { resolve }));
    const call = { client_index: client, call_id: callId, method, args };
    await this.sendRaw(encodeUtilityCall(call), client);
    try {
      return await withTimeout(reply, options.timeoutMs ?? 5000, `reply to ${method}`);
    } finally {
      this.#calls.delete(callId);
    }
  }

  /** `frames` to the engine on input `client`, after its routing id. */
  sendRaw(frames: Buffer[], client = 0): Promise<void> {
    const q = this.#inputs[client];
    if (this.engineIdentity === null || q === undefined) {
      return Promise.reject(new Error(`mirror frontend: no engine on input ${client}`));
    }
    return q.push([this.engineIdentity, ...frames]);
  }

  outputsOf(requestId: string): EngineCoreOutput[] {
    return this.#byRequest.get(requestId) ?? [];
  }

  tokensOf(requestId: string): number[] {
    return this.outputsOf(requestId).flatMap((o) => o.new_token_ids);
  }

  /**
   * The request's prompt logprobs as vLLM's frontend assembles them (vllm/v1/engine/logprobs.py
   * `_update_prompt_logprobs`, vllm/logprobs.py): null for position 0, then every row of every
   * output's new_prompt_logprobs_tensors in order, each cut to 1 + its prompt_logprobs entries
   * (the prompt token with its rank, then candidates ranked 1..). null when it did not ask.
   */
  promptLogprobsOf(requestId: string): (PromptLogprobEntry[] | null)[] | null {
    const k = this.#promptK.get(requestId) ?? null;
    if (k === null) return null;
    const positions: (PromptLogprobEntry[] | null)[] = [null];
    for (const o of this.outputsOf(requestId)) {
      const t = o.new_prompt_logprobs_tensors;
      if (t === null || t === undefined) continue;
      t.tokenIds.forEach((ids, r) => {
        const n = k === -1 ? ids.length : Math.min(ids.length, 1 + k);
        positions.push(
          ids.slice(0, n).map((tokenId, e) => ({
            tokenId,
            logprob: t.logprobs[r]![e]!,
            rank: e === 0 ? t.ranks[r]! : e,
          })),
        );
      });
    }
    return positions;
  }

  /**
   * Resolves once `pred` holds, checked after every message and every 2 ms (so it may watch the
   * engine's records too); bounded by `timeoutMs`.
   */
  until(pred: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
    if (pred()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = () => {
        if (!pred()) return;
        cleanup();
        resolve();
      };
      const poll = setInterval(check, 2);
      const timer = setTimeout(() => {
        cleanup();
        reject(new MirrorTimeoutError(what, timeoutMs));
      }, timeoutMs);
      const cleanup = () => {
        clearInterval(poll);
        clearTimeout(timer);
        this.#listeners.delete(check);
      };
      this.#listeners.add(check);
    });
  }

  /** The outputs of `requestId` once one carries a finish_reason. */
  async finished(requestId: string, timeoutMs = 5000): Promise<EngineCoreOutput[]> {
    const done = () => this.outputsOf(requestId).some((o) => o.finish_reason != null);
    await this.until(done, `finish of ${requestId}`, timeoutMs);
    return this.outputsOf(requestId);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#listeners.clear();
    const { handshake, inputs, outputs } = this.sockets;
    for (const s of [handshake, ...inputs, ...outputs]) s.close();
  }

  async #read(pull: Pull, client: number): Promise<void> {
    try {
      for await (const frames of pull) this.#onFrames(frames, client);
    } catch {
      // closed
    }
  }

  #onFrames(frames: Buffer[], client: number): void {
    if (isEngineDead(frames)) this.dead = true;
    else {
      try {
        this.#record(decodeOutputs(frames), client);
      } catch (e) {
        this.errors.push(e as Error);
      }
    }
    for (const listener of [...this.#listeners]) listener();
  }

  #record(decoded: DecodedOutputs, client: number): void {
    this.received.push({ client, decoded });
    for (const n of decoded.outputLengths) this.outputLengths.add(n);
    const m = decoded.message;
    if (m.scheduler_stats !== null) this.stats.push(m.scheduler_stats);
    for (const o of m.outputs) {
      this.#byRequest.set(o.request_id, [...this.outputsOf(o.request_id), o]);
    }
    if (m.utility_output !== null)
      this.#calls.get(m.utility_output.call_id)?.resolve(m.utility_output);
  }
}
