/**
 * The API server's in-flight requests, by slot. A slot is the request's index in every per-request
 * table of this server (slot meta, accumulators, the engine's routing of outputs); it is taken when
 * the ADD record is written and given back only when the engine has confirmed the request is over
 * (its final output arrived), so outputs of a previous request can never land in a new one. Each
 * taking draws a new generation, which the engine echoes on every output (messages.ts).
 *
 * The main thread holds one small object per request here, whatever the request's length.
 */
import { randomInt } from 'node:crypto';

export interface InFlight<T> {
  readonly slot: number;
  readonly gen: number;
  /** Request id as the client sees it (without the response prefix). */
  readonly requestId: string;
  readonly state: T;
  /** True once the client's response is complete (sent, failed, or the client left). */
  settled: boolean;
  /** True once the engine confirmed this sequence is over (its final output arrived). */
  released: boolean;
}

export class RequestTable<T> {
  readonly capacity: number;
  readonly #entries: (InFlight<T> | undefined)[];
  /** Free slots as a stack; slots return here only when the engine confirmed. */
  readonly #free: Int32Array;
  #freeTop: number;
  /** Requests whose response is not yet complete (in flight from the client's view). */
  #active = 0;
  readonly #byId = new Map<string, number>();
  #nextGen: number;

  constructor(capacity: number) {
    this.capacity = capacity;
    this.#entries = new Array(capacity);
    this.#free = new Int32Array(capacity);
    for (let i = 0; i < capacity; i++) this.#free[i] = capacity - 1 - i;
    this.#freeTop = capacity;
    // A restarted API server must not reuse its predecessor's generations (their records may still
    // be in the output ring): start from a random point of the 31-bit space.
    this.#nextGen = randomInt(1, 2 ** 30);
  }

  /** Slots not yet released by the engine (responding or finishing). */
  get size(): number {
    return this.capacity - this.#freeTop;
  }

  /** Requests whose client is still waiting: the figure /load reports. */
  get active(): number {
    return this.#active;
  }

  /** Takes a slot, or returns null when every slot is in use (the caller answers 429). */
  take(requestId: string, state: T): InFlight<T> | null {
    if (this.#freeTop === 0) return null;
    const slot = this.#free[--this.#freeTop]!;
    const gen = this.#nextGen;
    this.#nextGen = this.#nextGen >= 0x7fff_fff0 ? 1 : this.#nextGen + 1;
    const entry: InFlight<T> = { slot, gen, requestId, state, settled: false, released: false };
    this.#entries[slot] = entry;
    this.#byId.set(requestId, slot);
    this.#active++;
    return entry;
  }

  get(slot: number): InFlight<T> | undefined {
    return this.#entries[slot];
  }

  /** The in-flight request with this client-visible id, if any. */
  byRequestId(requestId: string): InFlight<T> | undefined {
    const slot = this.#byId.get(requestId);
    return slot === undefined ? undefined : this.#entries[slot];
  }

  /** The client's response is complete (sent, failed or the client left); the slot stays taken. */
  settle(slot: number): void {
    const entry = this.#entries[slot];
    if (entry === undefined || entry.settled) return;
    entry.settled = true;
    this.#active--;
    if (this.#byId.get(entry.requestId) === slot) this.#byId.delete(entry.requestId);
  }

  /** The engine confirmed the request is over: the slot may be taken again. */
  release(slot: number): void {
    const entry = this.#entries[slot];
    if (entry === undefined) return;
    this.settle(slot);
    this.#entries[slot] = undefined;
    this.#free[this.#freeTop++] = slot;
  }

  /** Every taken slot (for failing all in flight when the engine dies). */
  *slots(): IterableIterator<InFlight<T>> {
    for (const entry of this.#entries) if (entry !== undefined) yield entry;
  }
}
