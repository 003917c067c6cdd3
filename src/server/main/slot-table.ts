/**
 * The API server's request slots and the life of each. A slot is a sequence's index in every
 * per-request table of this server (slot meta, accumulators, the engine's routing of outputs). Each
 * taking draws a new generation, which the ADD record carries and the engine echoes on every output
 * (messages.ts), so outputs of a slot's earlier request are told apart without a handshake.
 *
 *   Free --take--> Reserved --ADD written--> Running --abort--> Aborting --------------+
 *                     |                         |   `--no room--> AbortQueued --retry--^
 *                     | ADD never written       | final output, or the engine died     |
 *                     `-----------------> Ended <--------------------------------------'
 *   Ended --the request's answer is settled (release)--> Free
 *
 * A slot is free again only once the engine has confirmed its sequence is over (or never had it),
 * so a late output can never land in a new request. An ABORT that finds no room in the request ring
 * is queued and retried on the next output or a short timer, never waited for on the main thread,
 * and dropped once its sequence has ended anyway.
 */
import { randomInt } from 'node:crypto';
import type { EnginePort } from './engine-port.js';

export const SlotState = {
  Free: 0,
  Reserved: 1,
  Running: 2,
  AbortQueued: 3,
  Aborting: 4,
  Ended: 5,
} as const;
export type SlotState = (typeof SlotState)[keyof typeof SlotState];

/** How soon queued ABORTs are retried when no output comes first (the engine drains its ring each turn). */
export const ABORT_RETRY_MS = 2;

export class SlotTable<R> {
  readonly capacity: number;
  readonly #engine: EnginePort;
  readonly #state: Uint8Array;
  readonly #gens: Int32Array;
  readonly #records: (R | undefined)[];
  /** Free slots as a stack. */
  readonly #free: Int32Array;
  #freeTop: number;
  #nextGen: number;
  /** Queued ABORTs as (slot, generation) pairs, oldest first. */
  #aborts: number[] = [];
  #retryTimer: NodeJS.Timeout | null = null;

  constructor(capacity: number, engine: EnginePort) {
    this.capacity = capacity;
    this.#engine = engine;
    this.#state = new Uint8Array(capacity);
    this.#gens = new Int32Array(capacity);
    this.#records = new Array(capacity);
    this.#free = new Int32Array(capacity);
    for (let i = 0; i < capacity; i++) this.#free[i] = capacity - 1 - i;
    this.#freeTop = capacity;
    // A restarted API server must not reuse its predecessor's generations (their records may still
    // be in the output ring): start from a random point of the 31-bit space.
    this.#nextGen = randomInt(1, 2 ** 30);
  }

  /** Slots not free: reserved, in the engine, or ended but not yet released. */
  get taken(): number {
    return this.capacity - this.#freeTop;
  }

  get available(): number {
    return this.#freeTop;
  }

  /** Takes a free slot for `record` under a new generation (Reserved); -1 when none is free. */
  take(record: R): number {
    if (this.#freeTop === 0) return -1;
    const slot = this.#free[--this.#freeTop]!;
    this.#gens[slot] = this.#nextGen;
    this.#nextGen = this.#nextGen >= 0x7fff_fff0 ? 1 : this.#nextGen + 1;
    this.#state[slot] = SlotState.Reserved;
    this.#records[slot] = record;
    return slot;
  }

  gen(slot: number): number {
    return this.#gens[slot]!;
  }

  state(slot: number): SlotState {
    return this.#state[slot] as SlotState;
  }

  /** The record whose sequence (slot, gen) still holds the slot, else undefined. */
  current(slot: number, gen: number): R | undefined {
    if (!(slot >= 0 && slot < this.capacity) || this.#state[slot] === SlotState.Free) return;
    return this.#gens[slot] === gen ? this.#records[slot] : undefined;
  }

  /** Every record holding a slot, once each. */
  records(): Set<R> {
    const out = new Set<R>();
    for (let slot = 0; slot < this.capacity; slot++) {
      if (this.#state[slot] !== SlotState.Free) out.add(this.#records[slot]!);
    }
    return out;
  }

  /** The ADD record of (slot, gen) is written: the engine has the sequence. */
  sent(slot: number, gen: number): void {
    if (this.#is(slot, gen, SlotState.Reserved)) this.#state[slot] = SlotState.Running;
  }

  /**
   * Ends (slot, gen) early. A sequence the engine never received ends at once; a running one gets
   * an ABORT (queued if the ring has no room); one already aborting or ended is left alone.
   */
  abort(slot: number, gen: number): void {
    if (this.#is(slot, gen, SlotState.Reserved)) {
      this.#state[slot] = SlotState.Ended;
    } else if (this.#is(slot, gen, SlotState.Running)) {
      // Through the queue, so ABORTs reach the engine in order; written at once when there is room.
      this.#state[slot] = SlotState.AbortQueued;
      this.#aborts.push(slot, gen);
      this.retryAborts();
    }
  }

  /** Writes queued ABORTs, oldest first, until one finds no room; drops those no longer needed. */
  retryAborts(): void {
    const queue = this.#aborts;
    let i = 0;
    for (; i < queue.length; i += 2) {
      const slot = queue[i]!;
      if (!this.#is(slot, queue[i + 1]!, SlotState.AbortQueued)) continue;
      if (!this.#engine.abort(slot)) break;
      this.#state[slot] = SlotState.Aborting;
    }
    this.#aborts = i === 0 ? queue : queue.slice(i);
    if (this.#aborts.length > 0) this.#armRetry();
  }

  /** The engine confirmed (slot, gen) is over: its final output arrived. */
  ended(slot: number, gen: number): void {
    if (this.current(slot, gen) !== undefined) this.#state[slot] = SlotState.Ended;
  }

  /** The engine died: no sequence of this server runs any more, and no ABORT is owed. */
  endAll(): void {
    for (let slot = 0; slot < this.capacity; slot++) {
      if (this.#state[slot] !== SlotState.Free) this.#state[slot] = SlotState.Ended;
    }
    this.#aborts = [];
  }

  /** Frees (slot, gen) if its sequence has ended; true when it did. */
  release(slot: number, gen: number): boolean {
    if (!this.#is(slot, gen, SlotState.Ended)) return false;
    this.#state[slot] = SlotState.Free;
    this.#records[slot] = undefined;
    this.#free[this.#freeTop++] = slot;
    return true;
  }

  /** Stops the retry timer (shutdown). */
  close(): void {
    if (this.#retryTimer !== null) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
  }

  #is(slot: number, gen: number, state: SlotState): boolean {
    return this.#state[slot] === state && this.#gens[slot] === gen;
  }

  #armRetry(): void {
    if (this.#retryTimer !== null) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      this.retryAborts();
    }, ABORT_RETRY_MS);
    // Never what keeps a process alive: a sequence whose ABORT is owed ends with the engine anyway.
    this.#retryTimer.unref();
  }
}
