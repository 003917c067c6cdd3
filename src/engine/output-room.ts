/**
 * The engine's output budget: how many bytes each API server's output ring can take this step, as
 * the token budget is its compute budget. Before a step the core loop opens every server's room from
 * its ring (StepBatchWriter.measure); the engine charges each output it decides to produce (a
 * sequence it schedules, a pending abort or reject) at its worst case, and a server whose next
 * output does not fit is held for the rest of the step: its sequences are not scheduled, its pending
 * outputs wait. Whatever was charged is then written without waiting, so a slow or stopped API
 * server never makes the engine wait, drop a request or buffer anything.
 *
 * The bound. An output costs stepOutputBytesBound(mask ids, routing rows, top candidates, prompt
 * entries, kv bytes) (wire/messages.ts): a step's records take at most the sum S of its outputs' costs. The ring may also lose the end of its
 * data area to a padding record when a record does not fit before the wrap, which happens at most
 * once per step and wastes less than that record: less than min(S, the largest record), where a
 * record holding several outputs is at most the writer's record budget and a record holding one is
 * at most that output's cost. So a step fits when S + max(min(S, record budget), largest cost) is
 * no more than the bytes the ring had free when the step began (the consumer only frees more).
 *
 * No output may cost more than MAX_OUTPUT_SHARE of the ring (the engine chunks a prefill's routing
 * rows under it), so an empty ring always takes the first output of a step whatever else that step
 * charges first (pending outputs, bounded by the server's slots): a held server is never held
 * forever.
 */
import { PROMPT_ENTRY_BYTES, stepOutputBytesBound } from '../wire/messages.js';

/** The largest share of a ring one output may take (see the header: 3/8 leaves room for the rest). */
const MAX_OUTPUT_SHARE = 3 / 8;

/** The most one output may cost in a ring of `capacity` bytes. */
export function maxOutputBytes(capacity: number): number {
  return Math.floor(capacity * MAX_OUTPUT_SHARE);
}

export class OutputRoom {
  readonly servers: number;
  /** Bytes free in the ring when the step began; Infinity: no limit. */
  readonly #free: Float64Array;
  /** Bytes charged this step. */
  readonly #used: Float64Array;
  /** The largest single output charged this step. */
  readonly #largest: Float64Array;
  /** The largest record holding several outputs the writer makes. */
  readonly #recordBudget: Float64Array;
  /** The most one output may cost. */
  readonly #maxOutput: Float64Array;
  readonly #held: Uint8Array;
  readonly #rowIds: number;
  readonly #idBytes: number;

  constructor(servers: number, routingRowIds: number, routingIdBytes: number) {
    this.servers = servers;
    this.#free = new Float64Array(servers).fill(Number.POSITIVE_INFINITY);
    this.#used = new Float64Array(servers);
    this.#largest = new Float64Array(servers);
    this.#recordBudget = new Float64Array(servers).fill(Number.POSITIVE_INFINITY);
    this.#maxOutput = new Float64Array(servers).fill(Number.POSITIVE_INFINITY);
    this.#held = new Uint8Array(servers);
    this.#rowIds = routingRowIds;
    this.#idBytes = routingIdBytes;
  }

  /**
   * Starts a step for server k: its ring has `freeBytes` free of `capacity`, and the writer puts
   * several outputs into one record only up to `recordBudget` ring bytes.
   */
  open(server: number, freeBytes: number, capacity: number, recordBudget: number): void {
    this.#free[server] = freeBytes;
    this.#used[server] = 0;
    this.#largest[server] = 0;
    this.#recordBudget[server] = recordBudget;
    this.#maxOutput[server] = maxOutputBytes(capacity);
    this.#held[server] = 0;
  }

  /** Starts a step with no limit for server k (it has no ring to protect: gone, or a test). */
  unlimit(server: number): void {
    this.open(server, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, 0);
  }

  /**
   * The most ring bytes one output with these mask ids, routing rows, top candidates,
   * prompt-logprob entries and kv_transfer_params bytes can take.
   */
  outputBytes(
    maskIds: number,
    routingRows: number,
    topEntries = 0,
    promptEntries = 0,
    kvBytes = 0,
  ): number {
    return stepOutputBytesBound(
      maskIds,
      routingRows,
      this.#rowIds,
      this.#idBytes,
      topEntries,
      promptEntries,
      kvBytes,
    );
  }

  /** The most one output of server k may cost, whatever its ring holds now (Infinity: no limit). */
  outputLimit(server: number): number {
    return server >= 0 && server < this.servers
      ? this.#maxOutput[server]!
      : Number.POSITIVE_INFINITY;
  }

  /**
   * The most routing rows one output of server k that also carries up to `maskIds` mask ids may
   * hold, so that it stays under outputLimit (Infinity: no limit).
   */
  routingRowsWithin(server: number, maskIds: number, topEntries = 0, promptEntries = 0): number {
    const rowBytes = this.#rowIds * this.#idBytes;
    const max = this.outputLimit(server);
    if (rowBytes === 0 || max === Number.POSITIVE_INFINITY) return Number.POSITIVE_INFINITY;
    const rest = this.outputBytes(maskIds, 0, topEntries, promptEntries);
    return Math.max(0, Math.floor((max - rest) / rowBytes));
  }

  /**
   * The most prompt positions of `width` entries each that one output of server k carrying
   * `maskIds` mask ids, `routingRows` routing rows and `topEntries` top candidates may hold, so
   * that it stays under outputLimit (Infinity: no limit). A prefill's prompt logprobs are split
   * into outputs of at most this many positions, as its routing rows are.
   */
  promptPositionsWithin(
    server: number,
    width: number,
    maskIds: number,
    routingRows: number,
    topEntries = 0,
  ): number {
    const max = this.outputLimit(server);
    if (width <= 0 || max === Number.POSITIVE_INFINITY) return Number.POSITIVE_INFINITY;
    const rest = this.outputBytes(maskIds, routingRows, topEntries, 0);
    return Math.max(0, Math.floor((max - rest) / (width * PROMPT_ENTRY_BYTES)));
  }

  /** True once an output of server k did not fit this step. */
  isHeld(server: number): boolean {
    return server >= 0 && server < this.servers && this.#held[server] === 1;
  }

  /** True if any server was held this step. */
  get anyHeld(): boolean {
    for (let k = 0; k < this.servers; k++) if (this.#held[k] === 1) return true;
    return false;
  }

  /**
   * Charges one output of server k; false if it does not fit, and then server k is held for the
   * rest of the step (a later, smaller output of it is refused too: a server's outputs keep their
   * order). A server outside [0, servers) has no ring and is never limited.
   */
  tryCharge(
    server: number,
    maskIds: number,
    routingRows: number,
    topEntries = 0,
    promptEntries = 0,
    kvBytes = 0,
  ): boolean {
    if (server < 0 || server >= this.servers) return true;
    if (this.#held[server] === 1) return false;
    const cost = this.outputBytes(maskIds, routingRows, topEntries, promptEntries, kvBytes);
    const used = this.#used[server]! + cost;
    const largest = Math.max(this.#largest[server]!, cost);
    if (cost > this.#maxOutput[server]!) {
      // The engine keeps every output under outputLimit; one above it could never be written.
      throw new Error(
        `an output of ${cost} bytes for API server ${server} is over its limit of ${this.#maxOutput[server]} bytes`,
      );
    }
    const wrapWaste = Math.max(Math.min(used, this.#recordBudget[server]!), largest);
    if (used + wrapWaste > this.#free[server]!) {
      this.#held[server] = 1;
      return false;
    }
    this.#used[server] = used;
    this.#largest[server] = largest;
    return true;
  }
}
