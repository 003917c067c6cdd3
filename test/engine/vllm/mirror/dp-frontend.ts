/**
 * MirrorDpFrontend: an independent vLLM frontend for N data-parallel engine ranks, without a DP
 * coordinator. "VDP §n" tags the DP notes (vLLM's DP protocol researched from its 2026 source).
 *
 * - One handshake ROUTER for every rank, whose identity is its DP rank as 2 bytes LE; one shared
 *   input ROUTER and one output PULL (a single client): the same addresses go to every rank
 *   (VDP §1).
 * - INIT's parallel_config: the DP master keys (data_parallel_master_ip, data_parallel_master_port,
 *   _data_parallel_master_port_list, data_parallel_size) when `masterConfig` (vLLM sends them for
 *   MoE DP only, otherwise `{}`: VDP §1). The ports are free ports of `host` picked at open(), five
 *   for the list as vLLM's get_open_ports_list(5) (VDP §1).
 * - Startup waits for N registrations on the input ROUTER and N READYs; with N > 1 and the master
 *   keys sent, every READY must carry the same parallel_config_hash (vLLM compares it with its own
 *   compute_hash, which a non-Python frontend cannot compute: VDP §1).
 * - ADD to one rank (by identity; `data_parallel_rank`, or least in-flight as vLLM's engine_inflight
 *   with a rotating start, VDP §2), ABORT to the owning rank only, UTILITY to every rank, each with
 *   its own call id (VDP §2).
 * - Waves, as a frontend without a coordinator must keep them (VDP §4, SMG PR #2078 in VDP §6):
 *   {current, running}; an ADD while not running sets running and sends START_DP_WAVE
 *   [current, target] to every other rank (after the ADD); wave_complete(w) with w >= current sets
 *   current = w + 1, running = false; and, the race VDP §4 describes (the group finished the wave
 *   while an ADD was on its way, so nobody woke the others), when requests are still outstanding
 *   it wakes every rank with START_DP_WAVE [current, nil] and sets running again.
 * - Outputs are recorded per engine_index; completion is tracked from finish_reason (no
 *   finished_requests without a coordinator, VDP §2).
 */
import { createServer, type Server } from 'node:net';
import { Pull, Router } from 'zeromq';
import {
  type DecodedOutputs,
  decodeOutputs,
  decodeRegistration,
  decodeStatus,
  type EngineCoreOutput,
  type EngineCoreOutputs,
  type EngineCoreRequest,
  type Era,
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
import { type AddInput, highCallId } from './frontend.js';
import { MirrorTimeoutError, SendQueue, withTimeout } from './wait.js';

export type { AddInput };

export interface MirrorDpFrontendOptions {
  /** data_parallel_size: the ranks 0..size-1 it waits for. */
  size: number;
  /** The era of the ADDs it sends and of the registrations it demands; unset: the registrations'. */
  era?: Era;
  host?: string;
  /** Send the DP master keys in INIT (MoE DP, VDP §1); default true when size > 1. */
  masterConfig?: boolean;
  /**
   * Wave bookkeeping. 'auto' (default): on when a registration reports data_parallel_size > 1 (as
   * SMG arms it, VDP §6), or, when no registration has the key, when `masterConfig` is on.
   * false: a frontend that never sends START_DP_WAVE.
   */
  waves?: boolean | 'auto';
  /** Wake every rank on a wave_complete that leaves requests outstanding (default true). */
  wakeOnRace?: boolean;
}

/** START_DP_WAVE messages it sent: to which rank, with what. */
export interface WaveSent {
  to: number;
  wave: number;
  exclude: number | null;
  why: 'add' | 'race' | 'start_wave' | 'manual';
}

interface PendingCall {
  resolve(u: UtilityOutput): void;
}

function rankOf(identity: Buffer | undefined): number {
  if (identity?.length !== 2) throw new Error(`identity of ${identity?.length ?? 0} bytes, not 2`);
  return identity.readUInt16LE(0);
}

function identityOf(rank: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(rank);
  return b;
}

/** `n` distinct free TCP ports of `host` (held together while picked, then released). */
export async function freePorts(host: string, n: number): Promise<number[]> {
  const servers: Server[] = [];
  try {
    const ports: number[] = [];
    for (let i = 0; i < n; i++) {
      const srv = createServer();
      servers.push(srv);
      await new Promise<void>((resolve, reject) => {
        srv.once('error', reject);
        srv.listen(0, host, () => resolve());
      });
      const address = srv.address();
      if (address === null || typeof address === 'string') throw new Error('no port');
      ports.push(address.port);
    }
    return ports;
  } finally {
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  }
}

export class MirrorDpFrontend {
  readonly hellos = new Map<number, HandshakeStatus>();
  readonly readies = new Map<number, HandshakeStatus>();
  readonly registrations = new Map<number, Registration>();
  /** Every decoded message, with its engine_index. */
  readonly received: EngineCoreOutputs[] = [];
  readonly stats = new Map<number, SchedulerStats[]>();
  readonly waveCompletes: { engine: number; wave: number }[] = [];
  readonly startWaves: { engine: number; wave: number }[] = [];
  readonly wavesSent: WaveSent[] = [];
  /** Aborted ids it knew no owner of (dropped, as vLLM's client drops them). */
  readonly droppedAborts: string[] = [];
  readonly errors: Error[] = [];
  dead = 0;
  /** Wave state (VDP §4). */
  currentWave = 0;
  running = false;
  wavesArmed = false;
  era: Era | undefined;
  readonly #owner = new Map<string, number>();
  readonly #outstanding = new Set<string>();
  readonly #inflight: number[];
  readonly #byRequest = new Map<string, { engine: number; output: EngineCoreOutput }[]>();
  readonly #calls = new Map<bigint, PendingCall>();
  readonly #listeners = new Set<() => void>();
  readonly #input: SendQueue;
  readonly #handshakeOut: SendQueue;
  readonly #wakeOnRace: boolean;
  readonly #waves: boolean | 'auto';
  #held: Buffer[][] | null = null;
  #nextId = 0;
  #nextPick = 0;
  #closed = false;

  private constructor(
    readonly size: number,
    readonly handshakeAddress: string,
    readonly inputAddress: string,
    readonly outputAddress: string,
    /** The parallel_config INIT carries. */
    readonly parallelConfig: Record<string, unknown>,
    readonly sockets: { handshake: Router; input: Router; output: Pull },
    options: MirrorDpFrontendOptions,
  ) {
    this.era = options.era;
    this.#wakeOnRace = options.wakeOnRace ?? true;
    this.#waves = options.waves ?? 'auto';
    this.#inflight = Array.from({ length: size }, () => 0);
    this.#input = new SendQueue((frames) => sockets.input.send(frames));
    this.#handshakeOut = new SendQueue((frames) => sockets.handshake.send(frames));
    void this.#readHandshake();
    void this.#readInput();
    void this.#readOutput();
  }

  static async open(options: MirrorDpFrontendOptions): Promise<MirrorDpFrontend> {
    const { size } = options;
    if (!Number.isInteger(size) || size < 1) throw new Error(`data_parallel_size ${size}`);
    const host = options.host ?? '127.0.0.1';
    let parallelConfig: Record<string, unknown> = {};
    if (options.masterConfig ?? size > 1) {
      const [port, ...list] = await freePorts(host, 6);
      parallelConfig = {
        data_parallel_master_ip: host,
        data_parallel_master_port: port,
        _data_parallel_master_port_list: list,
        data_parallel_size: size,
      };
    }
    const made: (Router | Pull)[] = [];
    const bind = async <S extends Router | Pull>(s: S): Promise<string> => {
      made.push(s);
      await s.bind(`tcp://${host}:*`);
      return s.lastEndpoint ?? '';
    };
    try {
      const handshake = new Router({ linger: 0 });
      const input = new Router({ linger: 0, mandatory: true });
      const output = new Pull({ linger: 0 });
      const addresses = [await bind(handshake), await bind(input), await bind(output)] as const;
      return new MirrorDpFrontend(
        size,
        ...addresses,
        parallelConfig,
        {
          handshake,
          input,
          output,
        },
        options,
      );
    } catch (e) {
      for (const s of made) s.close();
      throw e;
    }
  }

  get masterConfigSent(): boolean {
    return Object.keys(this.parallelConfig).length > 0;
  }

  /** Ranks whose READY arrived. */
  get readyRanks(): number[] {
    return [...this.readies.keys()].sort((a, b) => a - b);
  }

  /** Resolves once all N ranks registered and sent READY, checked as VDP §1 says. */
  async runHandshake(timeoutMs = 10_000): Promise<Registration[]> {
    const done = () =>
      this.errors.length > 0 ||
      (this.readies.size === this.size && this.registrations.size === this.size);
    try {
      await this.until(done, 'registrations and READYs', timeoutMs);
    } catch (e) {
      if (!(e instanceof MirrorTimeoutError)) throw e;
      const seen = (m: Map<number, unknown>) => JSON.stringify([...m.keys()].sort());
      throw new MirrorTimeoutError(
        `all ${this.size} ranks (HELLO from ${seen(this.hellos)}, registered ${seen(this.registrations)}, READY ${seen(this.readies)})`,
        timeoutMs,
      );
    }
    if (this.errors.length > 0) throw this.errors[0]!;
    const regs = Array.from({ length: this.size }, (_, r) => this.registrations.get(r)!);
    const hashes = Array.from(
      { length: this.size },
      (_, r) => this.readies.get(r)!.parallel_config_hash,
    );
    if (this.size > 1 && this.masterConfigSent && new Set(hashes).size !== 1) {
      throw new Error(`parallel_config_hash differs across ranks: ${JSON.stringify(hashes)}`);
    }
    if (this.size > 1 && this.masterConfigSent && hashes[0] === undefined) {
      throw new Error('READY without parallel_config_hash from a data_parallel_size > 1 rank');
    }
    regs.forEach((reg, r) => {
      const dpRank = reg.data_parallel_rank;
      if (dpRank !== undefined && dpRank !== r) {
        throw new Error(`rank ${r} registered with data_parallel_rank ${String(dpRank)}`);
      }
    });
    this.era ??= registrationEra(regs[0]!);
    const sizes = regs.map((r) => r.data_parallel_size).filter((s) => s !== undefined);
    if (this.#waves === 'auto') {
      this.wavesArmed =
        sizes.length > 0 ? sizes.some((s) => (s as number) > 1) : this.masterConfigSent;
    } else this.wavesArmed = this.#waves;
    return regs;
  }

  /**
   * An ADD to `rank` (null: input.data_parallel_rank, else least in-flight); resolves with its
   * request_id once sent, and the group woken if it was idle.
   */
  async add(rank: number | null, input: AddInput): Promise<string> {
    const era = this.era;
    if (era === undefined) throw new Error('mirror DP frontend: runHandshake() first');
    const target = rank ?? input.data_parallel_rank ?? this.#pick();
    if (!this.registrations.has(target)) throw new Error(`mirror DP frontend: no rank ${target}`);
    const request: EngineCoreRequest = {
      request_id: `mirror-dp-${this.#nextId++}`,
      mm_features: null,
      sampling_params: {},
      pooling_params: null,
      arrival_time: Date.now() / 1000,
      lora_request: null,
      cache_salt: null,
      data_parallel_rank: rank,
      // The Python client stamps its last wave (VDP §2); without a coordinator engines ignore it.
      current_wave: this.currentWave,
      ...input,
    };
    const id = request.request_id;
    this.#owner.set(id, target);
    this.#outstanding.add(id);
    this.#inflight[target]!++;
    await this.#send(target, encodeAdd(era, request));
    if (this.wavesArmed && !this.running) {
      this.running = true;
      await this.#broadcastWave(this.currentWave, target, 'add');
    }
    return id;
  }

  /** ABORT to each id's owning rank; ids it does not know are dropped (VDP §2). */
  async abort(ids: readonly string[]): Promise<void> {
    const byRank = new Map<number, string[]>();
    for (const id of ids) {
      const rank = this.#owner.get(id);
      if (rank === undefined || !this.#outstanding.has(id)) {
        this.droppedAborts.push(id);
        continue;
      }
      byRank.set(rank, [...(byRank.get(rank) ?? []), id]);
      this.#settle(id);
    }
    await Promise.all([...byRank].map(([rank, group]) => this.#send(rank, encodeAbort(group))));
  }

  /** UTILITY to every rank, each its own call id; the replies in rank order (VDP §2). */
  async callAll(
    method: string,
    args: unknown[] = [],
    options: { timeoutMs?: number } = {},
  ): Promise<UtilityOutput[]> {
    const ranks = Array.from({ length: this.size }, (_, r) => r);
    return Promise.all(ranks.map((r) => this.callRank(r, method, args, options)));
  }

  /** As vLLM's DP client: sent to every rank, rank 0's reply returned (VDP §2). */
  async call(method: string, args: unknown[] = [], options: { timeoutMs?: number } = {}) {
    return (await this.callAll(method, args, options))[0]!;
  }

  async callRank(
    rank: number,
    method: string,
    args: unknown[] = [],
    options: { timeoutMs?: number; callId?: bigint } = {},
  ): Promise<UtilityOutput> {
    const callId = options.callId ?? highCallId();
    const reply = new Promise<UtilityOutput>((resolve) => this.#calls.set(callId, { resolve }));
    try {
      await this.#send(rank, encodeUtilityCall({ client_index: 0, call_id: callId, method, args }));
      return await withTimeout(
        reply,
        options.timeoutMs ?? 5000,
        `rank ${rank}'s reply to ${method}`,
      );
    } finally {
      this.#calls.delete(callId);
    }
  }

  /** START_DP_WAVE [wave, exclude] to `rank` as given, outside the bookkeeping. */
  startDpWave(rank: number, wave: number, exclude: number | null): Promise<void> {
    this.wavesSent.push({ to: rank, wave, exclude, why: 'manual' });
    return this.#send(rank, encodeStartDpWave(wave, exclude));
  }

  /** `frames` to `rank` on the input ROUTER, after its identity. */
  sendRaw(rank: number, frames: Buffer[]): Promise<void> {
    return this.#send(rank, frames);
  }

  /**
   * Outputs are kept, unread, until releaseOutputs(): as if they were still on the wire (a test
   * makes the wave_complete race with it).
   */
  holdOutputs(): void {
    this.#held ??= [];
  }

  releaseOutputs(): void {
    const held = this.#held ?? [];
    this.#held = null;
    for (const frames of held) this.#onFrames(frames);
  }

  ownerOf(requestId: string): number | undefined {
    return this.#owner.get(requestId);
  }

  /** Requests sent, neither finished nor aborted. */
  get outstanding(): string[] {
    return [...this.#outstanding];
  }

  outputsOf(requestId: string): EngineCoreOutput[] {
    return (this.#byRequest.get(requestId) ?? []).map((e) => e.output);
  }

  /** engine_index of every output of the request. */
  enginesOf(requestId: string): number[] {
    return [...new Set((this.#byRequest.get(requestId) ?? []).map((e) => e.engine))];
  }

  tokensOf(requestId: string): number[] {
    return this.outputsOf(requestId).flatMap((o) => o.new_token_ids);
  }

  /** Messages from engine `engine` (its engine_index). */
  receivedFrom(engine: number): EngineCoreOutputs[] {
    return this.received.filter((m) => m.engine_index === engine);
  }

  isFinished(requestId: string): boolean {
    return this.outputsOf(requestId).some((o) => o.finish_reason != null);
  }

  /** Resolves once `pred` holds, checked after every message and every 2 ms; bounded. */
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

  async finished(requestId: string, timeoutMs = 5000): Promise<EngineCoreOutput[]> {
    await this.until(() => this.isFinished(requestId), `finish of ${requestId}`, timeoutMs);
    return this.outputsOf(requestId);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#listeners.clear();
    const { handshake, input, output } = this.sockets;
    for (const s of [handshake, input, output]) s.close();
  }

  /** Least in-flight, the scan starting one further each pick (VDP §2, without LB stats). */
  #pick(): number {
    const ranks = [...this.registrations.keys()].sort((a, b) => a - b);
    let best = ranks[0] ?? 0;
    let bestLoad = Number.POSITIVE_INFINITY;
    for (let i = 0; i < ranks.length; i++) {
      const r = ranks[(this.#nextPick + i) % ranks.length]!;
      if (this.#inflight[r]! < bestLoad) {
        best = r;
        bestLoad = this.#inflight[r]!;
      }
    }
    this.#nextPick = (this.#nextPick + 1) % Math.max(1, ranks.length);
    return best;
  }

  #send(rank: number, frames: Buffer[]): Promise<void> {
    if (this.#closed) return Promise.reject(new Error('mirror DP frontend: closed'));
    return this.#input.push([identityOf(rank), ...frames]);
  }

  /** START_DP_WAVE [wave, exclude] to every rank but `exclude`. */
  async #broadcastWave(wave: number, exclude: number | null, why: WaveSent['why']): Promise<void> {
    const ranks = [...this.registrations.keys()].filter((r) => r !== exclude);
    for (const to of ranks) this.wavesSent.push({ to, wave, exclude, why });
    await Promise.all(ranks.map((to) => this.#send(to, encodeStartDpWave(wave, exclude))));
  }

  #settle(id: string): void {
    if (!this.#outstanding.delete(id)) return;
    const rank = this.#owner.get(id);
    if (rank !== undefined) this.#inflight[rank]!--;
  }

  async #readHandshake(): Promise<void> {
    try {
      for await (const [id, payload] of this.sockets.handshake) this.#onHandshake(id, payload);
    } catch {
      // closed
    }
  }

  #onHandshake(id: Buffer | undefined, payload: Buffer | undefined): void {
    try {
      const rank = rankOf(id);
      if (rank >= this.size) throw new Error(`rank ${rank} of data_parallel_size ${this.size}`);
      const status = decodeStatus(payload ?? Buffer.alloc(0));
      if (status.status === 'HELLO') {
        if (this.hellos.has(rank)) throw new Error(`a second HELLO from rank ${rank}`);
        this.hellos.set(rank, status);
        const init = encodeInit({
          addresses: {
            inputs: [this.inputAddress],
            outputs: [this.outputAddress],
            coordinator_input: null,
            coordinator_output: null,
            frontend_stats_publish_address: null,
          },
          parallel_config: this.parallelConfig,
        });
        this.#handshakeOut.push([id!, init]).catch((e: unknown) => this.#fail(e));
      } else {
        // The registration may be read after READY: they come on different sockets.
        if (!this.hellos.has(rank)) throw new Error(`READY from rank ${rank} before its HELLO`);
        if (this.readies.has(rank)) throw new Error(`a second READY from rank ${rank}`);
        this.readies.set(rank, status);
      }
    } catch (e) {
      this.#fail(e);
    }
    this.#notify();
  }

  async #readInput(): Promise<void> {
    try {
      for await (const [id, payload] of this.sockets.input) {
        try {
          const rank = rankOf(id);
          if (rank >= this.size) throw new Error(`registration from rank ${rank}`);
          if (this.registrations.has(rank)) throw new Error(`rank ${rank} sent on the input again`);
          this.registrations.set(
            rank,
            decodeRegistration(this.era ?? '0.22', payload ?? Buffer.alloc(0)),
          );
        } catch (e) {
          this.#fail(e);
        }
        this.#notify();
      }
    } catch {
      // closed
    }
  }

  async #readOutput(): Promise<void> {
    try {
      for await (const frames of this.sockets.output) {
        if (this.#held !== null) this.#held.push(frames);
        else this.#onFrames(frames);
      }
    } catch {
      // closed
    }
  }

  #onFrames(frames: Buffer[]): void {
    if (isEngineDead(frames)) this.dead++;
    else {
      try {
        this.#record(decodeOutputs(frames));
      } catch (e) {
        this.#fail(e);
      }
    }
    this.#notify();
  }

  #record(decoded: DecodedOutputs): void {
    const m = decoded.message;
    const engine = m.engine_index;
    this.received.push(m);
    if (m.scheduler_stats !== null) {
      this.stats.set(engine, [...(this.stats.get(engine) ?? []), m.scheduler_stats]);
    }
    for (const output of m.outputs) {
      const id = output.request_id;
      this.#byRequest.set(id, [...(this.#byRequest.get(id) ?? []), { engine, output }]);
      if (output.finish_reason != null) this.#settle(id);
    }
    for (const id of m.finished_requests ?? []) this.#settle(id);
    if (m.utility_output !== null)
      this.#calls.get(m.utility_output.call_id)?.resolve(m.utility_output);
    if (m.wave_complete !== null) this.#onWaveComplete(engine, m.wave_complete);
    if (m.start_wave !== null) this.#onStartWave(engine, m.start_wave);
  }

  #onWaveComplete(engine: number, wave: number): void {
    this.waveCompletes.push({ engine, wave });
    if (!this.wavesArmed || wave < this.currentWave) return;
    this.currentWave = wave + 1;
    this.running = false;
    if (this.#wakeOnRace && this.#outstanding.size > 0) {
      // The group ended the wave with an ADD still on its way or just taken: nobody woke the
      // other ranks for it, so wake them all (VDP §4, "Inference ... consequence for ringserve").
      this.running = true;
      this.#broadcastWave(this.currentWave, null, 'race').catch((e: unknown) => this.#fail(e));
    }
  }

  /** Sent only to a coordinator by vLLM (VDP §4); handled as SMG does, in case one comes. */
  #onStartWave(engine: number, wave: number): void {
    this.startWaves.push({ engine, wave });
    if (!this.wavesArmed) return;
    if (wave > this.currentWave) this.currentWave = wave;
    if (this.running) return;
    this.running = true;
    this.#broadcastWave(this.currentWave, engine, 'start_wave').catch((e: unknown) =>
      this.#fail(e),
    );
  }

  #fail(e: unknown): void {
    if (!this.#closed) this.errors.push(e instanceof Error ? e : new Error(String(e)));
  }

  #notify(): void {
    for (const listener of [...this.#listeners]) listener();
  }
}
