/**
 * Mirror data-parallel engine ranks: N MirrorEngines that act as vLLM MoE DP ranks
 * (`DPEngineCoreProc`) behind one frontend, as `vllm serve --headless --data-parallel-size N`
 * starts them. "VDP §n" tags the DP notes (vLLM's DP protocol researched from its 2026 source);
 * "core.py @ 00080ee1" is vLLM's vllm/v1/engine/core.py at that commit (the notes' source A).
 *
 * What a rank does (VDP §1, §4):
 * - dials the handshake with its rank as the 2-byte LE identity, takes the init, applies its
 *   parallel_config, joins its DP group, registers (data_parallel_size / data_parallel_rank) and
 *   sends READY with a parallel_config_hash (core.py @ 00080ee1 `_perform_handshake`: the hash
 *   whenever data_parallel_size > 1; `EngineCoreProc.__init__` forms the DP group with
 *   `_init_data_parallel` inside the handshake, before the model, the registration and READY);
 * - obeys START_DP_WAVE [wave, exclude]: exclude != rank and wave >= current_wave ->
 *   current_wave = wave, engines_running = true (VDP §4; core.py `_handle_client_request`);
 * - steps in lockstep with its group: a step happens only when every rank of the group steps
 *   (real requests or a dummy batch), because the MoE forward is a collective; a rank with a
 *   request whose peers are idle is blocked, and reads no input until the step completes (its
 *   busy loop handles input only between steps, core.py `run_busy_loop`);
 * - after each group step, the finish-sync all-reduce (on the wave's first step and every
 *   `syncInterval`-th, as VDP §4's source B; A synced every 32 steps): when no rank has an
 *   unfinished request, engines_running = false, every rank sends wave_complete(current_wave)
 *   to client 0 (no coordinator: VDP §4) and current_wave += 1.
 *
 * The group is in-process: ranks made by one `createMirrorDpRanks` share a MirrorDpGroup, the
 * test-only stand-in for vLLM's gloo DP group. It forms only when every rank got the same DP
 * master address in its init (when `masterConfig` is 'require'), as ranks that rendezvous at
 * different addresses would never form a torch process group.
 *
 * A dense model's DP ranks (`moe: false`) are independent EngineCoreProcs (VDP §4): no group, no
 * waves, START_DP_WAVE is an unknown request type (recorded as an error). They report
 * data_parallel_size 1 and send no parallel_config_hash (VDP §6: "Dense ranks report 1"; core.py @
 * 00080ee1 `run_engine_core` calls `reconfigure_for_independent_dp_rank()` for them), and, like
 * MoE ranks, data_parallel_rank = their DP rank (`_make_ready_response`: `self.engine_index`).
 */
import { createHash } from 'node:crypto';
import {
  DEFAULT_VLLM_VERSION,
  type Era,
  encodeOutputs,
  type InitMessage,
  registrationKeysSent,
} from './codec.js';
import { type EngineDpHooks, MirrorEngine, type MirrorEngineOptions } from './engine.js';

/** The DP master keys an init carries for MoE DP (VDP §1). */
export interface DpMasterConfig {
  data_parallel_master_ip: string;
  data_parallel_master_port: number;
  _data_parallel_master_port_list: number[];
  data_parallel_size: number;
}

export interface MirrorDpRanksOptions
  extends Omit<Partial<MirrorEngineOptions>, 'rank' | 'dp' | 'stepMs'> {
  /** Default '0.33'. */
  era?: Era;
  /** A MoE model (default): lockstep group and waves. false: independent dense ranks. */
  moe?: boolean;
  /**
   * 'require' (default for MoE): the group forms only if every init carried the same DP master
   * keys with data_parallel_size = N; a rank whose init does not fails to start (the error names
   * why). 'ignore': the in-process group forms whatever the inits said.
   */
  masterConfig?: 'require' | 'ignore';
  /** The finish-sync all-reduce on a wave's first step and every n-th (default 1: every step). */
  syncInterval?: number;
  /** Group step period (default 2 ms). */
  stepMs?: number;
  /** READY's parallel_config_hash per rank; default: the same hash for all ranks. */
  parallelConfigHash?: (rank: number) => string;
}

/** A rank's counters, for assertions in other tests. */
export interface DpRankCounters {
  rank: number;
  /** ADDs the rank processed. */
  requestsSeen: number;
  /** START_DP_WAVE messages the rank processed (obeyed or not). */
  startWavesSeen: number;
  utilityCalls: number;
  aborts: number;
  currentWave: number;
  enginesRunning: boolean;
  /** Group steps in which it ran requests, and in which it ran a dummy batch. */
  steps: number;
  dummySteps: number;
  /** Ticks it wanted to step but a peer did not (blocked in the collective). */
  blockedTicks: number;
  wavesCompleted: number[];
  errors: number;
}

/** The default hash: the same for every rank of a size (not vLLM's compute_hash value). */
export function mirrorParallelConfigHash(size: number): string {
  const factors = { data_parallel_size: size, tensor_parallel_size: 1, pipeline_parallel_size: 1 };
  return createHash('sha256').update(JSON.stringify(factors)).digest('hex');
}

function masterOf(pc: Record<string, unknown>): DpMasterConfig | string {
  const ip = pc.data_parallel_master_ip;
  const port = pc.data_parallel_master_port;
  const list = pc._data_parallel_master_port_list;
  const size = pc.data_parallel_size;
  if (typeof ip !== 'string') return 'no data_parallel_master_ip';
  if (typeof port !== 'number' || !Number.isInteger(port)) return 'no data_parallel_master_port';
  if (!Array.isArray(list) || !list.every((p) => typeof p === 'number')) {
    return 'no _data_parallel_master_port_list';
  }
  if (typeof size !== 'number') return 'no data_parallel_size';
  return {
    data_parallel_master_ip: ip,
    data_parallel_master_port: port,
    _data_parallel_master_port_list: list as number[],
    data_parallel_size: size,
  };
}

const sameMaster = (a: DpMasterConfig, b: DpMasterConfig) =>
  JSON.stringify(a) === JSON.stringify(b);

/** One DP rank: a MirrorEngine driven by its group. */
export class MirrorDpRank {
  readonly engine: MirrorEngine;
  currentWave = 0;
  enginesRunning = false;
  /** In a step its peers have not joined: input waits. */
  blocked = false;
  steps = 0;
  dummySteps = 0;
  blockedTicks = 0;
  readonly wavesCompleted: number[] = [];
  /** The init's parallel_config as the rank applied it. */
  parallelConfig: Record<string, unknown> | null = null;
  closed = false;
  readonly #held: (() => void)[] = [];

  constructor(
    readonly rank: number,
    readonly group: MirrorDpGroup,
    options: MirrorEngineOptions,
  ) {
    const hooks: EngineDpHooks = {
      beforeRegister: (init) => this.#join(init),
      readyHash: group.moe && group.size > 1 ? group.hashOf(rank) : null,
      startDpWave: (w) => this.#startDpWave(w),
      currentWave: () => this.currentWave,
      deliver: (handle) => {
        if (this.blocked) this.#held.push(handle);
        else handle();
      },
    };
    this.engine = new MirrorEngine({ ...options, rank, dp: hooks });
  }

  get requestsSeen(): number {
    return this.engine.adds.length;
  }

  get startWavesSeen(): number {
    return this.engine.waves.length;
  }

  /** scheduler.has_unfinished_requests(): waiting or running. */
  get hasUnfinished(): boolean {
    return this.engine.running + this.engine.waiting > 0;
  }

  /** Its busy loop would step: local work or a running wave (core.py `has_work`). */
  get wantsStep(): boolean {
    return !this.closed && (this.hasUnfinished || this.enginesRunning);
  }

  /** ADDs whose data_parallel_rank names another rank (vLLM's engine ignores the field). */
  get misrouted(): string[] {
    return this.engine.adds
      .map((a) => a.request)
      .filter((r) => r.data_parallel_rank != null && r.data_parallel_rank !== this.rank)
      .map((r) => r.request_id);
  }

  counters(): DpRankCounters {
    return {
      rank: this.rank,
      requestsSeen: this.requestsSeen,
      startWavesSeen: this.startWavesSeen,
      utilityCalls: this.engine.calls.length,
      aborts: this.engine.aborts.length,
      currentWave: this.currentWave,
      enginesRunning: this.enginesRunning,
      steps: this.steps,
      dummySteps: this.dummySteps,
      blockedTicks: this.blockedTicks,
      wavesCompleted: [...this.wavesCompleted],
      errors: this.engine.errors.length,
    };
  }

  connect(handshake: string, timeoutMs = 10_000): Promise<void> {
    return this.engine.connect(handshake, timeoutMs);
  }

  close(): void {
    this.closed = true;
    this.#held.length = 0;
    this.engine.close();
  }

  /** After a group step: the input that waited is handled (the busy loop's next iteration). */
  release(): void {
    this.blocked = false;
    for (const handle of this.#held.splice(0)) handle();
  }

  /** The wave's end: wave_complete(current_wave) to client 0, then the next wave. */
  completeWave(): void {
    const frames = encodeOutputs(this.engine.era, {
      engine_index: this.rank,
      wave_complete: this.currentWave,
      timestamp: performance.now() / 1000,
    });
    void this.engine.sendRaw(frames, 0);
    this.wavesCompleted.push(this.currentWave);
    this.currentWave += 1;
  }

  #startDpWave({ wave, exclude }: { wave: number; exclude: number | null }): void {
    if (!this.group.moe) {
      // A dense rank runs plain EngineCoreProc: no handler for type 2 (VDP §4).
      this.engine.errors.push(new Error('request type byte 2 (START_DP_WAVE) on a dense rank'));
      return;
    }
    if (exclude !== this.rank && wave >= this.currentWave) {
      this.currentWave = wave;
      this.enginesRunning = true;
    }
  }

  #join(init: InitMessage): Promise<void> {
    this.parallelConfig = init.parallel_config;
    return this.group.join(this, init.parallel_config);
  }
}

/** The ranks' DP group: rendezvous, lockstep steps, the finish all-reduce. */
export class MirrorDpGroup {
  readonly ranks: MirrorDpRank[] = [];
  /** Why the group could not form, or a rank could not join. */
  readonly errors: Error[] = [];
  /** Group steps, and ticks where some rank wanted to step and another did not. */
  steps = 0;
  blockedTicks = 0;
  /** The DP master every rank agreed on, once formed. */
  master: DpMasterConfig | null = null;
  readonly moe: boolean;
  readonly #masterConfig: 'require' | 'ignore';
  readonly #syncInterval: number;
  readonly #hash: (rank: number) => string;
  readonly #joined = new Map<number, DpMasterConfig | null>();
  readonly #waiters: { resolve(): void; reject(e: Error): void }[] = [];
  #stepCounter = 0;
  #timer: NodeJS.Timeout | null;
  #closed = false;

  constructor(
    readonly size: number,
    options: MirrorDpRanksOptions = {},
  ) {
    this.moe = options.moe ?? true;
    this.#masterConfig = options.masterConfig ?? 'require';
    this.#syncInterval = Math.max(1, options.syncInterval ?? 1);
    const hash = mirrorParallelConfigHash(size);
    this.#hash = options.parallelConfigHash ?? (() => hash);
    this.#timer = setInterval(() => this.#tick(), options.stepMs ?? 2);
    this.#timer.unref();
  }

  hashOf(rank: number): string {
    return this.#hash(rank);
  }

  get formed(): boolean {
    return this.#joined.size === this.size && this.errors.length === 0;
  }

  counters(): DpRankCounters[] {
    return this.ranks.map((r) => r.counters());
  }

  /** Dials every rank at `handshake`; resolves once all sent READY. Closes all on failure. */
  async connect(handshake: string, timeoutMs = 10_000): Promise<void> {
    const results = await Promise.allSettled(
      this.ranks.map((r) => r.connect(handshake, timeoutMs)),
    );
    const failed = results.flatMap((r, i) =>
      r.status === 'rejected' ? [`rank ${i}: ${String(r.reason)}`] : [],
    );
    if (failed.length > 0) {
      this.close();
      const why = this.errors.map((e) => e.message);
      throw new Error(`mirror DP ranks did not start: ${[...failed, ...why].join('; ')}`);
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    for (const r of this.ranks) r.close();
    for (const w of this.#waiters.splice(0)) w.reject(new Error('mirror DP group closed'));
  }

  /** A rank's rendezvous: resolves when all N joined with one DP master (or 'ignore'). */
  join(rank: MirrorDpRank, pc: Record<string, unknown>): Promise<void> {
    if (!this.moe || this.size === 1) return Promise.resolve();
    if (this.#closed) return Promise.reject(new Error('mirror DP group closed'));
    let master: DpMasterConfig | null = null;
    if (this.#masterConfig === 'require') {
      const m = masterOf(pc);
      const fail = (why: string) => {
        // vLLM's ranks would hang in the rendezvous; the mirror fails them all at once, saying why.
        const e = new Error(`rank ${rank.rank}: ${why} (a torch DP group would not form)`);
        this.errors.push(e);
        for (const w of this.#waiters.splice(0)) w.reject(e);
        return Promise.reject(e);
      };
      if (typeof m === 'string') return fail(`init parallel_config has ${m}`);
      if (m.data_parallel_size !== this.size) {
        return fail(`init data_parallel_size ${m.data_parallel_size}, the group has ${this.size}`);
      }
      for (const [other, seen] of this.#joined) {
        if (seen !== null && !sameMaster(seen, m)) {
          return fail(`DP master ${JSON.stringify(m)} differs from rank ${other}'s`);
        }
      }
      master = m;
    }
    if (this.#joined.has(rank.rank)) {
      return Promise.reject(new Error(`rank ${rank.rank} joined twice`));
    }
    this.#joined.set(rank.rank, master);
    const done = new Promise<void>((resolve, reject) => this.#waiters.push({ resolve, reject }));
    if (this.#joined.size === this.size) {
      this.master = master;
      for (const w of this.#waiters.splice(0)) w.resolve();
    }
    return done;
  }

  #tick(): void {
    if (this.#closed) return;
    if (!this.moe) {
      for (const r of this.ranks) if (!r.closed && r.engine.step()) r.steps++;
      return;
    }
    const wanting = this.ranks.filter((r) => r.wantsStep);
    if (wanting.length === 0) return;
    if (wanting.length < this.ranks.length || !this.formed) {
      // The collective waits for the peers that are not stepping (VDP §4: "A lone rank's
      // forward blocks in MoE/EP collectives"): no progress, no input read.
      for (const r of wanting) {
        r.blocked = true;
        r.blockedTicks++;
      }
      this.blockedTicks++;
      return;
    }
    for (const r of this.ranks) {
      if (r.engine.step()) r.steps++;
      else r.dummySteps++;
    }
    this.steps++;
    this.#stepCounter++;
    const sync = this.#stepCounter === 1 || this.#stepCounter % this.#syncInterval === 0;
    const unfinished = !sync || this.ranks.some((r) => r.hasUnfinished);
    for (const r of this.ranks) r.enginesRunning = unfinished;
    if (!unfinished) {
      for (const r of this.ranks) r.completeWave();
      this.#stepCounter = 0;
    }
    for (const r of this.ranks) r.release();
  }
}

/** N ranks (0..n-1) in one group, not yet connected: for tests that need the handle first. */
export function createMirrorDpRanks(n: number, options: MirrorDpRanksOptions = {}): MirrorDpGroup {
  const { moe, masterConfig, syncInterval, stepMs, parallelConfigHash, ...engine } = options;
  const group = new MirrorDpGroup(n, {
    moe,
    masterConfig,
    syncInterval,
    stepMs,
    parallelConfigHash,
  });
  const era = engine.era ?? '0.33';
  const version = engine.vllmVersion ?? DEFAULT_VLLM_VERSION[era];
  const sent = new Set<string>(registrationKeysSent(era, version));
  const dpKeys: Record<string, unknown> = {};
  if (sent.has('data_parallel_size')) dpKeys.data_parallel_size = group.moe ? n : 1;
  for (let rank = 0; rank < n; rank++) {
    const registration = { ...dpKeys, ...engine.registration };
    group.ranks.push(new MirrorDpRank(rank, group, { ...engine, era, registration }));
  }
  return group;
}

/**
 * N mirror DP ranks dialing the frontend handshake at `endpoint`; resolves once all are READY,
 * with their group (ranks, per-rank counters(), close()). On failure everything is closed.
 */
export async function startMirrorDpRanks(
  endpoint: string,
  n: number,
  options: MirrorDpRanksOptions & { timeoutMs?: number } = {},
): Promise<MirrorDpGroup> {
  const { timeoutMs, ...rest } = options;
  const group = createMirrorDpRanks(n, rest);
  await group.connect(endpoint, timeoutMs ?? 10_000);
  return group;
}
