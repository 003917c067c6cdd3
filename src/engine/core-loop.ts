/**
 * The engine core's loop, wired to the shared region: drain every request ring, run a pending
 * control command, step the engine, write one STEP record per API server, publish heartbeat and
 * stats, then wait on the doorbell until the step's modelled duration has passed, running any
 * control command that arrives meanwhile (or block on the doorbell when idle). The loop returns to
 * the event loop between turns so IPC from the supervisor and signals are handled; the engine never
 * blocks it for longer than one idle wait (IDLE_WAIT_MS) or one step's modelled duration.
 *
 * A slow or stopped API server never stalls the engine or loses a request: before each step the
 * loop opens an OutputRoom from every output ring and the engine schedules only what those rings
 * can take (output-room.ts); a server without room is held, its sequences keep their state and KV
 * blocks, and the others run as usual. When every server with work is held the loop sleeps on the
 * doorbell for HELD_POLL_MS at a time and measures the rings again. A held server whose consumer
 * process is gone is detected (held-servers.ts) and its requests dropped; the supervisor's
 * server-down does the same for any API server that exits.
 *
 * Control commands are what an RL trainer waits on with the whole fleet idle (pause, swap weights,
 * resume), so they are never queued behind the data path: measured with `npm run bench:control`
 * under 128 long requests, a pause waited p50 7.4 ms / max 90 ms for the modelled step to end when
 * the rest was a plain timer, and p50 1.5 ms / max 26 ms when the rest wakes for commands.
 */
import type { Doorbell } from '../shm/doorbell.js';
import { setRankRow, writeRankStats } from '../shm/dp-ranks.js';
import { writeEngineNote } from '../shm/engine-note.js';
import {
  ENGINE_STATE_PAUSED,
  ENGINE_STATE_RUNNING,
  ENGINE_STATE_STARTING,
  ENGINE_STATE_STOPPING,
  ENGINE_STATS_INDEX,
  MAX_DP_RANKS,
  RANK_STAT_SLOTS,
  STAT_BLOCK_SIZE,
  STAT_EXTERNAL_HIT_TOKENS,
  STAT_GENERATION_TOKENS,
  STAT_KV_LOAD_FAILURES,
  STAT_KV_USAGE,
  STAT_LAST_STEP_MS,
  STAT_NUM_GPU_BLOCKS,
  STAT_NUM_PREEMPTIONS,
  STAT_OFFLOAD_LOADED_BLOCKS,
  STAT_OFFLOAD_STORED_BLOCKS,
  STAT_PAUSED,
  STAT_PREFIX_HITS,
  STAT_PREFIX_QUERIES,
  STAT_PROMPT_TOKENS,
  STAT_RUNNING,
  STAT_SAMPLING_MASKS,
  STAT_STEP_COUNT,
  STAT_VLLM_UNDECODABLE,
  STAT_WAITING,
  STAT_WEIGHT_VERSION,
} from '../shm/layout.js';
import type { Region } from '../shm/region.js';
import { engineDoorbell, outputRingProducer, requestRingConsumer } from '../shm/region.js';
import type { RingConsumer, RingProducer } from '../shm/ring.js';
import {
  beatEngine,
  beginStatsWrite,
  endStatsWrite,
  setEnginePid,
  setEngineState,
} from '../shm/words.js';
import { ControlServer } from '../wire/control-channel.js';
import { MAX_SLOTS_PER_SERVER } from '../wire/engine-defaults.js';
import {
  RecordType,
  readAbortSlot,
  readAdd,
  readAddSlot,
  readAddSlotGen,
} from '../wire/messages.js';
import { expertIdBytes } from '../wire/model-card.js';
import type { EngineStats } from '../wire/types.js';
import { ControlRunner } from './control-runner.js';
import type { EngineCore } from './engine-core.js';
import { HeldServers } from './held-servers.js';
import { StepBatchWriter } from './step-batch-writer.js';
import type { StepOutputs } from './step-outputs.js';

/** The longest the loop blocks on the doorbell before returning to the event loop. */
const IDLE_WAIT_MS = 50;
/**
 * How long the loop sleeps on the doorbell when every API server with work is held, before it
 * measures their rings again (a request or a control command ends the sleep at once). The output
 * worker that frees room wakes only a producer blocked on that ring's own futex word, and one
 * thread cannot wait on that and on the doorbell at once (the engine must keep taking requests and
 * commands from every server), so the loop polls rather than have every release ring the engine.
 * 2 ms is a fifth of a real preset's base step (10 ms at --speedup 1), so a held server resumes
 * within a fraction of a step; the cost is 500 short wake-ups a second, only while all is held.
 */
const HELD_POLL_MS = 2;

export interface CoreLoopEvents {
  /** The consumer of an API server's output ring is gone; its requests have been dropped. */
  serverGone?(server: number, error: Error): void;
  /** A record from an API server could not be read; the request got an error output. */
  badRecord?(server: number, detail: string): void;
  /** A control command threw (it was answered Failed; the engine goes on). */
  controlFailed?(code: number, error: Error): void;
}

export class CoreLoop {
  readonly #region: Region;
  /** The engine note last written into the region (compared by value on every publish). */
  #note = '';
  readonly #engine: EngineCore;
  readonly #consumers: RingConsumer[];
  readonly #producers: (RingProducer | null)[];
  readonly #gens: Int32Array;
  readonly #out: StepOutputs;
  readonly #writer: StepBatchWriter;
  readonly #held: HeldServers;
  readonly #bell: Doorbell;
  readonly #control: ControlRunner;
  readonly #events: CoreLoopEvents;
  #stopping = false;
  #stats: EngineStats | undefined;
  /** The data-parallel ranks' figures (EngineCore.rankStats), filled on every publish. */
  readonly #ranks = new Float64Array(MAX_DP_RANKS * RANK_STAT_SLOTS);
  /** The modelled duration of the last step, republished with a control command's stats. */
  #lastStepMs = 0;

  constructor(region: Region, engine: EngineCore, events: CoreLoopEvents = {}) {
    this.#region = region;
    this.#engine = engine;
    this.#events = events;
    const servers = region.params.apiServerCount;
    this.#consumers = [];
    this.#producers = [];
    for (let k = 0; k < servers; k++) {
      const consumer = requestRingConsumer(region, k);
      // Records left by a previous engine belong to requests their API servers already failed.
      while (consumer.next()) {}
      consumer.release();
      this.#consumers.push(consumer);
      this.#producers.push(outputRingProducer(region, k));
    }
    this.#gens = new Int32Array(servers * MAX_SLOTS_PER_SERVER);
    this.#out = engine.newStepOutputs();
    const model = engine.model;
    this.#writer = new StepBatchWriter(
      servers,
      model.routingLayers,
      model.expertsPerToken,
      expertIdBytes(model),
    );
    this.#held = new HeldServers(servers, model, region.params.outputRingBytes);
    this.#bell = engineDoorbell(region);
    this.#control = new ControlRunner(new ControlServer(region), engine, {
      answered: () => this.#publish(this.#lastStepMs),
      failed: (code, error) => this.#events.controlFailed?.(code, error),
    });
    setEnginePid(region.i32, process.pid);
    this.#publish(0);
  }

  /** Runs until stop(); resolves when the loop has ended. */
  async run(): Promise<void> {
    const bell = this.#bell;
    while (!this.#stopping) {
      const started = performance.now();
      this.#drainRequests();
      this.#control.run();
      // hasWork() is false while paused, except for pending abort and reject outputs, which a
      // paused engine still confirms.
      if (this.#engine.hasWork()) {
        const out = this.#out;
        const room = this.#held.room;
        this.#writer.measure(room, this);
        out.clear();
        const timing = this.#engine.step(out, room);
        // Sub-millisecond wall clock: inter-token latency is measured from these stamps.
        this.#writer.write(out, this, performance.timeOrigin + performance.now(), timing.ms);
        if (this.#held.afterStep(out, timing, this)) {
          this.#waitForRoom();
          await yieldToEventLoop();
          continue;
        }
        this.#lastStepMs = timing.ms;
        this.#publish(timing.ms);
        this.#rest(started + timing.ms);
        await yieldToEventLoop();
      } else {
        this.#publish(0);
        const outside = this.#engine.awaitWork?.() ?? null;
        if (outside !== null) {
          await outside;
          continue;
        }
        const seq = bell.prepareSleep();
        if (!this.#anyRequestPending() && !this.#control.waiting()) bell.sleep(seq, IDLE_WAIT_MS);
        bell.endSleep();
        await yieldToEventLoop();
      }
    }
    setEngineState(this.#region.i32, ENGINE_STATE_STOPPING);
  }

  /**
   * Waits out the rest of a step's modelled duration (its outputs are already written) on the
   * doorbell, running any control command that arrives meanwhile: a pause or a weight update never
   * waits for the modelled step time. ControlClient rings the bell unconditionally, so the sleeping
   * flag stays clear and request producers make no wake syscalls; the bell word is read before the
   * check, so a command stored after the check changes it and the futex returns at once.
   */
  #rest(until: number): void {
    const bell = this.#bell;
    for (;;) {
      const left = until - performance.now();
      if (left < 1) return;
      const seq = bell.rings();
      if (this.#control.waiting()) this.#control.run();
      // A step modelled longer than the heartbeat bound (a slow --speedup) must not look stalled.
      else bell.sleep(seq, Math.min(left, IDLE_WAIT_MS));
      this.#beat();
    }
  }

  stop(): void {
    this.#stopping = true;
    this.#bell.wake();
  }

  /** The supervisor says API server k died: drop its requests (no outputs) and start its ring afresh. */
  serverDown(server: number): void {
    this.#engine.abortServer(server);
    this.#gens.fill(0, server * MAX_SLOTS_PER_SERVER, (server + 1) * MAX_SLOTS_PER_SERVER);
    this.#producers[server] = outputRingProducer(this.#region, server);
  }

  // ---- StepBatchSink ---------------------------------------------------------------------------

  producer(server: number): RingProducer | null {
    return this.#producers[server] ?? null;
  }

  slotGen(server: number, slot: number): number {
    return this.#gens[server * MAX_SLOTS_PER_SERVER + slot]!;
  }

  /** Drops server k's requests and stops writing to its ring until it sends again (restarted). */
  serverGone(server: number, error: Error): void {
    this.#engine.abortServer(server);
    this.#producers[server] = null;
    this.#events.serverGone?.(server, error);
  }

  // ---- internals -------------------------------------------------------------------------------

  /**
   * Every API server with work is held: nothing changes until a ring has room. Sleeps on the
   * doorbell (a request or control command wakes it) for at most HELD_POLL_MS; the heartbeat goes
   * on, so a long hold does not look like a stalled engine.
   */
  #waitForRoom(): void {
    const bell = this.#bell;
    const seq = bell.prepareSleep();
    if (!this.#anyRequestPending() && !this.#control.waiting()) bell.sleep(seq, HELD_POLL_MS);
    bell.endSleep();
    this.#beat();
  }

  #drainRequests(): void {
    for (let k = 0; k < this.#consumers.length; k++) {
      const consumer = this.#consumers[k]!;
      let any = false;
      while (consumer.next()) {
        any = true;
        if (consumer.type === RecordType.Add) this.#add(consumer, k);
        else if (consumer.type === RecordType.Abort) {
          this.#engine.abort(k, readAbortSlot(consumer, consumer.offset));
        } else this.#events.badRecord?.(k, `unknown record type ${consumer.type}`);
      }
      if (any) {
        consumer.release();
        if (this.#producers[k] === null) this.#producers[k] = outputRingProducer(this.#region, k);
      }
    }
  }

  #add(consumer: RingConsumer, server: number): void {
    const { offset, length } = consumer;
    const slot = readAddSlot(consumer, offset, length);
    if (slot < 0 || slot >= MAX_SLOTS_PER_SERVER) {
      this.#events.badRecord?.(server, `ADD record with slot ${slot}`);
      return;
    }
    this.#gens[server * MAX_SLOTS_PER_SERVER + slot] = readAddSlotGen(consumer, offset, length);
    const request = readAdd(consumer, offset, length, server);
    if (request === null) {
      this.#events.badRecord?.(server, `malformed ADD record for slot ${slot}`);
      this.#engine.reject(server, slot);
      return;
    }
    this.#engine.add(request);
  }

  #anyRequestPending(): boolean {
    for (const consumer of this.#consumers) if (consumer.hasData()) return true;
    return false;
  }

  #publish(lastStepMs: number): void {
    const { i32, f64 } = this.#region;
    const engine = this.#engine;
    const s = engine.stats(this.#stats);
    this.#stats = s;
    const ranks = this.#ranks;
    const rankCount =
      engine.rankStats !== undefined
        ? engine.rankStats(ranks)
        : oneRank(ranks, s, engine.ready !== false);
    const base = ENGINE_STATS_INDEX;
    beginStatsWrite(i32);
    f64[base + STAT_RUNNING] = s.running;
    f64[base + STAT_WAITING] = s.waiting;
    f64[base + STAT_KV_USAGE] = s.kvUsage;
    f64[base + STAT_NUM_PREEMPTIONS] = s.numPreemptions;
    f64[base + STAT_PREFIX_QUERIES] = s.prefixQueries;
    f64[base + STAT_PREFIX_HITS] = s.prefixHits;
    f64[base + STAT_PROMPT_TOKENS] = s.promptTokens;
    f64[base + STAT_GENERATION_TOKENS] = s.generationTokens;
    f64[base + STAT_WEIGHT_VERSION] = s.weightVersion;
    f64[base + STAT_STEP_COUNT] = s.steps;
    f64[base + STAT_NUM_GPU_BLOCKS] = s.numGpuBlocks;
    f64[base + STAT_BLOCK_SIZE] = s.blockSize;
    f64[base + STAT_LAST_STEP_MS] = lastStepMs;
    f64[base + STAT_PAUSED] = this.#engine.paused ? 1 : 0;
    f64[base + STAT_EXTERNAL_HIT_TOKENS] = s.externalHitTokens ?? 0;
    f64[base + STAT_KV_LOAD_FAILURES] = s.kvLoadFailures ?? 0;
    f64[base + STAT_OFFLOAD_STORED_BLOCKS] = s.offloadStoredBlocks ?? 0;
    f64[base + STAT_OFFLOAD_LOADED_BLOCKS] = s.offloadLoadedBlocks ?? 0;
    f64[base + STAT_VLLM_UNDECODABLE] = s.vllmUndecodable ?? 0;
    f64[base + STAT_SAMPLING_MASKS] = this.#engine.samplingMasks === false ? 0 : 1;
    writeRankStats(this.#region, rankCount, ranks);
    endStatsWrite(i32);
    const note = this.#control.noteText();
    if (note !== this.#note) {
      this.#note = note;
      writeEngineNote(this.#region, note);
    }
    this.#beat();
    setEngineState(i32, this.#state());
  }

  #state(): number {
    const engine = this.#engine;
    if (engine.ready === false) return ENGINE_STATE_STARTING;
    return engine.paused ? ENGINE_STATE_PAUSED : ENGINE_STATE_RUNNING;
  }

  /** The heartbeat /liveness and /health read (engine-client.ts HEARTBEAT_STALE_MS). */
  #beat(): void {
    beatEngine(this.#region, Date.now());
  }
}

/** An engine core with one engine (no rankStats): rank 0's figures are the engine stats. */
function oneRank(ranks: Float64Array, s: EngineStats, up: boolean): number {
  setRankRow(ranks, 0, up, s);
  return 1;
}

const yieldToEventLoop = (): Promise<void> => new Promise((r) => setImmediate(r));
