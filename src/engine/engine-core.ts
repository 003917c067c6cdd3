import type { BroadcasterArgs, LoraAdapter } from '../wire/admin-args.js';
import type { ModelCard } from '../wire/model-card.js';
import type { RejectReason } from '../wire/reject.js';
import type { EngineRequest, EngineStats, StepTiming } from '../wire/types.js';
import type { OutputRoom } from './output-room.js';
import type { StepOutputs } from './step-outputs.js';

/**
 * What the engine-core process drives (core-loop.ts): an engine that takes requests, steps a
 * continuous batch and reports each step's outputs in columns. The simulator (src/sim/) is one
 * implementation; a bridge to a real engine is another. Everything is synchronous and called from
 * the core loop alone: an engine whose work happens elsewhere (a GPU process behind a socket)
 * queues what arrives and hands it over in step().
 *
 * Requests are keyed by (API server, slot); every output row names the pair it belongs to, and
 * every request ends with exactly one row whose finish reason is not None (an abort or a reject
 * included), after which the slot may be reused.
 */
export interface EngineCore {
  /** The model behind the engine: the routing-row shape and EOS ids its outputs follow. */
  readonly model: ModelCard;
  /** True while the scheduler is paused (no new tokens; aborts and rejects still come out). */
  readonly paused: boolean;
  readonly weightVersion: number;
  /**
   * False while the engine behind the core cannot take requests (a bridge whose engine has not
   * registered, or has died): the core loop publishes ENGINE_STATE_STARTING and the API servers
   * answer 503. Absent: always ready.
   */
  readonly ready?: boolean;
  /** Whether the engine can return sampling masks (absent: it can). */
  readonly samplingMasks?: boolean;
  /**
   * What the API servers should know of the engine, as the JSON text of an EngineNote
   * (wire/engine-note.ts): the core loop publishes it into the region when it changes (absent:
   * nothing to say). Return the same string while nothing changed: it is compared every publish.
   */
  readonly note?: string;

  /** A StepOutputs shaped for this engine's routing rows, to pass to every step(). */
  newStepOutputs(): StepOutputs;
  add(request: EngineRequest): void;
  /** Ends (server, slot) with an Error row at the next step, e.g. for an undecodable record. */
  reject(server: number, slot: number, reason?: RejectReason): void;
  /** Ends (server, slot) with an Abort row at the next step; a slot not in flight is ignored. */
  abort(server: number, slot: number): void;
  /** Drops every request of an API server that is gone, freeing their KV blocks, with no rows. */
  abortServer(server: number): void;

  // The control methods may answer later (a bridge waits for its engine's reply): the core loop
  // acknowledges the command once the promise settles and keeps stepping meanwhile.
  pause(): void | Promise<void>;
  resume(): void | Promise<void>;
  /**
   * Loads new weights (from `weightDir` when the engine reads them itself) and returns the weight
   * version now in force.
   */
  updateWeights(version?: number, weightDir?: string): number | Promise<number>;
  /** Empties the prefix cache; false (nothing done) while requests hold cached blocks. */
  resetPrefixCache(): boolean | Promise<boolean>;
  /**
   * prime-rl's in-memory weight transfer: join the trainer's broadcaster (its workers'
   * init_broadcaster); later updates without a weight directory come from it. Absent: refused.
   */
  initBroadcaster?(args: BroadcasterArgs): void | Promise<void>;
  /**
   * Loads (or reloads in place) a LoRA adapter's files; requests whose `loraId` is its id then run
   * with it. A path with no adapter is a ControlRefusal(NotFound). Absent: LoRA is refused.
   */
  loadLora?(adapter: LoraAdapter, inplace: boolean): void | Promise<void>;
  unloadLora?(adapter: LoraAdapter): void | Promise<void>;

  /** Whether step() has anything to do: running or waiting requests, or pending rows. */
  hasWork(): boolean;
  /**
   * For an engine whose outputs arrive on the event loop (a socket): when it waits for something
   * from outside, a promise that settles when that came or after a short bound, and the core loop
   * awaits it instead of blocking the thread on the doorbell; null when it expects nothing.
   */
  awaitWork?(): Promise<void> | null;
  /**
   * Runs one step, writing its rows into `out`; the returned object is reused across steps. With
   * `room`, every row is charged to its API server's room first (OutputRoom.tryCharge, at its worst
   * case, before the work that produces it): a server whose next row does not fit is held for the
   * rest of the step. A held server's sequences keep their state (and their KV blocks, unless KV
   * pressure preempts them), its abort and reject rows wait for a later step, and nothing of it
   * is emitted; what comes out later is what would have come out anyway. Without `room`: no limit.
   */
  step(out: StepOutputs, room?: OutputRoom): StepTiming;
  /** The figures the core loop publishes into the region's stats block. */
  stats(into?: EngineStats): EngineStats;
  /**
   * Per data-parallel rank figures of an engine core fronting several engine ranks (a vLLM bridge
   * with --data-parallel-size N): fills `into` (length MAX_DP_RANKS * RANK_STAT_SLOTS, layout.ts)
   * with RANK_STAT_SLOTS f64 per rank (RANK_UP, RANK_RUNNING, ... RANK_PREFIX_HITS), rank r at
   * r * RANK_STAT_SLOTS, and returns the rank count. Called whenever the core loop publishes stats,
   * with the same array every time. Absent: one rank, whose figures are the engine stats.
   */
  rankStats?(into: Float64Array): number;
}
