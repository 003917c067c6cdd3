/**
 * The engine core's loop, wired to the shared region: drain every request ring, run a pending
 * control command, step the engine, write one STEP record per API server, publish heartbeat and
 * stats, then sleep until the step's modelled duration has passed (or block on the doorbell when
 * idle). The loop returns to the event loop between turns so IPC from the supervisor and signals
 * are handled; the engine never blocks it for longer than one idle wait (IDLE_WAIT_MS).
 */
import {
  ENG_HEARTBEAT,
  ENG_LAST_BEAT_MS,
  ENG_PID,
  ENG_STATE,
  ENG_STATS_SEQ,
  ENGINE_STATE_PAUSED,
  ENGINE_STATE_RUNNING,
  ENGINE_STATE_STOPPING,
  ENGINE_STATS,
  STAT_BLOCK_SIZE,
  STAT_GENERATION_TOKENS,
  STAT_KV_USAGE,
  STAT_LAST_STEP_MS,
  STAT_NUM_GPU_BLOCKS,
  STAT_NUM_PREEMPTIONS,
  STAT_PAUSED,
  STAT_PREFIX_HITS,
  STAT_PREFIX_QUERIES,
  STAT_PROMPT_TOKENS,
  STAT_RUNNING,
  STAT_STEP_COUNT,
  STAT_WAITING,
  STAT_WEIGHT_VERSION,
} from '../shm/layout.js';
import type { Region } from '../shm/region.js';
import { engineDoorbell, outputRingProducer, requestRingConsumer } from '../shm/region.js';
import type { RingConsumer, RingProducer } from '../shm/ring.js';
import { ControlCommand, ControlResult, ControlServer } from './control-channel.js';
import type { SimEngine } from './engine.js';
import { RecordType, readAbortSlot, readAdd, readAddSlot, readAddSlotGen } from './messages.js';
import { StepBatchWriter } from './step-batch-writer.js';
import type { StepOutputs } from './step-outputs.js';
import type { EngineStats } from './types.js';

/** The longest the loop blocks on the doorbell before returning to the event loop. */
const IDLE_WAIT_MS = 50;
/** How long a step waits for room in a full output ring before it gives up on that API server. */
const OUTPUT_RING_WAIT_MS = 5_000;
/** Request slots per API server the engine tracks generations for (>= the server's slot table). */
export const MAX_SLOTS_PER_SERVER = 65_536;

export interface CoreLoopEvents {
  /** Writing to an API server's output ring failed; its requests have been dropped. */
  serverFailed?(server: number, error: Error): void;
  /** A record from an API server could not be read; the request got an error output. */
  badRecord?(server: number, detail: string): void;
}

export class CoreLoop {
  readonly #region: Region;
  readonly #engine: SimEngine;
  readonly #consumers: RingConsumer[];
  readonly #producers: (RingProducer | null)[];
  readonly #gens: Int32Array;
  readonly #out: StepOutputs;
  readonly #writer: StepBatchWriter;
  readonly #control: ControlServer;
  readonly #events: CoreLoopEvents;
  #stopping = false;
  #stats: EngineStats | undefined;

  constructor(region: Region, engine: SimEngine, events: CoreLoopEvents = {}) {
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
    const preset = engine.preset;
    this.#writer = new StepBatchWriter(
      servers,
      preset.routingLayers,
      preset.expertsPerToken,
      preset.numExperts > 256 ? 2 : 1,
      OUTPUT_RING_WAIT_MS,
    );
    this.#control = new ControlServer(region);
    Atomics.store(region.i32, ENG_PID >> 2, process.pid);
    this.#publish(0);
  }

  /** Runs until stop(); resolves when the loop has ended. */
  async run(): Promise<void> {
    const bell = engineDoorbell(this.#region);
    while (!this.#stopping) {
      const started = performance.now();
      this.#drainRequests();
      this.#runControl();
      // hasWork() is false while paused, except for pending abort and reject outputs, which a
      // paused engine still confirms.
      if (this.#engine.hasWork()) {
        this.#out.clear();
        const timing = this.#engine.step(this.#out);
        this.#writer.write(this.#out, this, Date.now(), timing.ms);
        this.#publish(timing.ms);
        const rest = timing.ms - (performance.now() - started);
        if (rest >= 1) await sleep(rest);
        else await yieldToEventLoop();
      } else {
        this.#publish(0);
        const seq = bell.prepareSleep();
        if (!this.#anyRequestPending() && !this.#controlPending()) bell.sleep(seq, IDLE_WAIT_MS);
        bell.endSleep();
        await yieldToEventLoop();
      }
    }
    Atomics.store(this.#region.i32, ENG_STATE >> 2, ENGINE_STATE_STOPPING);
  }

  stop(): void {
    this.#stopping = true;
    engineDoorbell(this.#region).wake();
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

  serverFailed(server: number, error: Error): void {
    this.#engine.abortServer(server);
    this.#producers[server] = null;
    this.#events.serverFailed?.(server, error);
  }

  // ---- internals -------------------------------------------------------------------------------

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

  #controlPending(): boolean {
    return this.#control.pending() !== null;
  }

  #runControl(): void {
    const command = this.#control.pending();
    if (command === null) return;
    const engine = this.#engine;
    switch (command.code) {
      case ControlCommand.Pause:
        engine.pause();
        this.#control.complete(ControlResult.Ok, engine.stats().weightVersion);
        break;
      case ControlCommand.Resume:
        engine.resume();
        this.#control.complete(ControlResult.Ok, engine.stats().weightVersion);
        break;
      case ControlCommand.UpdateWeights: {
        const version = command.args[0]! > 0 ? command.args[0]! : undefined;
        this.#control.complete(ControlResult.Ok, engine.updateWeights(version));
        break;
      }
      case ControlCommand.ResetPrefixCache:
        this.#control.complete(
          engine.resetPrefixCache() ? ControlResult.Ok : ControlResult.Failed,
          0,
        );
        break;
      default:
        this.#control.complete(ControlResult.UnknownCommand, 0);
    }
    this.#publish(0);
  }

  #publish(lastStepMs: number): void {
    const { i32, f64 } = this.#region;
    const s = this.#engine.stats(this.#stats);
    this.#stats = s;
    const base = ENGINE_STATS >> 3;
    Atomics.add(i32, ENG_STATS_SEQ >> 2, 1);
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
    Atomics.add(i32, ENG_STATS_SEQ >> 2, 1);
    f64[ENG_LAST_BEAT_MS >> 3] = Date.now();
    Atomics.add(i32, ENG_HEARTBEAT >> 2, 1);
    Atomics.store(
      i32,
      ENG_STATE >> 2,
      this.#engine.paused ? ENGINE_STATE_PAUSED : ENGINE_STATE_RUNNING,
    );
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const yieldToEventLoop = (): Promise<void> => new Promise((r) => setImmediate(r));
