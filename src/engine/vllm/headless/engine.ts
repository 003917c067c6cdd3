import { setTimeout as sleep, setImmediate as turn } from 'node:timers/promises';
import { RS_ERR_VLLM_BAD_FIELD } from '../../../errors.js';
import type { BroadcasterArgs, LoraAdapter } from '../../../wire/admin-args.js';
import { MAX_SLOTS_PER_SERVER } from '../../../wire/engine-defaults.js';
import { expertIdBytes } from '../../../wire/model-card.js';
import { RejectReason } from '../../../wire/reject.js';
import { maskableSampling } from '../../../wire/sampling-check.js';
import type { EngineStats, StepTiming } from '../../../wire/types.js';
import type { EngineCore } from '../../engine-core.js';
import type { StepOutputs } from '../../step-outputs.js';
import type { VllmLayout } from '../layouts.js';
import {
  ENGINE_CORE_DEAD,
  encodeUtilityReply,
  encodeWaveMessage,
  OutputsEncoder,
  type SchedulerStatsFields,
} from '../outputs.js';
import {
  type DecodedAddRequest,
  decodeAbort,
  decodeAdd,
  decodeStartDpWave,
  decodeUtility,
  RequestType,
  readLoraRequest,
  type UtilityCall,
  type VllmLoraRequest,
} from '../requests.js';
import { routingShapeOf } from '../routing-shape.js';
import type { HeadlessSockets } from './dial.js';
import type { DpGroup } from './dp-group.js';
import { DpWaveState } from './dp-wave.js';
import { type EngineWide, promptLogprobsOf, toEngineRequest } from './engine-request.js';
import { LiveRequests } from './live-requests.js';
import { type AdmitKv, type KvPlan, type NixlConnector, PLAIN_KV } from './nixl-connector.js';
import { StepEncoder } from './step-encoder.js';
import { collectiveRpc } from './weight-rpc.js';

/**
 * The simulator behind vLLM's engine protocol, once the handshake is done: ADD, ABORT and UTILITY
 * messages from the input DEALER drive an engine core (the simulator), and every step goes out on
 * the output PUSH as an EngineCoreOutputs (step-encoder.ts has the output rules). What vLLM's
 * EngineCoreProc does is the reference (docs/vllm-protocol.md, "Requests", "Failures"): an
 * ABORTed request gets no output; an ADD that decodes but cannot run ends with finish_reason
 * ERROR (so does one that samples greedily or without top_k while sampling masks are on, which
 * vLLM refuses then); a duplicate live request id or a routed_experts_prompt_start past the prompt
 * (routing on) is fatal, announced by ENGINE_CORE_DEAD. Unlike vLLM, an ADD that fails to decode
 * is logged and dropped instead of silently ending the input thread.
 *
 * As a MoE rank of a DP group (`dp`), it runs vLLM's DPEngineCoreProc loop (dp-wave.ts): every step
 * goes through the group (dp-group.ts) and lasts the slowest rank's time, an idle rank steps a
 * dummy batch while the group is in a wave, START_DP_WAVE wakes it, and each wave's end sends
 * wave_complete. Without `dp` (one rank, or a dense model's independent rank) START_DP_WAVE is an
 * unknown request, logged and dropped, as vLLM's EngineCoreProc does. A paused rank with requests
 * keeps stepping dummy batches, as vLLM's does (its requests keep the all-reduce's "unfinished"
 * true, so the group's wave goes on), but each lasts at least PAUSED_DUMMY_STEP_MS: at max speed
 * a dummy step is free, and the group would spin for as long as the pause lasts. The engine closes
 * its group when it ends, which settles a step waiting there; a group that closes under a running
 * engine (another process joined as this rank and replaced it) is fatal, as a failed collective
 * is for vLLM.
 */

/**
 * The least time of a dummy step of a paused rank that has requests (a vLLM rank paused with
 * mode "keep" steps dummy batches, each a real forward): keeps a paused group from spinning.
 */
export const PAUSED_DUMMY_STEP_MS = 10;

/** What the headless engine drives: a synchronous engine core (the simulator is one). */
export interface HeadlessCore extends EngineCore {
  pause(): void;
  resume(): void;
  resetPrefixCache(): boolean;
  updateWeights(version?: number): number;
  initBroadcaster(args: BroadcasterArgs): void;
  readonly broadcaster: BroadcasterArgs | null;
  loadLora(adapter: LoraAdapter): Promise<void>;
  unloadLora(adapter: LoraAdapter): void;
  loraLoaded(id: number): boolean;
  loraIds(): number[];
}

/** The log calls the engine makes (pino's Logger has them). */
export interface HeadlessLog {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
  fatal(fields: object, message: string): void;
}

type PauseMode = 'abort' | 'wait' | 'keep';

/** A utility reply that waits for the scheduler (pause "wait"/"abort" reply once it holds). */
interface PendingReply {
  callId: number | bigint;
  ready: () => boolean;
  value: () => unknown;
}

/** An error that ends the engine (vLLM: raised in the busy loop, then ENGINE_CORE_DEAD). */
class FatalEngineError extends Error {}

export type HeadlessOutcome = 'stopped' | 'frontend-gone' | 'fatal';

/** What makes the engine a MoE rank of a DP group. */
export interface HeadlessDp {
  /** The formed group (dp-group.ts openDpGroup); the engine closes it when it stops. */
  group: DpGroup;
  /** Modelled time of a dummy step (an empty forward): the preset's base step time, 0 at max speed. */
  dummyStepMs: number;
}

export interface HeadlessEngineOptions {
  engine: HeadlessCore;
  layout: VllmLayout;
  sockets: HeadlessSockets;
  /**
   * vLLM's engine-wide flags: --enable-return-routed-experts (every request's outputs carry
   * routing rows), --enable-return-sampling-mask (and sampling masks, as new_sampling_mask).
   */
  wide: EngineWide;
  /** The DP rank: EngineCoreOutputs.engine_index. */
  rank: number;
  log: HeadlessLog;
  /** --kv-transfer-config's NIXL side of a prefill/decode pair; absent: kv_transfer_params ignored. */
  nixl?: NixlConnector | null;
  /** A MoE rank of a DP group of more than one rank: lockstep waves; absent: none. */
  dp?: HeadlessDp | null;
}

export class VllmHeadlessEngine {
  readonly #sim: HeadlessCore;
  readonly #layout: VllmLayout;
  readonly #sockets: HeadlessSockets;
  readonly #wide: EngineWide;
  readonly #rank: number;
  readonly #log: HeadlessLog;
  readonly #table = new LiveRequests(MAX_SLOTS_PER_SERVER);
  readonly #out: StepOutputs;
  readonly #encoder: StepEncoder;
  /** ADDs that came while the scheduler is paused: admitted on resume, as vLLM queues them. */
  #held: DecodedAddRequest[] = [];
  /** ADDs whose LoRA adapter is being loaded (vLLM loads one from lora_path when a request needs it). */
  #loading: DecodedAddRequest[] = [];
  readonly #loads = new Map<number, Promise<void>>();
  readonly #nixl: NixlConnector | null;
  /** Requests whose remote KV load has settled, until admitted. */
  readonly #kvReady = new WeakMap<DecodedAddRequest, AdmitKv>();
  #paused = false;
  #pending: PendingReply[] = [];
  #wake: (() => void) | null = null;
  #outcome: HeadlessOutcome | null = null;
  /** The wire bytes of the last #stepOnce's message (null: nothing to send). */
  #message: Buffer | null = null;
  readonly #dp: HeadlessDp | null;
  readonly #wave: DpWaveState | null;
  readonly #stats: SchedulerStatsFields = {
    numRunningReqs: 0,
    numWaitingReqs: 0,
    kvCacheUsage: 0,
    prefixRequests: 0,
    prefixQueries: 0,
    prefixHits: 0,
    stepCounter: 0,
  };
  readonly #engineStats = {} as EngineStats;
  #lastQueries = 0;
  #lastHits = 0;

  constructor(o: HeadlessEngineOptions) {
    this.#sim = o.engine;
    this.#layout = o.layout;
    this.#sockets = o.sockets;
    this.#wide = o.wide;
    this.#rank = o.rank;
    this.#log = o.log;
    this.#nixl = o.nixl ?? null;
    this.#dp = o.dp ?? null;
    this.#wave = this.#dp === null ? null : new DpWaveState(o.rank);
    this.#out = o.engine.newStepOutputs();
    const card = o.engine.model;
    this.#encoder = new StepEncoder(o.layout, {
      ...routingShapeOf(card),
      wide: expertIdBytes(card) === 2,
    });
  }

  /** The DP wave state of a MoE DP rank (read it, do not change it), or null. */
  get dpWave(): Readonly<DpWaveState> | null {
    return this.#wave;
  }

  /** Whether this MoE DP rank's step waits in the group's collective for the other ranks. */
  get waitingInGroup(): boolean {
    return this.#dp?.group.waiting === true;
  }

  /** Runs until stop(), the frontend's disconnection or a fatal error; resolves with which. */
  async run(): Promise<HeadlessOutcome> {
    const input = this.#sockets.input;
    void this.#sockets.gone.then(() => this.#end('frontend-gone'));
    const receiving = this.#receive();
    try {
      const dp = this.#dp;
      const wave = this.#wave;
      if (dp !== null && wave !== null) await this.#dpLoop(dp, wave);
      else await this.#loop();
    } catch (error) {
      this.#log.fatal({ err: error }, 'engine step failed');
      this.#outcome = 'fatal';
    }
    if (this.#outcome === 'fatal') {
      // vLLM's busy loop sends ENGINE_CORE_DEAD on any fatal error, then exits.
      this.#send([ENGINE_CORE_DEAD]);
    }
    this.#dp?.group.close();
    input.close();
    // Its linger (4 s, as vLLM's) lets a last ENGINE_CORE_DEAD leave.
    await this.#sockets.output.close();
    await receiving;
    return this.#outcome ?? 'stopped';
  }

  stop(): void {
    this.#end('stopped');
  }

  #end(outcome: HeadlessOutcome): void {
    this.#outcome ??= outcome;
    this.#wake?.();
    // A step waiting in the group settles (null) now, and the other ranks go on without this one.
    this.#dp?.group.close();
  }

  async #loop(): Promise<void> {
    const sim = this.#sim;
    while (this.#outcome === null) {
      if (!sim.hasWork()) {
        await this.#idle();
        continue;
      }
      const started = performance.now();
      const timing = this.#stepOnce();
      if (this.#message !== null) this.#sendEncoded(this.#message);
      this.#answerPending();
      await pace(started, timing.ms);
    }
  }

  /** Answers the replies that were waiting for the scheduler, then waits for a wake (#wake). */
  async #idle(): Promise<void> {
    this.#answerPending();
    await new Promise<void>((resolve) => {
      this.#wake = resolve;
    });
    this.#wake = null;
  }

  /** One step of the simulator, its outputs encoded into #message; returns its timing. */
  #stepOnce(): StepTiming {
    const out = this.#out;
    out.clear();
    const timing = this.#sim.step(out);
    this.#nixl?.afterStep(out, this.#table);
    this.#message = this.#encoder.encodeWire(
      out,
      this.#table,
      this.#rank,
      this.#schedulerStats(),
      monotonicSeconds(),
    );
    return timing;
  }

  /**
   * DPEngineCoreProc.run_busy_loop: a rank with requests steps; one with none steps a dummy batch
   * while the group is in a wave; each step passes through the group (the MoE collectives: the
   * step waits for every rank and lasts the slowest one's time) before its outputs go out, and
   * when the group's sync step finds no rank with unfinished requests, the wave ends: this rank
   * sends wave_complete to client 0 (every rank does, without a coordinator) and idles.
   */
  async #dpLoop(dp: HeadlessDp, wave: DpWaveState): Promise<void> {
    const sim = this.#sim;
    const group = dp.group;
    group.runningProbe = () => wave.running;
    group.onWake = () => {
      wave.running = true;
      this.#wake?.();
    };
    // wave_complete messages: one small writer and one message object, reused every wave.
    const waveEncoder = new OutputsEncoder(this.#layout, 128);
    const message = { complete: 0, start: null };
    while (this.#outcome === null) {
      const work = sim.hasWork();
      if (!work && !wave.running && !this.#hasRequests()) {
        await this.#idle();
        continue;
      }
      const started = performance.now();
      let stepMessage: Buffer | null = null;
      let ms = dp.dummyStepMs;
      if (work) {
        const timing = this.#stepOnce();
        stepMessage = this.#message;
        // A step that forwarded nothing (only requests whose KV is still loading) is a dummy
        // batch in vLLM's loop: the group does not wait out the load in one step.
        if (timing.decodeSeqs > 0 || timing.prefillTokens > 0) ms = timing.ms;
      } else if (this.#paused) {
        // Paused with requests (or held ADDs): dummy batches until resume, not a spin.
        ms = Math.max(ms, PAUSED_DUMMY_STEP_MS);
      }
      const result = await group.step(this.#hasRequests(), ms);
      if (result === null) {
        // The engine closed it (#end), or it closed under the engine: this rank was replaced.
        if (this.#outcome === null) {
          this.#log.fatal(
            { dp_rank: this.#rank },
            'the DP group closed under this rank (another process joined as it): the engine dies',
          );
          this.#end('fatal');
        }
        break;
      }
      if (this.#outcome !== null) break;
      if (stepMessage !== null) this.#sendEncoded(stepMessage);
      const ended = wave.afterStep(result.sync, result.anyUnfinished);
      if (ended !== null) {
        message.complete = ended;
        const at = monotonicSeconds();
        this.#send(encodeWaveMessage(this.#layout, this.#rank, message, at, waveEncoder));
      }
      this.#answerPending();
      await pace(started, result.ms);
    }
  }

  /** vLLM's scheduler.has_unfinished_requests(): live, queued or loading requests. */
  #hasRequests(): boolean {
    return (
      this.#table.size > 0 ||
      this.#held.length > 0 ||
      this.#loading.length > 0 ||
      this.#sim.hasWork()
    );
  }

  async #receive(): Promise<void> {
    try {
      for await (const frames of this.#sockets.input) {
        if (this.#outcome !== null) break;
        try {
          this.#handle(frames);
        } catch (error) {
          if (error instanceof FatalEngineError) {
            this.#log.fatal({ err: error }, 'fatal request: the engine dies, as vLLM does');
            this.#end('fatal');
          } else {
            this.#log.error({ err: error }, 'dropped an undecodable message from the frontend');
          }
        }
        this.#wake?.();
      }
    } catch (error) {
      if (this.#outcome === null) this.#log.error({ err: error }, 'input socket failed');
      this.#end('frontend-gone');
    }
  }

  #handle(frames: Buffer[]): void {
    const type = frames[0];
    const payload = frames[1];
    if (type === undefined || type.length !== 1 || payload === undefined) {
      throw new RS_ERR_VLLM_BAD_FIELD('type', 'expected [type byte, payload]');
    }
    switch (type[0]) {
      case RequestType.Add:
        this.#add(decodeAdd(this.#layout, payload));
        break;
      case RequestType.Abort:
        this.#abort(decodeAbort(payload));
        break;
      case RequestType.Utility:
        this.#utility(decodeUtility(payload));
        break;
      case RequestType.StartDpWave:
        if (this.#wave !== null) {
          const { wave, exclude } = decodeStartDpWave(payload);
          this.#wave.startWave(wave, exclude);
          break;
        }
        throw new RS_ERR_VLLM_BAD_FIELD('type', `request type ${type[0]} is not served`);
      default:
        throw new RS_ERR_VLLM_BAD_FIELD('type', `request type ${type[0]} is not served`);
    }
  }

  #add(req: DecodedAddRequest): void {
    if (req.clientIndex !== 0) {
      throw new RS_ERR_VLLM_BAD_FIELD(
        'client_index',
        `only client 0 is served, got ${req.clientIndex}`,
      );
    }
    if (
      this.#table.get(req.requestId) !== undefined ||
      this.#held.some((h) => h.requestId === req.requestId) ||
      this.#loading.some((h) => h.requestId === req.requestId)
    ) {
      throw new FatalEngineError(`request id ${req.requestId} is already live`);
    }
    if (
      this.#wide.routedExperts &&
      req.params.routedExpertsPromptStart >= req.promptTokenIds.length
    ) {
      throw new FatalEngineError(
        `routed_experts_prompt_start ${req.params.routedExpertsPromptStart} >= prompt length ${req.promptTokenIds.length}`,
      );
    }
    if (this.#paused || this.#pending.length > 0) this.#held.push(req);
    else this.#admit(req);
    // A MoE DP rank with work steps, in the group's current wave or in a new one.
    if (this.#wave !== null) this.#wave.running = true;
  }

  #admit(req: DecodedAddRequest): void {
    const lora = req.lora ?? null;
    if (lora !== null && !this.#sim.loraLoaded(lora.id)) {
      this.#loadThenAdmit(req, lora);
      return;
    }
    let kv = this.#kvReady.get(req);
    if (kv === undefined) {
      const plan = this.#nixl?.plan(req.params.kvTransferParams, req.requestId) ?? null;
      if (plan !== null && plan.handle !== null) {
        this.#loadKvThenAdmit(req, plan);
        return;
      }
      kv = plan?.remoteDecode === true ? { ...PLAIN_KV, pinKv: true } : PLAIN_KV;
    }
    this.#kvReady.delete(req);
    const p = req.params;
    const wide = this.#wide;
    const live = this.#table.add(
      req.requestId,
      req.promptTokenIds.length,
      p.logprobs !== null,
      wide.samplingMasks,
      promptLogprobsOf(p.promptLogprobs),
    );
    live.remoteDecode = kv.pinKv;
    live.importedTokens = Math.min(kv.importKvTokens, req.promptTokenIds.length - 1);
    live.kvDone = kv.done;
    if (kv.failed) {
      // kv_load_failure_policy "fail": the request finishes with ERROR, as vLLM's does.
      this.#sim.reject(0, live.slot, RejectReason.EngineFailed);
      return;
    }
    const request = toEngineRequest(req, live.slot, wide, kv);
    // vLLM refuses greedy sampling and sampling without top_k while its mask capture is on: the
    // request ends with finish_reason ERROR, the engine carries on.
    if (wide.samplingMasks && !maskableSampling(request.params)) {
      this.#sim.reject(0, live.slot, RejectReason.BadParams);
      return;
    }
    this.#sim.add(request);
  }

  /**
   * Loads the adapter a request names, then admits it (and every other request waiting on that
   * adapter); an adapter that does not load ends the request with finish_reason ERROR, as vLLM's
   * LRU manager fails it.
   */
  #loadThenAdmit(req: DecodedAddRequest, lora: VllmLoraRequest): void {
    this.#loading.push(req);
    let load = this.#loads.get(lora.id);
    if (load === undefined) {
      load = this.#sim.loadLora({ id: lora.id, name: lora.name, path: lora.path });
      this.#loads.set(lora.id, load);
    }
    const settle = (loaded: boolean): void => {
      this.#loads.delete(lora.id);
      const at = this.#loading.indexOf(req);
      if (at < 0) return; // aborted meanwhile
      this.#loading.splice(at, 1);
      if (loaded) {
        if (this.#paused) this.#held.push(req);
        else this.#admit(req);
        return;
      }
      const live = this.#table.add(req.requestId, req.promptTokenIds.length, false, false);
      this.#sim.reject(0, live.slot, RejectReason.EngineFailed);
      this.#wake?.();
    };
    load.then(
      () => settle(true),
      (error: unknown) => {
        this.#log.warn(
          { err: error, lora: lora.name },
          'a request names a LoRA adapter that did not load',
        );
        settle(false);
      },
    );
  }

  /**
   * Reads the remote KV a decode request's handle names (nixl-connector.ts), then admits it with
   * the import, or as kv_load_failure_policy says when the load failed.
   */
  #loadKvThenAdmit(req: DecodedAddRequest, plan: KvPlan): void {
    const nixl = this.#nixl as NixlConnector;
    this.#loading.push(req);
    void nixl.loadFor(req.requestId, plan).then((kv) => {
      const at = this.#loading.indexOf(req);
      if (at < 0) {
        kv.done?.(); // aborted meanwhile: the prefill engine may free the blocks
        return;
      }
      this.#loading.splice(at, 1);
      this.#kvReady.set(req, kv);
      if (this.#paused) this.#held.push(req);
      else this.#admit(req);
      this.#wake?.();
    });
  }

  #abort(ids: string[]): void {
    for (const id of ids) {
      const live = this.#table.get(id);
      if (live !== undefined) {
        live.clientAborted = true;
        this.#sim.abort(0, live.slot);
      }
    }
    if (this.#held.length > 0) this.#held = this.#held.filter((h) => !ids.includes(h.requestId));
    if (this.#loading.length > 0) {
      this.#loading = this.#loading.filter((h) => !ids.includes(h.requestId));
    }
  }

  #utility(call: UtilityCall): void {
    const reply = (value: unknown): void => this.#reply(call.callId, null, value);
    const fail = (why: string): void =>
      this.#reply(call.callId, `Call to ${call.method} method failed: ${why}`, null);
    const args = call.args;
    switch (call.method) {
      case 'pause_scheduler':
        this.#pause(call, (args[0] ?? 'abort') as PauseMode, args[1] ?? true, fail);
        break;
      case 'resume_scheduler':
        this.#resume();
        reply(null);
        break;
      case 'is_scheduler_paused':
        reply(this.#paused);
        break;
      case 'reset_prefix_cache':
        reply(this.#sim.resetPrefixCache());
        break;
      case 'collective_rpc':
        collectiveRpc(call.args, this.#sim).then(reply, (e) => fail((e as Error).message));
        break;
      case 'add_lora': {
        let lora: VllmLoraRequest;
        try {
          lora = readLoraRequest(args[0], 'lora_request');
        } catch (error) {
          fail((error as Error).message);
          break;
        }
        // A load in place rereads the files; a plain add of a loaded id keeps them (vLLM's LRU).
        if (this.#sim.loraLoaded(lora.id) && lora.loadInplace !== true) {
          reply(true);
          break;
        }
        this.#sim.loadLora({ id: lora.id, name: lora.name, path: lora.path }).then(
          () => reply(true),
          (e) => fail((e as Error).message),
        );
        break;
      }
      case 'remove_lora': {
        const id = args[0];
        const known = typeof id === 'number' && this.#sim.loraLoaded(id);
        if (known) this.#sim.unloadLora({ id: id as number, name: '', path: '' });
        reply(known);
        break;
      }
      case 'list_loras':
        reply(this.#sim.loraIds());
        break;
      default:
        fail(`'EngineCoreProc' object has no attribute '${call.method}'`);
    }
  }

  #pause(
    call: UtilityCall,
    mode: PauseMode,
    clearCache: unknown,
    fail: (why: string) => void,
  ): void {
    if (mode !== 'abort' && mode !== 'wait' && mode !== 'keep') {
      fail(`mode must be "abort", "wait" or "keep", got ${String(mode)}`);
      return;
    }
    const holds = (): boolean => {
      this.#paused = true;
      this.#sim.pause();
      if (clearCache === true) this.#sim.resetPrefixCache();
      return true;
    };
    if (mode === 'keep') {
      holds();
      this.#reply(call.callId, null, null);
      return;
    }
    if (mode === 'abort') {
      // Everything is aborted with an output, queued requests included (vLLM aborts its waiting
      // queue too): the held ones are admitted first so that they end like the others.
      const held = this.#held;
      this.#held = [];
      for (const req of held) this.#admit(req);
      for (const live of this.#table.values()) this.#sim.abort(0, live.slot);
    }
    // Both reply once no request is left: "abort" once the abort outputs went out, "wait" once
    // the running requests finished. New ADDs wait meanwhile (#add holds them).
    this.#pending.push({
      callId: call.callId,
      ready: () => this.#table.size === 0 && holds(),
      value: () => null,
    });
  }

  #resume(): void {
    this.#paused = false;
    this.#sim.resume();
    const held = this.#held;
    this.#held = [];
    for (const req of held) this.#admit(req);
  }

  #answerPending(): void {
    if (this.#pending.length === 0) return;
    const left: PendingReply[] = [];
    for (const p of this.#pending) {
      if (p.ready()) this.#reply(p.callId, null, p.value());
      else left.push(p);
    }
    this.#pending = left;
  }

  #reply(callId: number | bigint, failure: string | null, result: unknown): void {
    const frames = encodeUtilityReply(
      this.#layout,
      this.#rank,
      { callId, failure, result },
      monotonicSeconds(),
    );
    this.#send(frames);
  }

  /** One message to the frontend, in order: the socket copies it (and holds it while reconnecting). */
  #send(frames: Buffer[]): void {
    try {
      this.#sockets.output.send(frames);
    } catch (error) {
      this.#outputFailed(error);
    }
  }

  /** A message already in its wire bytes (a step's: StepEncoder.encodeWire), which the socket keeps. */
  #sendEncoded(message: Buffer): void {
    try {
      this.#sockets.output.sendEncoded(message);
    } catch (error) {
      this.#outputFailed(error);
    }
  }

  #outputFailed(error: unknown): void {
    if (this.#outcome === null) this.#log.error({ err: error }, 'output socket failed');
    this.#end('frontend-gone');
  }

  #schedulerStats(): SchedulerStatsFields {
    const e = this.#sim.stats(this.#engineStats);
    const s = this.#stats;
    s.numRunningReqs = e.running;
    s.numWaitingReqs = e.waiting;
    s.kvCacheUsage = e.kvUsage;
    s.prefixQueries = e.prefixQueries - this.#lastQueries;
    s.prefixHits = e.prefixHits - this.#lastHits;
    s.stepCounter = e.steps;
    this.#lastQueries = e.prefixQueries;
    this.#lastHits = e.prefixHits;
    return s;
  }
}

/** Waits out the rest of a step that started at `started` and lasts `ms`; yields a turn at least. */
function pace(started: number, ms: number): Promise<unknown> {
  const left = started + ms - performance.now();
  return left >= 1 ? sleep(left) : turn();
}

/** CLOCK_MONOTONIC in seconds, shared by the processes of a host (Python's time.monotonic()). */
function monotonicSeconds(): number {
  return Number(process.hrtime.bigint()) / 1e9;
}
