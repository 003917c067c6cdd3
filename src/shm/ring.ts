// The two ends of the SPSC ring; the layout, its diagram and the shared geometry are in
// ring-endpoint.ts. Hot path (tryReserve/commit/next/release) allocates nothing.

import {
  RS_ERR_RING_BAD_TYPE,
  RS_ERR_RING_CORRUPT,
  RS_ERR_RING_FULL,
  RS_ERR_RING_PEER_GONE,
  RS_ERR_RING_RECORD_TOO_LARGE,
  RS_ERR_SHM_BAD_ARGUMENT,
} from '../errors.js';
import type { Doorbell } from './doorbell.js';
import { RING_CONSUMER_PID, RING_PRODUCER_PID } from './layout.js';
import { shmAddon } from './native.js';
import {
  MAX_RECORD_TYPE,
  PID_DETACHED,
  pidState,
  RECORD_HEADER_BYTES,
  RECORD_TYPE_PADDING,
  RingEndpoint,
  WAIT_SLICE_MS,
} from './ring-endpoint.js';

export { RECORD_HEADER_BYTES, RECORD_TYPE_PADDING, recordBytes } from './ring-endpoint.js';

/** How long waitForData polls before it sleeps on the futex. */
export const DEFAULT_SPIN_MICROS = 50;

export class RingProducer extends RingEndpoint {
  #pendingHead: number;
  #publishedHead: number;
  #cachedTail: number;
  readonly #pidIndex: number;
  readonly #peerPidIndex: number;

  /** Attaches as the producer: resumes at the published head; unpublished bytes of a dead producer are lost. */
  constructor(sab: SharedArrayBuffer, ringOffset: number, capacity: number, doorbell?: Doorbell) {
    super(sab, ringOffset, capacity, doorbell);
    this.#pidIndex = (ringOffset + RING_PRODUCER_PID) >> 2;
    this.#peerPidIndex = (ringOffset + RING_CONSUMER_PID) >> 2;
    this.#publishedHead = Atomics.load(this.i32, this.headIndex);
    this.#pendingHead = this.#publishedHead;
    this.#cachedTail = Atomics.load(this.i32, this.tailIndex);
    Atomics.store(this.i32, this.#pidIndex, process.pid);
  }

  /**
   * Reserves a record and returns the absolute byte offset of its payload (8-aligned), or -1 if
   * there is no room now. Write the payload before the next reserve or commit. A -1 may leave a
   * padding record pending at the wrap: commit() so the consumer can pass it.
   */
  tryReserve(type: number, payloadBytes: number): number {
    if (
      !(
        payloadBytes >= 0 &&
        payloadBytes <= this.maxPayloadBytes &&
        (payloadBytes | 0) === payloadBytes
      )
    ) {
      throw this.#badSize(payloadBytes);
    }
    if (!(type >= 1 && type <= MAX_RECORD_TYPE && (type | 0) === type)) {
      throw new RS_ERR_RING_BAD_TYPE(type);
    }
    const total = RECORD_HEADER_BYTES + ((payloadBytes + 7) & ~7);
    let head = this.#pendingHead;
    const contiguous = this.capacity - (head & this.mask);
    const needed = total <= contiguous ? total : contiguous + total;
    if (needed > this.capacity - ((head - this.#cachedTail) | 0)) {
      this.#cachedTail = Atomics.load(this.i32, this.tailIndex);
      const free = this.capacity - ((head - this.#cachedTail) | 0);
      if (needed > free) {
        // The record cannot go here; pad out the end now so it can go at the start once the
        // consumer catches up (else a record near capacity could never fit an empty ring).
        if (total > contiguous && contiguous <= free) this.#writePadding(head, contiguous);
        return -1;
      }
    }
    if (total > contiguous) {
      this.#writePadding(head, contiguous);
      head = (head + contiguous) | 0;
    }
    const at = this.dataStart + (head & this.mask);
    this.i32[at >> 2] = payloadBytes;
    this.i32[(at >> 2) + 1] = type;
    this.#pendingHead = (head + total) | 0;
    return at + RECORD_HEADER_BYTES;
  }

  /**
   * Like tryReserve, but waits up to `timeoutMs` for room. It first publishes what is pending (a
   * full ring drains only what is published). Throws RS_ERR_RING_FULL past the bound,
   * RS_ERR_RING_PEER_GONE as soon as the consumer is found dead or detached.
   */
  reserve(type: number, payloadBytes: number, timeoutMs: number): number {
    const at = this.tryReserve(type, payloadBytes);
    return at >= 0 ? at : this.#reserveSlow(type, payloadBytes, timeoutMs);
  }

  /** Publishes every record reserved since the last commit with one store; rings only a sleeper. */
  commit(): void {
    if (this.#pendingHead === this.#publishedHead) return;
    this.#publishedHead = this.#pendingHead;
    Atomics.store(this.i32, this.headIndex, this.#publishedHead);
    this.doorbell.ring();
  }

  /** Bytes free for new records now (reserved-but-uncommitted bytes count as used). */
  free(): number {
    this.#cachedTail = Atomics.load(this.i32, this.tailIndex);
    return this.capacity - ((this.#pendingHead - this.#cachedTail) | 0);
  }

  /** True while the consumer is attached and its process is alive. */
  peerAlive(): boolean {
    return pidState(Atomics.load(this.i32, this.#peerPidIndex)) === 'attached';
  }

  /** Marks this side gone (clean shutdown): a blocked consumer-side check sees it at once. */
  detach(): void {
    Atomics.store(this.i32, this.#pidIndex, PID_DETACHED);
  }

  #writePadding(head: number, bytes: number): void {
    const at = this.dataStart + (head & this.mask);
    this.i32[at >> 2] = bytes - RECORD_HEADER_BYTES;
    this.i32[(at >> 2) + 1] = RECORD_TYPE_PADDING;
    this.#pendingHead = (head + bytes) | 0;
  }

  #badSize(payloadBytes: number): Error {
    if (Number.isInteger(payloadBytes) && payloadBytes > this.maxPayloadBytes) {
      return new RS_ERR_RING_RECORD_TOO_LARGE(payloadBytes, this.capacity, this.maxPayloadBytes);
    }
    return new RS_ERR_SHM_BAD_ARGUMENT(`record payload size ${payloadBytes}`);
  }

  #reserveSlow(type: number, payloadBytes: number, timeoutMs: number): number {
    const deadline = performance.now() + timeoutMs;
    const addon = shmAddon();
    // Set before the re-check in tryReserve loads TAIL, so a release() that the re-check misses
    // sees the flag and wakes us (see the doorbell's argument; the same holds for TAIL).
    Atomics.store(this.i32, this.waitingIndex, 1);
    try {
      for (;;) {
        const at = this.tryReserve(type, payloadBytes);
        if (at >= 0) return at;
        this.commit();
        if (pidState(Atomics.load(this.i32, this.#peerPidIndex)) === 'gone') {
          const pid = Atomics.load(this.i32, this.#peerPidIndex);
          throw new RS_ERR_RING_PEER_GONE(this.ringOffset, 'consumer', pid);
        }
        const remaining = deadline - performance.now();
        if (remaining <= 0) {
          throw new RS_ERR_RING_FULL(this.ringOffset, payloadBytes, timeoutMs);
        }
        const slice = Math.min(remaining, WAIT_SLICE_MS);
        addon.futexWait(this.i32, this.tailIndex, this.#cachedTail, slice);
      }
    } finally {
      Atomics.store(this.i32, this.waitingIndex, 0);
    }
  }
}

export class RingConsumer extends RingEndpoint {
  /** The current record (after next() returned true): its type, payload byte offset, payload bytes. */
  type = 0;
  offset = 0;
  length = 0;
  #readPos: number;
  #cachedHead: number;
  readonly #pidIndex: number;
  readonly #peerPidIndex: number;

  /** Attaches as the consumer: resumes at the released tail (unreleased records are delivered again). */
  constructor(sab: SharedArrayBuffer, ringOffset: number, capacity: number, doorbell?: Doorbell) {
    super(sab, ringOffset, capacity, doorbell);
    this.#pidIndex = (ringOffset + RING_CONSUMER_PID) >> 2;
    this.#peerPidIndex = (ringOffset + RING_PRODUCER_PID) >> 2;
    this.#readPos = Atomics.load(this.i32, this.tailIndex);
    this.#cachedHead = this.#readPos;
    Atomics.store(this.i32, this.#pidIndex, process.pid);
  }

  /** Advances to the next published record, skipping padding; false when none is published. */
  next(): boolean {
    for (;;) {
      let available = (this.#cachedHead - this.#readPos) | 0;
      if (available === 0) {
        this.#cachedHead = Atomics.load(this.i32, this.headIndex);
        available = (this.#cachedHead - this.#readPos) | 0;
        if (available === 0) return false;
      }
      const at = this.dataStart + (this.#readPos & this.mask);
      const length = this.i32[at >> 2]!;
      const total = RECORD_HEADER_BYTES + ((length + 7) & ~7);
      // length first: past 2^31 - 8 the padding arithmetic wraps and `total` goes negative (ops/fuzz).
      if (
        !(
          length >= 0 &&
          length <= this.maxPayloadBytes &&
          total <= available &&
          total <= this.capacity - (this.#readPos & this.mask)
        )
      ) {
        throw new RS_ERR_RING_CORRUPT(this.ringOffset, `record length ${length} at ${at}`);
      }
      this.#readPos = (this.#readPos + total) | 0;
      const type = this.i32[(at >> 2) + 1]!;
      if (type === RECORD_TYPE_PADDING) continue;
      this.type = type;
      this.offset = at + RECORD_HEADER_BYTES;
      this.length = length;
      return true;
    }
  }

  /** Hands everything consumed so far back to the producer; once per batch. Wakes a blocked producer. */
  release(): void {
    Atomics.store(this.i32, this.tailIndex, this.#readPos);
    if (Atomics.load(this.i32, this.waitingIndex) !== 0) {
      shmAddon().futexWake(this.i32, this.tailIndex, 1);
    }
  }

  /**
   * Drops every published record unread and releases them; returns the bytes dropped. For a
   * restarted consumer whose predecessor's records are meaningless to it (records stay whole: only
   * published records are skipped).
   */
  skipToHead(): number {
    this.#cachedHead = Atomics.load(this.i32, this.headIndex);
    const skipped = (this.#cachedHead - this.#readPos) | 0;
    this.#readPos = this.#cachedHead;
    this.release();
    return skipped;
  }

  /** True if a record (or padding) is published past the read position. */
  hasData(): boolean {
    if (this.#cachedHead !== this.#readPos) return true;
    this.#cachedHead = Atomics.load(this.i32, this.headIndex);
    return this.#cachedHead !== this.#readPos;
  }

  /**
   * Waits until data is published or `timeoutMs` passes; true if there is data. It first polls for
   * `spinMicros` (a producer mid-burst publishes again within microseconds: without the spin the
   * wake-latency bench saw the consumer fall asleep ~10 times per 130-record burst, each costing a
   * futex round trip), then sleeps on the doorbell.
   */
  waitForData(timeoutMs: number, spinMicros: number = DEFAULT_SPIN_MICROS): boolean {
    if (this.hasData()) return true;
    const now = performance.now();
    const deadline = now + timeoutMs;
    const spinUntil = now + Math.min(spinMicros / 1000, timeoutMs);
    while (performance.now() < spinUntil) {
      for (let i = 0; i < 64; i++) if (this.hasData()) return true;
    }
    const bell = this.doorbell;
    for (;;) {
      const seq = bell.prepareSleep();
      if (this.hasData()) {
        bell.endSleep();
        return true;
      }
      bell.sleep(seq, deadline - performance.now());
      bell.endSleep();
      if (this.hasData()) return true;
      if (performance.now() >= deadline) return false;
    }
  }

  /** True while the producer is attached and its process is alive. */
  peerAlive(): boolean {
    return pidState(Atomics.load(this.i32, this.#peerPidIndex)) === 'attached';
  }

  /** Marks this side gone (clean shutdown): a producer blocked on a full ring fails at once. */
  detach(): void {
    Atomics.store(this.i32, this.#pidIndex, PID_DETACHED);
    if (Atomics.load(this.i32, this.waitingIndex) !== 0) {
      shmAddon().futexWake(this.i32, this.tailIndex, 1);
    }
  }
}
