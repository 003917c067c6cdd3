import type { EngineCore } from '../engine/engine-core.js';
import type { OutputRoom } from '../engine/output-room.js';
import { StepOutputs } from '../engine/step-outputs.js';
import { RS_ERR_CONFIG_INVALID } from '../errors.js';
import type { BroadcasterArgs, LoraAdapter } from '../wire/admin-args.js';
import { ChurnMap } from '../wire/churn-map.js';
import { ENGINE_LIMITS } from '../wire/engine-defaults.js';
import { combine, mix32 } from '../wire/hash.js';
import type { ModelCard } from '../wire/model-card.js';
import { RejectReason } from '../wire/reject.js';
import {
  type EngineRequest,
  type EngineStats,
  FinishReason,
  type StepTiming,
} from '../wire/types.js';
import {
  type EngineConfig,
  type ResolvedEngineConfig,
  resolveEngineConfig,
} from './engine-config.js';
import { ExternalKv, type ExternalKvCounters } from './external-kv.js';
import { KvBlockPool } from './kv-block-pool.js';
import { targetLength } from './length-profile.js';
import { SimLoraAdapters } from './lora-adapters.js';
import { SimModel } from './model.js';
import { ModelRunner } from './model-runner.js';
import type { ModelPreset } from './presets.js';
import { checkRequest } from './request-check.js';
import { ExpertRouter } from './routing.js';
import { Sampler } from './sampler.js';
import { Scheduler } from './scheduler.js';
import { Sequence } from './sequence.js';
import { StepClock } from './step-clock.js';

const TWO_POW_32 = 4294967296;

/** An output decided outside a model step: a reject or an abort confirmation. */
interface PendingOutput {
  server: number;
  slot: number;
  finish: FinishReason;
  reason: RejectReason;
}

/**
 * The simulated engine core, in-process: add requests, step, read columnar outputs. Every output
 * is a deterministic function of (model seed, weight version, prompt, request seed, sampling
 * params), whatever else is in the batch, however the prompt was chunked, and across preemptions.
 * A request the engine cannot run becomes a finished-with-Error output; nothing a request carries
 * makes add() or step() throw.
 */
export class SimEngine implements EngineCore {
  readonly config: ResolvedEngineConfig;
  readonly #model: SimModel;
  readonly #router: ExpertRouter;
  readonly #pool: KvBlockPool;
  readonly #scheduler: Scheduler;
  readonly #runner: ModelRunner;
  readonly #clock: StepClock;
  readonly #external: ExternalKv;
  readonly #counters = {
    numPreemptions: 0,
    prefixQueries: 0,
    prefixHits: 0,
    promptTokens: 0,
    generationTokens: 0,
    kvImports: 0,
    kvImportFailures: 0,
    kvImportedTokens: 0,
    offloadLoadedBlocks: 0,
  };
  /** In-flight requests by (server, slot). */
  readonly #bySlot = new ChurnMap<number, Sequence>();
  /** Outputs decided outside a model step (rejects, aborts), emitted at the next step. */
  readonly #pending: PendingOutput[] = [];
  readonly #timing: StepTiming = {
    ms: 0,
    sampledSeqs: 0,
    decodeSeqs: 0,
    prefillTokens: 0,
    totalContext: 0,
    generatedTokens: 0,
  };
  readonly #lora = new SimLoraAdapters();
  #broadcaster: BroadcasterArgs | null = null;
  #note: string | undefined = undefined;
  #nextId = 0;
  #paused = false;
  #steps = 0;

  constructor(config: EngineConfig) {
    const cfg = resolveEngineConfig(config);
    this.config = cfg;
    this.#model = new SimModel(cfg.preset, cfg.seed, cfg.weightVersion);
    this.#router = new ExpertRouter(cfg.preset);
    this.#router.setWeightKey(this.#model.weightKey);
    this.#pool = new KvBlockPool(cfg.numGpuBlocks);
    this.#external = new ExternalKv(
      {
        ...cfg,
        kvBytesPerToken: cfg.preset.stepTime.kvBytesPerToken,
        timeScale: cfg.maxSpeed ? 0 : 1 / cfg.speedup,
      },
      this.#counters,
    );
    this.#pool.spill = this.#external.tier;
    this.#scheduler = new Scheduler(cfg, this.#pool, this.#counters, this.#external);
    const sampler = new Sampler(this.#model);
    this.#runner = new ModelRunner(
      cfg,
      this.#model,
      this.#router,
      sampler,
      this.#pool,
      this.#counters,
    );
    this.#clock = new StepClock(cfg.preset.stepTime, cfg.speedup, cfg.maxSpeed);
  }

  /** The model preset this engine simulates. */
  get preset(): ModelPreset {
    return this.config.preset;
  }

  get model(): ModelCard {
    return this.config.preset;
  }

  /** A StepOutputs shaped for this engine's routing rows (layers x topk, uint8 or uint16). */
  newStepOutputs(rowCapacity = 256): StepOutputs {
    const out = new StepOutputs(rowCapacity);
    const r = this.#router;
    out.shapeRouting(r.layers, r.topk, r.numExperts);
    return out;
  }

  /**
   * Refuses a request the caller could not even decode (the engine process's malformed ADD
   * record): an Error output for (server, slot) at the next step. An in-flight request on that
   * slot is ended with it.
   */
  reject(server: number, slot: number, reason: RejectReason = RejectReason.MalformedRecord): void {
    const key = slotKey(server, slot);
    const existing = this.#bySlot.get(key);
    if (existing !== undefined) {
      this.#scheduler.remove(existing);
      this.#bySlot.delete(key);
    }
    this.#pending.push({ server, slot, finish: FinishReason.Error, reason });
  }

  add(req: EngineRequest): void {
    const reason = checkRequest(req, this.config);
    if (reason !== RejectReason.None) {
      // A route that is not an integer becomes -1, never another request's (server, slot).
      this.#pending.push({
        server: Number.isInteger(req.server) ? req.server : -1,
        slot: Number.isInteger(req.slot) ? req.slot : -1,
        finish: FinishReason.Error,
        reason,
      });
      return;
    }
    const key = slotKey(req.server, req.slot);
    if (this.#bySlot.has(key)) {
      // Two requests on one slot means the producer lost track of it: end both, report once.
      this.reject(req.server, req.slot, RejectReason.DuplicateSlot);
      return;
    }
    const loraId = req.loraId ?? 0;
    const adapterKey = loraId === 0 ? 0 : this.#lora.key(loraId);
    if (adapterKey === undefined) {
      this.#pending.push({
        server: req.server,
        slot: req.slot,
        finish: FinishReason.Error,
        reason: RejectReason.LoraNotLoaded,
      });
      return;
    }
    const seed = req.params.seed ?? this.#drawSeed();
    const seq = new Sequence(this.#nextId++, req, seed, adapterKey, this.config.blockSize);
    // The target length depends on the seed and the prompt, not on the weights.
    const target = targetLength(this.config.lengthProfile, combine(seq.seedKey, seq.contextHash));
    // A scripted answer: the model goes on for a response of its own length after the script, or
    // aims to end right after it when the script ends the answer (so the EOS that follows is the
    // model's likeliest token there, not a background-level one). The script's own positions see
    // EOS at its background level either way.
    const script = seq.script;
    if (script === null) seq.targetLength = target;
    else seq.targetLength = script.length + (seq.scriptEnds ? 1 : target);
    this.#bySlot.set(key, seq);
    this.#scheduler.waiting.add(seq);
  }

  /** Ends a request: an Abort output at the next step, its blocks freed now. Unknown: ignored. */
  abort(server: number, slot: number): void {
    const key = slotKey(server, slot);
    const seq = this.#bySlot.get(key);
    if (seq === undefined) return; // already finished (its output was sent) or never added
    this.#scheduler.remove(seq);
    this.#bySlot.delete(key);
    this.#pending.push({ server, slot, finish: FinishReason.Abort, reason: RejectReason.None });
  }

  /** An API server died: drop all its requests and pending outputs, free their blocks, no outputs. */
  abortServer(server: number): void {
    for (const [key, seq] of this.#bySlot) {
      if (seq.server !== server) continue;
      this.#scheduler.remove(seq);
      this.#bySlot.delete(key);
    }
    for (let i = this.#pending.length - 1; i >= 0; i--) {
      if (this.#pending[i]?.server === server) this.#pending.splice(i, 1);
    }
  }

  /** No model steps run while paused; requests keep their state; rejects and aborts still go out. */
  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    this.#paused = false;
  }

  get paused(): boolean {
    return this.#paused;
  }

  /** The weight version tokens are sampled under now. */
  get weightVersion(): number {
    return this.#model.weightVersion;
  }

  /** Sets the weight version (or increments it); in-flight requests continue on the new weights. */
  updateWeights(version?: number): number {
    const next = version ?? this.#model.weightVersion + 1;
    const { min, max } = ENGINE_LIMITS.weightVersion;
    if (!Number.isInteger(next) || next < min || next > max) {
      throw new RS_ERR_CONFIG_INVALID(
        'weight_version',
        `must be an integer in [${min}, ${max}], got ${next}`,
      );
    }
    this.#model.setWeightVersion(next);
    this.#router.setWeightKey(this.#model.weightKey);
    return next;
  }

  /**
   * prime-rl's init_broadcaster: the rendezvous is recorded (the engine note names it) and each
   * later update without a weight directory is one broadcast, advancing the weight version.
   */
  initBroadcaster(args: BroadcasterArgs): void {
    this.#broadcaster = args;
    const ranks = `${args.rankOffset}+${args.inferenceWorldSize}`;
    this.#note = JSON.stringify({
      reason: null,
      info: {
        weight_broadcaster: `${args.host}:${args.port}`,
        weight_broadcaster_ranks: ranks,
        weight_broadcaster_session: args.sessionId,
      },
    });
  }

  /** The trainer's broadcaster this engine joined, or null. */
  get broadcaster(): BroadcasterArgs | null {
    return this.#broadcaster;
  }

  /** What the engine says of itself (the broadcaster it joined); none until then. */
  get note(): string | undefined {
    return this.#note;
  }

  /** Loads (or reloads) a LoRA adapter's files (lora-adapters.ts); requests in flight keep theirs. */
  loadLora(adapter: LoraAdapter): Promise<void> {
    return this.#lora.load(adapter);
  }

  unloadLora(adapter: LoraAdapter): void {
    this.#lora.unload(adapter);
  }

  loraLoaded(id: number): boolean {
    return this.#lora.key(id) !== undefined;
  }

  /** The ids of the adapters loaded (vLLM's list_loras). */
  loraIds(): number[] {
    return this.#lora.ids();
  }

  /** Forgets all cached prefixes; false (nothing done) while requests hold blocks, as vLLM. */
  resetPrefixCache(): boolean {
    if (!this.#pool.resetPrefixCache()) return false;
    this.#external.tier?.clear();
    return true;
  }

  /** Whether step() has anything to do (paused: only pending reject/abort outputs count). */
  hasWork(): boolean {
    if (this.#pending.length > 0) return true;
    return !this.#paused && this.#bySlot.size > 0;
  }

  /**
   * Runs one step, appending its outputs to `out` (the caller clears it); with `room`, only the
   * outputs the API servers' output rings can take (EngineCore.step).
   */
  step(out: StepOutputs, room?: OutputRoom): StepTiming {
    const t = this.#timing;
    t.ms = 0;
    t.sampledSeqs = 0;
    t.decodeSeqs = 0;
    t.prefillTokens = 0;
    t.totalContext = 0;
    t.generatedTokens = 0;
    const r = this.#router;
    out.shapeRouting(r.layers, r.topk, r.numExperts);
    this.#flushPending(out, room ?? null);
    const scheduler = this.#scheduler;
    const now = performance.now();
    if (scheduler.pinned.length > 0) scheduler.releaseExpiredPins(now);
    if (this.#paused || this.#bySlot.size === 0) return t;
    scheduler.nowMs = now;
    scheduler.schedule(room ?? null);
    if (scheduler.batchSize === 0) {
      // Only requests whose KV is loading: rest until the first has arrived.
      if (scheduler.nextReadyMs !== Number.POSITIVE_INFINITY) t.ms = scheduler.nextReadyMs - now;
      return t;
    }
    this.#runner.run(scheduler, out, t);
    const runner = this.#runner;
    const pinUntil = now + this.config.kvTransferTimeoutS * 1000;
    for (let i = 0; i < runner.finishedCount; i++) {
      const seq = runner.finished[i] as Sequence;
      if (seq.pinKv) scheduler.pin(seq, pinUntil);
      else scheduler.remove(seq);
      this.#bySlot.delete(slotKey(seq.server, seq.slot));
    }
    this.#steps++;
    this.#clock.time(t);
    return t;
  }

  stats(into?: EngineStats): EngineStats {
    const s = into ?? ({} as EngineStats);
    const c = this.#counters;
    s.running = this.#scheduler.running.length;
    s.waiting = this.#scheduler.waiting.length;
    s.kvUsage = this.#pool.numUsed / this.#pool.numBlocks;
    s.numPreemptions = c.numPreemptions;
    s.prefixQueries = c.prefixQueries;
    s.prefixHits = c.prefixHits;
    s.promptTokens = c.promptTokens;
    s.generationTokens = c.generationTokens;
    s.weightVersion = this.#model.weightVersion;
    s.numGpuBlocks = this.#pool.numBlocks;
    s.blockSize = this.config.blockSize;
    s.steps = this.#steps;
    s.externalHitTokens = c.kvImportedTokens + c.offloadLoadedBlocks * this.config.blockSize;
    s.kvLoadFailures = c.kvImportFailures;
    s.offloadStoredBlocks = this.#external.tier?.numStored ?? 0;
    s.offloadLoadedBlocks = c.offloadLoadedBlocks;
    return s;
  }

  /** P/D imports and CPU-tier reloads so far (external-kv.ts). */
  get kvTransferCounters(): Readonly<ExternalKvCounters> {
    return this.#counters;
  }

  /**
   * P/D: the KV a request of (server, slot) that finished in the last step kept pinned (it was
   * added with pinKv), for a decode engine to read: the blocks of its prompt, until `untilMs`
   * (performance.now() time). null when it kept none (it did not finish normally).
   */
  heldKv(server: number, slot: number): HeldKv | null {
    const seq = this.#scheduler.pinnedAt(server, slot);
    if (seq === undefined) return null;
    const blocks = Math.min(seq.numBlocks, Math.ceil(seq.numPromptTokens / this.config.blockSize));
    return {
      id: seq.id,
      blockIds: Array.from(seq.blocks.subarray(0, blocks)),
      numTokens: seq.numPromptTokens,
      untilMs: seq.pinnedUntilMs,
    };
  }

  /** Frees the pinned KV of request `id` (heldKv's) now; false if it was gone already. */
  releaseHeldKv(id: number): boolean {
    return this.#scheduler.releasePin(id);
  }

  /** Blocks currently free in the KV pool (tests check all are free after finish/abort). */
  get numFreeBlocks(): number {
    return this.#pool.numFree;
  }

  /**
   * Emits the pending abort and reject rows, oldest first; those of an API server whose output ring
   * has no room stay pending, in order (at most one per slot of that server).
   */
  #flushPending(out: StepOutputs, room: OutputRoom | null): void {
    const version = this.#model.weightVersion;
    const pending = this.#pending;
    let kept = 0;
    for (let i = 0; i < pending.length; i++) {
      const p = pending[i] as PendingOutput;
      if (room !== null && !room.tryCharge(p.server, 0, 0)) {
        pending[kept++] = p;
        continue;
      }
      const row = out.addRow(p.server, p.slot, version);
      out.finish[row] = p.finish;
      out.rejectReason[row] = p.reason;
    }
    pending.length = kept;
  }

  /** A 53-bit seed for a request that has none, from the engine seed and a counter. */
  #drawSeed(): number {
    const n = this.#nextId;
    const lo = combine(mix32(this.config.seed ^ 0x9e3779b9), n);
    const hi = combine(lo, n) & 0x1fffff;
    return hi * TWO_POW_32 + (lo >>> 0);
  }
}

/** A finished request's pinned KV (SimEngine.heldKv). */
export interface HeldKv {
  /** The engine's id of the request (for releaseHeldKv). */
  id: number;
  /** Its prompt's KV blocks, in order. */
  blockIds: number[];
  numTokens: number;
  /** The pin's end (performance.now() time); the blocks are freed after it. */
  untilMs: number;
}

function slotKey(server: number, slot: number): number {
  return server * TWO_POW_32 + slot;
}
