/**
 * The engine core of `ringserve serve --engine vllm`: an EngineCore whose engine is a headless vLLM
 * EngineCore in another process (docs/vllm-protocol.md). The core loop drives it exactly as it drives the
 * simulator: ring ADDs become EngineCoreRequest ADDs with unique request ids, ring ABORTs become
 * ABORT frames, and the engine's outputs become the simulator's step rows (bridge-output.ts),
 * staged until the API servers' rings have room (bridge-backlog.ts). The sockets, the handshake and
 * the liveness ping live in the link (bridge-link.ts), which attaches the bridge once an engine has
 * registered and detaches it when the engine dies; this file holds the per-request frontend state
 * (vLLM's output_processor.py in spirit).
 *
 * Two kinds of failure, as vLLM names them: request-scoped (an output with finish ERROR: that
 * request alone ends with an error) and engine-dead (ENGINE_CORE_DEAD, or no answer to the ping):
 * every request in flight ends with RejectReason.EngineDead (a 503 above the rings), the bridge is
 * not ready (the API servers answer 503 and take nothing), and the link waits for a new HELLO.
 * Between the two, what the engine sent that does not decode costs only the requests it names
 * (outputFailed, messageFailed): the link and every other request go on.
 *
 * Data parallelism (docs/vllm-protocol.md, "Data parallelism"): the engine may be several ranks,
 * each attached and detached on its own. A request runs on the rank its X-data-parallel-rank
 * header names, else on the least-loaded attached rank (vLLM's DPLBAsyncMPClient score), and stays
 * there; a rank's death fails its requests only, and the bridge is ready while any rank is
 * attached. Utility calls (pause, resume, weights, LoRA) go to every attached rank, as vLLM's
 * frontend sends them, and answer with the lowest rank's result. Ranks of a MoE model run in
 * lockstep waves, and without vLLM's DP coordinator the frontend keeps the waves going (waves.ts).
 */
import { randomBytes } from 'node:crypto';
import { RS_ERR_ENGINE_DEAD } from '../../errors.js';
import { type RankFigures, setRankRow } from '../../shm/dp-ranks.js';
import { MAX_DP_RANKS } from '../../shm/layout.js';
import {
  type BroadcasterArgs,
  broadcasterArgList,
  type LoraAdapter,
} from '../../wire/admin-args.js';
import { ChurnMap } from '../../wire/churn-map.js';
import { ControlRefusal, ControlResult } from '../../wire/control-channel.js';
import { MAX_KV_PARAMS_BYTES } from '../../wire/messages.js';
import type { ModelCard } from '../../wire/model-card.js';
import { RejectReason } from '../../wire/reject.js';
import {
  type EngineRequest,
  type EngineStats,
  FinishReason,
  type StepTiming,
} from '../../wire/types.js';
import type { EngineCore } from '../engine-core.js';
import type { OutputRoom } from '../output-room.js';
import { StepOutputs } from '../step-outputs.js';
import { BridgeBacklog } from './bridge-backlog.js';
import { type BridgeRequest, promptLogprobsFit, stageOutput } from './bridge-output.js';
import { type BridgeAdd, checkForEngine, toVllmAdd } from './bridge-request.js';
import { DpWaves } from './dp-waves.js';
import type { VllmLayout } from './layouts.js';
import type { OutputView, SchedulerStatsView } from './outputs-reader.js';
import { loraRequestArray, type VllmLoraRequest } from './requests.js';
import { type RoutingShape, routingShapeOf } from './routing-shape.js';

/** What the bridge needs of the link to an attached engine. */
export interface VllmEngineLink {
  /** Sends an ADD; throws (nothing sent) when a field is out of vLLM's range. */
  add(request: BridgeAdd): void;
  abort(ids: readonly string[]): void;
  /** START_DP_WAVE: the rank joins wave `wave` unless it is `exclude`. */
  startDpWave(wave: number, exclude: number | null): void;
  /** One utility call; rejects on a failure reply, past `timeoutMs`, or when the engine dies. */
  call(method: string, args: unknown[], timeoutMs: number): Promise<unknown>;
}

/** What the engine said about itself when it registered, and the layout it speaks. */
export interface EngineRegistration {
  maxModelLen: number;
  numGpuBlocks: number;
  /** vllm_version as registered (null: the engine did not say). */
  vllmVersion: string | null;
  /** data_parallel_size as registered: > 1 for a rank of a MoE DP group (dense ranks say 1). */
  dataParallelSize: number;
  /** The layout in use: the registration's guess until the first output confirms it. */
  layout: VllmLayout;
}

/**
 * One data-parallel rank: its link while attached, and figures from its scheduler_stats (gauges of
 * its last step, prefix-cache totals) and of its requests.
 */
interface Rank {
  readonly rank: number;
  link: VllmEngineLink | null;
  registration: EngineRegistration | null;
  /** Why the rank cannot take requests (not registered yet, lost, refused); null while attached. */
  reason: string | null;
  known: boolean;
  running: number;
  waiting: number;
  kvUsage: number;
  prefixQueries: number;
  prefixHits: number;
  /** Requests placed on it since its last scheduler_stats (vLLM counts them as waiting). */
  placed: number;
  /** Its live requests. */
  inFlight: number;
  promptTokens: number;
  generationTokens: number;
}

export interface BridgeOptions {
  card: ModelCard;
  /** ringserve's --max-model-len: an engine's smaller one wins. */
  maxModelLen: number;
  blockSize: number;
  /** Bound of pause, resume and reset_prefix_cache calls. */
  controlTimeoutMs?: number;
  /** Bound of update_weights (loading weights takes a while). */
  weightsTimeoutMs?: number;
  /**
   * The engine runs with vLLM's `--enable-return-sampling-mask`: requests may ask for masks, and
   * every request must sample with temperature > 0 and top_k > 0 (vLLM refuses others then).
   */
  returnSamplingMask?: boolean;
  /** Engine ranks (vLLM's --data-parallel-size); 1 when absent. */
  dataParallelSize?: number;
  onEvent?: (message: string, fields?: Record<string, unknown>) => void;
}

/** How long the core loop waits for the engine's outputs before it looks at the rings again. */
const OUTPUT_POLL_MS = 1;
/** The same while paused: only aborts and rejects can change anything, none is urgent. */
const PAUSED_POLL_MS = 10;
/**
 * Staged output rows above which the link stops reading the engine's outputs, while every server
 * with staged rows is held, until the core loop has drained below the low mark or a server has room
 * again (ZMQ then queues, and the engine's sends wait at its HWM). Rows the rings' room did not take
 * are re-staged every step, so without this bound an engine that outruns the bridge made each step
 * cost O(backlog): under bench:bridge, with the simulator sped up, the bridge fell from ~35k to
 * ~18k tokens/s at the same CPU. A server that can take rows keeps the reader going, so one stopped
 * API server (its rows kept here, bounded by its requests) does not stall its siblings. 1,024 rows
 * is four steps of 256 sequences.
 */
const BACKLOG_HIGH = 1024;
const BACKLOG_LOW = BACKLOG_HIGH / 2;
const CONTROL_TIMEOUT_MS = 30_000;
const WEIGHTS_TIMEOUT_MS = 600_000;
/** Loading an adapter's files onto the workers: seconds (the API server waits 120 s). */
const LORA_TIMEOUT_MS = 110_000;
/** How vLLM's failure reply words an adapter path with nothing there (LoRAAdapterNotFoundError). */
const LORA_NOT_FOUND = /No adapter found|does not exist|not found|No such file/i;
const TWO_POW_32 = 4294967296;
const DASH = 0x2d;
const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;

export class VllmBridge implements EngineCore {
  readonly model: ModelCard;
  readonly #options: BridgeOptions;
  readonly #shape: RoutingShape;
  readonly #backlog: BridgeBacklog;
  readonly #bySlot = new ChurnMap<number, BridgeRequest>();
  /** The LoRA adapters the engine has loaded (add_lora), by id: what an ADD's lora_request names. */
  readonly #adapters = new Map<number, VllmLoraRequest>();
  /**
   * Request ids are `<nonce>-<server>-<slot>-<n>`: unique across bridge processes and restarts,
   * and an output's request is found from the id's bytes, without making a string per output.
   */
  readonly #nonce = randomBytes(4).toString('hex');
  readonly #nonceBytes = Buffer.from(this.#nonce, 'latin1');
  #counter = 0;
  readonly #ranks: Rank[] = [];
  /** Attached ranks, by rank. */
  #attached: Rank[] = [];
  /** Where the least-loaded scan starts: moves on after every pick (vLLM #47420). */
  #scanFrom = 0;
  /** rankStats' one row of figures, reused. */
  readonly #row: RankFigures = {
    running: 0,
    waiting: 0,
    kvUsage: 0,
    promptTokens: 0,
    generationTokens: 0,
    prefixQueries: 0,
    prefixHits: 0,
  };
  readonly #waves: DpWaves;
  #paused = false;
  /**
   * What the last pause or resume asked for, set before its calls go out: a rank that attaches
   * while one is in flight is brought to that state.
   */
  #pauseWanted = false;
  #weightVersion = 0;
  #note = '';
  #wake: (() => void) | null = null;
  /** The ranks' output readers, parked by backlogRoom() until the backlog drains. */
  #roomWaiters: (() => void)[] = [];
  #callsInFlight = 0;
  readonly #counters = {
    steps: 0,
    lateOutputs: 0,
    /** Outputs or messages of the engine that did not decode (each failed only its requests). */
    undecodable: 0,
  };
  readonly #timing: StepTiming = {
    ms: 0,
    sampledSeqs: 0,
    decodeSeqs: 0,
    prefillTokens: 0,
    totalContext: 0,
    generatedTokens: 0,
  };

  constructor(options: BridgeOptions) {
    this.#options = options;
    const card = options.card;
    this.model = card;
    this.#shape = routingShapeOf(card);
    this.#backlog = new BridgeBacklog(card.routingLayers, card.expertsPerToken, card.numExperts);
    const size = options.dataParallelSize ?? 1;
    for (let rank = 0; rank < size; rank++) {
      this.#ranks.push({
        rank,
        link: null,
        registration: null,
        reason: 'no vLLM engine has registered yet',
        known: false,
        running: 0,
        waiting: 0,
        kvUsage: 0,
        prefixQueries: 0,
        prefixHits: 0,
        placed: 0,
        inFlight: 0,
        promptTokens: 0,
        generationTokens: 0,
      });
    }
    this.#waves = new DpWaves(this.#attached);
    this.#updateNote();
  }

  // ---- the link's side ---------------------------------------------------------------------------

  /** Rank `rank` has registered and is READY: requests may go to it from now on. */
  attach(rank: number, link: VllmEngineLink, registration: EngineRegistration): void {
    const r = this.#rank(rank);
    if (r.link !== null) this.detach(rank, `rank ${rank} registered again`);
    r.link = link;
    r.registration = registration;
    r.reason = null;
    r.known = false;
    r.placed = 0;
    this.#attached = this.#ranks.filter((x) => x.link !== null);
    this.#waves.ranksChanged(this.#attached);
    // The first rank of a fresh engine starts unpaused (a new vLLM engine is); a rank that joins
    // a paused group, or one being paused, is paused too.
    if (this.#attached.length === 1) {
      this.#paused = false;
      this.#pauseWanted = false;
    } else if (this.#pauseWanted) {
      link.call('pause_scheduler', ['keep', false], this.#controlTimeout).catch((error: unknown) =>
        this.#options.onEvent?.(`rank ${rank} joined a paused group and could not be paused`, {
          err: error,
        }),
      );
    }
    // vLLM loads a LoRA adapter when a request names it (its path rides in the ADD), but weights
    // pushed by update_weights are not replayed: a restarted rank serves its own checkpoint.
    if (this.#weightVersion > 0 && this.#attached.length > 1)
      this.#options.onEvent?.(
        `rank ${rank} attached after update_weights: it serves the checkpoint it loaded until the next update_weights`,
        { rank, weight_version: this.#weightVersion },
      );
    if (registration.dataParallelSize > 1) this.#waves.arm();
    this.#waves.joined(r);
    this.#updateNote();
    this.notify();
    this.#releaseReaders(true);
  }

  /** The first output confirmed (or corrected) the layout the registration suggested. */
  layoutConfirmed(rank: number, layout: VllmLayout): void {
    const registration = this.#rank(rank).registration;
    if (registration === null) return;
    registration.layout = layout;
    this.#updateNote();
  }

  /** wave_complete / start_wave from rank `rank` (dp-waves.ts). */
  wave(rank: number, complete: number | null, start: number | null): void {
    this.#waves.fromEngine(rank, complete, start, this.#bySlot.size > 0);
  }

  /**
   * For the link's output reader: null while the backlog is under BACKLOG_HIGH or a server with
   * staged rows has room, else a promise that settles once the core loop drained it under
   * BACKLOG_LOW, a server has room again, or the engine is detached.
   */
  backlogRoom(): Promise<void> | null {
    if (this.#backlog.count < BACKLOG_HIGH || this.#backlog.serverWithRoom) return null;
    return new Promise<void>((resolve) => {
      this.#roomWaiters.push(resolve);
    });
  }

  /**
   * Lets the parked readers go on once the backlog is under BACKLOG_LOW or a server has room (or
   * at once: `always`).
   */
  #releaseReaders(always = false): void {
    if (this.#roomWaiters.length === 0) return;
    const go = always || this.#backlog.count < BACKLOG_LOW || this.#backlog.serverWithRoom;
    if (!go) return;
    const waiters = this.#roomWaiters;
    this.#roomWaiters = [];
    for (const waiter of waiters) waiter();
  }

  /**
   * Rank `rank` died, went silent or was refused (`reason`: /health's 503 says it while no rank is
   * attached): its requests in flight end with EngineDead; the other ranks' go on.
   */
  detach(rank: number, reason: string): void {
    const r = this.#rank(rank);
    for (const req of this.#bySlot.values()) {
      if (req.rank !== rank) continue;
      this.#forget(req);
      this.#endRow(req.server, req.slot, RejectReason.EngineDead);
    }
    r.link = null;
    r.registration = null;
    r.reason = reason;
    r.known = false;
    r.placed = 0;
    this.#attached = this.#ranks.filter((x) => x.link !== null);
    this.#waves.ranksChanged(this.#attached);
    if (this.#attached.length === 0) this.#paused = false;
    this.#updateNote();
    this.notify();
    this.#releaseReaders(true);
  }

  /** An output that did not decode: its request alone fails (and is aborted in the engine). */
  outputFailed(o: OutputView, rank: number): void {
    this.#counters.undecodable++;
    const req = this.#find(o.body, o.idOffset, o.idLength);
    if (req !== undefined && req.rank === rank) this.#fail(req);
  }

  /**
   * A message of rank `rank` whose structure broke at `at`: the outputs before it were read, and
   * every live request of that rank the rest of it names (its id's bytes, found by the bridge's
   * nonce) fails.
   */
  messageFailed(body: Uint8Array, at: number, rank: number): void {
    this.#counters.undecodable++;
    const nonce = this.#nonceBytes;
    for (let i = body.indexOf(nonce[0]!, at); i >= 0; i = body.indexOf(nonce[0]!, i + 1)) {
      const length = idLengthBefore(body, i);
      if (length <= 0) continue;
      const req = this.#find(body, i, length);
      if (req !== undefined && req.rank === rank) this.#fail(req);
    }
  }

  /** A part of a message other than an output (scheduler_stats, a utility reply) was skipped. */
  partFailed(): void {
    this.#counters.undecodable++;
  }

  /**
   * One EngineCoreOutput of rank `rank`. An output of a request that has ended (aborted here), or
   * that names a request of another rank, is dropped.
   */
  output(o: OutputView, rank: number): void {
    const req = this.#find(o.body, o.idOffset, o.idLength);
    if (req === undefined || req.rank !== rank) {
      this.#counters.lateOutputs++;
      return;
    }
    if (req.masks && !o.hasMask && o.tokenCount > 0) {
      this.#options.onEvent?.(
        'the vLLM engine sent no sampling mask for a request that asked for one: is it running with --enable-return-sampling-mask?',
        { request_id: req.id },
      );
      this.#fail(req);
      return;
    }
    if (!promptLogprobsFit(o, req)) {
      this.#counters.undecodable++;
      this.#options.onEvent?.(
        `new_prompt_logprobs_tensors: ${o.promptPositions} more positions from position ${req.promptNext} of a ${req.promptLength}-token prompt: the request is failed`,
        { request_id: req.id },
      );
      this.#fail(req);
      return;
    }
    if (o.kvParamsLength > MAX_KV_PARAMS_BYTES) {
      this.#options.onEvent?.(
        `kv_transfer_params of ${o.kvParamsLength} bytes, more than ${MAX_KV_PARAMS_BYTES}: the request is failed`,
        { request_id: req.id },
      );
      this.#fail(req, RejectReason.KvParamsTooLarge);
      return;
    }
    const first = req.tokens === 0;
    const rows = this.#backlog.rows;
    const before = rows.count;
    if (!stageOutput(o, req, this.#shape, this.#weightVersion, rows)) {
      const s = this.#shape;
      this.#options.onEvent?.(
        `routed_experts of shape [rows, ${o.routedLayers}, ${o.routedTopk}] where the model gives [rows, ${s.routingLayers} or ${s.hiddenLayers}, ${s.topk}]: the request is failed`,
        { request_id: req.id },
      );
      this.#fail(req, RejectReason.RoutingShape);
      return;
    }
    // The engine's handle (vLLM: on a prefill's final output), as it sent it, for the API server.
    if (o.kvParamsLength > 0 && rows.count > before) {
      const at = o.kvParamsOffset;
      rows.setKv(rows.count - 1, o.body, at, at + o.kvParamsLength);
    }
    const r = this.#ranks[rank]!;
    if (first && o.tokenCount > 0) r.promptTokens += req.promptLength;
    r.generationTokens += o.tokenCount;
    if (o.finishReason >= 0) this.#forget(req);
  }

  /** Rank `rank`'s scheduler_stats of its last step. */
  schedulerStats(s: SchedulerStatsView, rank: number): void {
    const e = this.#rank(rank);
    e.known = true;
    e.running = s.numRunningReqs;
    e.waiting = s.numWaitingReqs;
    e.kvUsage = s.kvCacheUsage;
    e.prefixQueries += s.prefixQueries;
    e.prefixHits += s.prefixHits;
    e.placed = 0;
  }

  /** One EngineCoreOutputs message has been read. */
  outputsDone(): void {
    this.#counters.steps++;
  }

  /** Something came from the engine: a core loop waiting in awaitWork() goes on. */
  notify(): void {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }

  /** Some rank is attached. */
  get ready(): boolean {
    return this.#attached.length > 0;
  }

  /** Masks can be asked for: the engine was started with them and speaks a layout that has them. */
  get samplingMasks(): boolean {
    const layout = this.#attached[0]?.registration?.layout;
    return (
      this.#options.returnSamplingMask === true &&
      layout !== undefined &&
      layout.output.includes('new_sampling_mask')
    );
  }

  /** The engine note (engine-core.ts): why requests cannot run, and which vLLM is behind. */
  get note(): string {
    return this.#note;
  }

  /** Outputs and messages of the engine that did not decode. */
  get undecodable(): number {
    return this.#counters.undecodable;
  }

  /** The attached ranks' smallest max_model_len when smaller than ringserve's (vLLM takes the min). */
  get maxModelLen(): number {
    let engine = Number.POSITIVE_INFINITY;
    for (const r of this.#attached)
      engine = Math.min(engine, r.registration?.maxModelLen ?? Number.POSITIVE_INFINITY);
    return Math.min(this.#options.maxModelLen, engine);
  }

  /** The DP wave state (MoE data parallelism), for tests and logs. */
  get waveState(): { armed: boolean; wave: number; running: boolean } {
    return this.#waves.state;
  }

  get inFlight(): number {
    return this.#bySlot.size;
  }

  // ---- EngineCore ----------------------------------------------------------------------------------

  get paused(): boolean {
    return this.#paused;
  }

  get weightVersion(): number {
    return this.#weightVersion;
  }

  newStepOutputs(): StepOutputs {
    const out = new StepOutputs(256);
    const card = this.model;
    out.shapeRouting(card.routingLayers, card.expertsPerToken, card.numExperts);
    return out;
  }

  add(request: EngineRequest): void {
    const { server, slot } = request;
    if (!isIndex(server) || !isIndex(slot)) {
      this.#endRow(isIndex(server) ? server : -1, isIndex(slot) ? slot : -1, RejectReason.BadRoute);
      return;
    }
    const named = request.dataParallelRank ?? null;
    if (named !== null && !(isIndex(named) && named < this.#ranks.length)) {
      this.#endRow(server, slot, RejectReason.BadRoute);
      return;
    }
    const target = this.#place(named);
    if (target === null) {
      this.#endRow(server, slot, RejectReason.EngineDead);
      return;
    }
    const link = target.link as VllmEngineLink;
    const reason = checkForEngine(
      request,
      this.model,
      this.maxModelLen,
      this.#options.returnSamplingMask === true,
    );
    if (reason !== RejectReason.None) {
      this.#endRow(server, slot, reason);
      return;
    }
    if (this.#bySlot.has(slotKey(server, slot))) {
      this.reject(server, slot, RejectReason.DuplicateSlot);
      return;
    }
    const loraId = request.loraId ?? 0;
    const lora = loraId === 0 ? null : this.#adapters.get(loraId);
    if (lora === undefined) {
      this.#endRow(server, slot, RejectReason.LoraNotLoaded);
      return;
    }
    const serial = this.#counter++;
    const id = `${this.#nonce}-${server}-${slot}-${serial}`;
    const p = request.params;
    const req: BridgeRequest = {
      id,
      serial,
      server,
      slot,
      rank: target.rank,
      promptLength: request.promptTokenIds.length,
      routing: p.returnRoutedExperts,
      routingStart: p.routedExpertsPromptStart,
      sentRoutingStart: Math.min(p.routedExpertsPromptStart, request.promptTokenIds.length - 1),
      masks: p.returnSamplingMask,
      topLogprobs: p.logprobs ? p.topLogprobs : 0,
      promptLogprobs: p.promptLogprobs,
      promptNext: 1,
      tokens: 0,
      numCachedTokens: -1,
    };
    try {
      link.add(toVllmAdd(request, id, this.model, lora, this.#waves.wave));
    } catch (error) {
      this.#options.onEvent?.('an ADD was not sent: a field is out of vLLM range', {
        err: error,
      });
      this.#endRow(server, slot, RejectReason.BadParams);
      return;
    }
    this.#bySlot.set(slotKey(server, slot), req);
    target.inFlight++;
    target.placed++;
    this.#waves.sent(target.rank);
  }

  /**
   * The rank a request goes to: the one it names (null when that rank is not attached), else the
   * least-loaded attached one by vLLM's DPLBAsyncMPClient score (#49204): max(own requests in
   * flight, waiting + running), waiting counting the requests placed since the rank's last
   * scheduler_stats (at most those still in flight), plus a KV-pressure term on waiting; ties go
   * to the first from a start that moves on after every pick (#47420).
   */
  #place(named: number | null): Rank | null {
    if (named !== null) {
      const r = this.#ranks[named];
      return r !== undefined && r.link !== null ? r : null;
    }
    const attached = this.#attached;
    const n = attached.length;
    if (n === 0) return null;
    if (n === 1) return attached[0]!;
    let best: Rank | null = null;
    let bestScore = Number.POSITIVE_INFINITY;
    const from = this.#scanFrom++ % n;
    for (let k = 0; k < n; k++) {
      const r = attached[(from + k) % n]!;
      const waiting = (r.known ? r.waiting : 0) + Math.min(r.placed, r.inFlight);
      const running = r.known ? r.running : 0;
      let score = Math.max(r.inFlight, waiting + running);
      if (waiting > 0) score += waiting * 6 * Math.max(0, r.kvUsage - 0.5);
      if (score < bestScore) {
        best = r;
        bestScore = score;
      }
    }
    return best;
  }

  reject(server: number, slot: number, reason: RejectReason = RejectReason.MalformedRecord): void {
    const req = this.#bySlot.get(slotKey(server, slot));
    if (req !== undefined) {
      this.#ranks[req.rank]?.link?.abort([req.id]);
      this.#forget(req);
    }
    this.#endRow(server, slot, reason);
  }

  /** vLLM sends nothing for an aborted id: the bridge ends the request itself. */
  abort(server: number, slot: number): void {
    const req = this.#bySlot.get(slotKey(server, slot));
    if (req === undefined) return;
    this.#ranks[req.rank]?.link?.abort([req.id]);
    this.#forget(req);
    const row = this.#backlog.rows.addRow(server, slot, this.#weightVersion);
    this.#backlog.rows.finish[row] = FinishReason.Abort;
  }

  abortServer(server: number): void {
    const ids: string[][] = this.#ranks.map(() => []);
    for (const req of this.#bySlot.values()) {
      if (req.server !== server) continue;
      ids[req.rank]!.push(req.id);
      this.#forget(req);
    }
    for (const r of this.#attached) if (ids[r.rank]!.length > 0) r.link?.abort(ids[r.rank]!);
    this.#backlog.dropServer(server);
    this.#releaseReaders();
  }

  /** vLLM's pause_scheduler(mode="keep"): requests keep their state until resume. */
  async pause(): Promise<void> {
    await this.#setPaused(true, 'pause_scheduler', ['keep', false]);
  }

  async resume(): Promise<void> {
    await this.#setPaused(false, 'resume_scheduler', []);
  }

  async #setPaused(paused: boolean, method: string, args: unknown[]): Promise<void> {
    this.#pauseWanted = paused;
    try {
      await this.#call(method, args, this.#controlTimeout);
    } catch (error) {
      this.#pauseWanted = this.#paused;
      throw error;
    }
    this.#paused = paused;
  }

  async resetPrefixCache(): Promise<boolean> {
    return (await this.#call('reset_prefix_cache', [], this.#controlTimeout)) === true;
  }

  /**
   * prime-rl's weight update (docs/vllm-protocol.md, "Utility calls"): its worker extension's
   * update_weights_from_path through collective_rpc, the directory passed as given (null: the
   * weights come from the broadcaster init_broadcaster joined), then reset_prefix_cache.
   */
  async updateWeights(version?: number, weightDir?: string): Promise<number> {
    const timeout = this.#options.weightsTimeoutMs ?? WEIGHTS_TIMEOUT_MS;
    const perWorker = await this.#workerCall(
      'update_weights_from_path',
      [weightDir ?? null],
      timeout,
    );
    await this.#call('reset_prefix_cache', [], this.#controlTimeout);
    this.#weightVersion = version ?? workersVersion(perWorker) ?? this.#weightVersion + 1;
    return this.#weightVersion;
  }

  /**
   * prime-rl's init_broadcaster on every worker (collective_rpc, its positional arguments in its
   * order): it lasts until the workers have joined the trainer's group, up to args.timeout.
   */
  async initBroadcaster(args: BroadcasterArgs): Promise<void> {
    const timeoutMs = ((args.timeout ?? 1_200) + 30) * 1000;
    await this.#workerCall('init_broadcaster', broadcasterArgList(args), timeoutMs);
  }

  /**
   * vLLM's add_lora: the engine loads the adapter onto its workers (in place: over the one of that
   * id). A path without an adapter is vLLM's LoRAAdapterNotFoundError, answered NotFound.
   */
  async loadLora(adapter: LoraAdapter, inplace: boolean): Promise<void> {
    const lora = { name: adapter.name, id: adapter.id, path: adapter.path, loadInplace: inplace };
    let loaded: unknown;
    try {
      loaded = await this.#call('add_lora', [loraRequestArray(lora)], LORA_TIMEOUT_MS);
    } catch (error) {
      const message = (error as Error).message;
      if (LORA_NOT_FOUND.test(message)) throw new ControlRefusal(ControlResult.NotFound, message);
      throw error;
    }
    if (loaded !== true) throw new Error(`add_lora answered ${String(loaded)}, not true`);
    this.#adapters.set(adapter.id, { name: adapter.name, id: adapter.id, path: adapter.path });
  }

  /** vLLM's remove_lora; requests already sent keep theirs (vLLM's own behaviour). */
  async unloadLora(adapter: LoraAdapter): Promise<void> {
    this.#adapters.delete(adapter.id);
    await this.#call('remove_lora', [adapter.id], this.#controlTimeout);
  }

  hasWork(): boolean {
    return this.#backlog.count > 0;
  }

  /** Waits for the engine while it owes something (outputs of requests in flight, a reply). */
  awaitWork(): Promise<void> | null {
    if (this.#bySlot.size === 0 && this.#callsInFlight === 0) return null;
    return new Promise<void>((resolve) => {
      const timer = setTimeout(
        () => {
          if (this.#wake === wake) this.#wake = null;
          resolve();
        },
        this.#paused ? PAUSED_POLL_MS : OUTPUT_POLL_MS,
      );
      const wake = (): void => {
        clearTimeout(timer);
        resolve();
      };
      this.#wake = wake;
    });
  }

  step(out: StepOutputs, room?: OutputRoom): StepTiming {
    const card = this.model;
    out.shapeRouting(card.routingLayers, card.expertsPerToken, card.numExperts);
    const before = out.count;
    this.#backlog.drainInto(out, room ?? null);
    this.#releaseReaders();
    let tokens = 0;
    for (let i = before; i < out.count; i++) if (out.token[i]! >= 0) tokens++;
    const t = this.#timing;
    t.sampledSeqs = tokens;
    t.generatedTokens = tokens;
    t.decodeSeqs = tokens;
    return t;
  }

  /**
   * Totals over the ranks: running and waiting summed, KV usage the attached ranks' mean,
   * num_gpu_blocks the attached ranks' sum (as vLLM's frontend sums them).
   */
  stats(into?: EngineStats): EngineStats {
    const s = into ?? ({} as EngineStats);
    const c = this.#counters;
    let running = 0;
    let waiting = 0;
    let kv = 0;
    let queries = 0;
    let hits = 0;
    let prompt = 0;
    let generation = 0;
    let blocks = 0;
    for (const r of this.#ranks) {
      queries += r.prefixQueries;
      hits += r.prefixHits;
      prompt += r.promptTokens;
      generation += r.generationTokens;
      running += rankRunning(r);
      waiting += rankWaiting(r);
      kv += rankKvUsage(r);
      blocks += r.registration?.numGpuBlocks ?? 0;
    }
    s.running = running;
    s.waiting = waiting;
    s.kvUsage = this.#attached.length > 0 ? kv / this.#attached.length : 0;
    s.numPreemptions = 0;
    s.prefixQueries = queries;
    s.prefixHits = hits;
    s.promptTokens = prompt;
    s.generationTokens = generation;
    s.weightVersion = this.#weightVersion;
    s.numGpuBlocks = blocks;
    s.blockSize = this.#options.blockSize;
    s.steps = c.steps;
    s.vllmUndecodable = c.undecodable;
    return s;
  }

  /**
   * Per-rank figures (engine-core.ts): RANK_STAT_SLOTS f64 per rank, rank r at
   * r * RANK_STAT_SLOTS; the rank count.
   */
  rankStats(into: Float64Array): number {
    const n = Math.min(this.#ranks.length, MAX_DP_RANKS);
    const row = this.#row;
    for (let i = 0; i < n; i++) {
      const r = this.#ranks[i]!;
      row.running = rankRunning(r);
      row.waiting = rankWaiting(r);
      row.kvUsage = rankKvUsage(r);
      row.promptTokens = r.promptTokens;
      row.generationTokens = r.generationTokens;
      row.prefixQueries = r.prefixQueries;
      row.prefixHits = r.prefixHits;
      setRankRow(into, i, r.link !== null, row);
    }
    return n;
  }

  /** Outputs dropped because their request had already ended (aborted here). */
  get lateOutputs(): number {
    return this.#counters.lateOutputs;
  }

  // ---- internals -----------------------------------------------------------------------------------

  get #controlTimeout(): number {
    return this.#options.controlTimeoutMs ?? CONTROL_TIMEOUT_MS;
  }

  /** collective_rpc(method, None, args, None) on every worker, bounded here by `timeoutMs`. */
  #workerCall(method: string, args: unknown[], timeoutMs: number): Promise<unknown> {
    return this.#call('collective_rpc', [method, null, args, null], timeoutMs);
  }

  /**
   * A utility call on every attached rank, as vLLM's DP frontend makes it: the lowest rank's
   * result; the first failure fails the call.
   */
  async #call(method: string, args: unknown[], timeoutMs: number): Promise<unknown> {
    const links = this.#attached.map((r) => r.link as VllmEngineLink);
    if (links.length === 0) throw new RS_ERR_ENGINE_DEAD('no vLLM engine is attached');
    this.#callsInFlight++;
    try {
      const results = await Promise.all(links.map((link) => link.call(method, args, timeoutMs)));
      return results[0];
    } finally {
      this.#callsInFlight--;
    }
  }

  #rank(rank: number): Rank {
    const r = this.#ranks[rank];
    if (r === undefined) throw new RangeError(`rank ${rank} is outside the data-parallel size`);
    return r;
  }

  /** The live request whose id is b[at .. at + length); undefined for any other id. */
  #find(b: Uint8Array, at: number, length: number): BridgeRequest | undefined {
    const nonce = this.#nonceBytes;
    let i = at;
    const end = i + length;
    if (length <= nonce.length) return undefined;
    for (let k = 0; k < nonce.length; k++) if (b[i + k] !== nonce[k]) return undefined;
    i += nonce.length;
    // Three decimal fields, each after a '-': server, slot, serial.
    let server = -1;
    let slot = -1;
    let value = -1;
    for (; i < end; i++) {
      const c = b[i]!;
      if (c === DASH) {
        if (server === -1 && value === -1 && slot === -1) {
          value = 0;
          continue;
        }
        if (value < 0) return undefined;
        if (server === -1) server = value;
        else if (slot === -1) slot = value;
        else return undefined;
        value = 0;
      } else if (c >= DIGIT_0 && c <= DIGIT_9 && value >= 0) {
        value = value * 10 + (c - DIGIT_0);
      } else return undefined;
    }
    if (slot < 0 || value < 0) return undefined;
    const req = this.#bySlot.get(slotKey(server, slot));
    return req !== undefined && req.serial === value ? req : undefined;
  }

  /** Ends a live request with an error row and tells the engine to drop it. */
  #fail(req: BridgeRequest, reason: RejectReason = RejectReason.EngineFailed): void {
    this.#ranks[req.rank]?.link?.abort([req.id]);
    this.#forget(req);
    this.#endRow(req.server, req.slot, reason);
  }

  /**
   * The note: no reason while any rank is attached (the others' reasons are logged, and
   * ringserve_dp_rank_up says which are up), else every rank's; the layout of the lowest
   * attached rank.
   */
  #updateNote(): void {
    const reg = this.#attached[0]?.registration ?? null;
    const info: Record<string, string> =
      reg === null
        ? {}
        : { vllm_layout: reg.layout.name, vllm_version: reg.vllmVersion ?? 'unknown' };
    let reason: string | null = null;
    if (this.#attached.length === 0) {
      const ranks = this.#ranks;
      reason =
        ranks.length === 1
          ? (ranks[0]?.reason ?? null)
          : `no data-parallel rank is attached: ${ranks.map((r) => `rank ${r.rank}: ${r.reason}`).join('; ')}`;
    }
    this.#note = JSON.stringify({ reason, info });
  }

  #forget(req: BridgeRequest): void {
    if (this.#bySlot.delete(slotKey(req.server, req.slot))) this.#ranks[req.rank]!.inFlight--;
  }

  /** Stages the final Error row of (server, slot). */
  #endRow(server: number, slot: number, reason: RejectReason): void {
    const rows = this.#backlog.rows;
    const row = rows.addRow(server, slot, this.#weightVersion);
    rows.finish[row] = FinishReason.Error;
    rows.rejectReason[row] = reason;
    this.notify();
  }
}

/** The length of the msgpack string whose bytes start at `at` (its header just before), or -1. */
function idLengthBefore(b: Uint8Array, at: number): number {
  const h = at >= 1 ? b[at - 1]! : 0;
  if ((h & 0xe0) === 0xa0) return h & 0x1f;
  if (at >= 2 && b[at - 2] === 0xd9) return h;
  return -1;
}

/**
 * A rank's gauges as exported: its last scheduler_stats while attached (running: its own requests
 * until the first stats came), 0 while detached.
 */
function rankRunning(r: Rank): number {
  if (r.link === null) return 0;
  return r.known ? r.running : r.inFlight;
}

function rankWaiting(r: Rank): number {
  return r.link !== null && r.known ? r.waiting : 0;
}

function rankKvUsage(r: Rank): number {
  return r.link !== null && r.known ? r.kvUsage : 0;
}

function isIndex(v: number): boolean {
  return Number.isInteger(v) && v >= 0 && v <= 0x7fffffff;
}

/**
 * The weight version the workers answered, when every one answered the same integer (a simulator
 * behind vLLM's protocol does); null otherwise (prime-rl's workers answer None).
 */
function workersVersion(perWorker: unknown): number | null {
  if (!Array.isArray(perWorker) || perWorker.length === 0) return null;
  const first: unknown = perWorker[0];
  if (typeof first !== 'number' || !Number.isInteger(first) || first < 0) return null;
  return perWorker.every((v) => v === first) ? first : null;
}

function slotKey(server: number, slot: number): number {
  return server * TWO_POW_32 + slot;
}
