/**
 * The API server's requests in flight: their records by client-visible id (so a duplicate id is
 * refused and /abort_requests finds its request) and by slot (SlotTable). A request is in flight
 * from the client's view until its answer is settled; its slots stay taken until the engine has
 * confirmed each sequence's end. The main thread holds one record per request here, whatever the
 * request's length.
 */
import { ChurnMap } from '../../wire/churn-map.js';
import type { EnginePort } from './engine-port.js';
import type { RequestRecord } from './request-record.js';
import { SlotTable } from './slot-table.js';

export class RequestTable {
  readonly slots: SlotTable<RequestRecord>;
  readonly #byId = new ChurnMap<string, RequestRecord>();

  constructor(capacity: number, engine: EnginePort) {
    this.slots = new SlotTable(capacity, engine);
  }

  /** Requests whose client is still waiting: the figure /load reports. */
  get active(): number {
    return this.#byId.size;
  }

  /** The in-flight request with this client-visible id, if any. */
  byId(requestId: string): RequestRecord | undefined {
    return this.#byId.get(requestId);
  }

  /**
   * Registers `record` and takes a slot for each of its choices. admit() has checked that its id is
   * not in flight and that enough slots are free.
   */
  add(record: RequestRecord): void {
    const { group } = record;
    if (this.slots.available < group.size || this.#byId.has(record.identity.requestId)) {
      throw new RangeError(`request ${record.identity.requestId} was not admitted`);
    }
    for (let i = 0; i < group.size; i++) {
      const slot = this.slots.take(record);
      group.add(slot, this.slots.gen(slot));
    }
    this.#byId.set(record.identity.requestId, record);
  }

  /** The client's answer is complete (sent, failed, or the client left); false if it already was. */
  settle(record: RequestRecord): boolean {
    if (record.settled) return false;
    record.settled = true;
    this.#byId.delete(record.identity.requestId);
    return true;
  }
}
