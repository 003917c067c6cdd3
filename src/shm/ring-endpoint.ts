// Single-producer single-consumer ring of variable-length records inside a SharedArrayBuffer.
//
//   ringOffset                                                      (all offsets from layout.ts)
//   +0    +------------------------------------------------------+
//         | HEAD (producer) | PRODUCER_PID | PRODUCER_WAITING      |  cache line 0: producer writes
//   +64   +------------------------------------------------------+
//         | TAIL (consumer) | CONSUMER_PID                         |  cache line 1: consumer writes
//   +128  +------------------------------------------------------+
//         | own doorbell: SEQ | SLEEPING                          |  cache line 2 (unless one is shared)
//   +192  +------------------------------------------------------+  RING_DATA, `capacity` bytes:
//         | len u32 | type u32 | payload ... pad to 8 | len | type | payload | ... | len | 0 | (pad) |
//         +------------------------------------------------------+
//            ^ tail & mask                     ^ head & mask           padding record at the wrap
//
// HEAD and TAIL are free-running u32 byte counts (kept as i32); with a power-of-two capacity,
// `(head - tail) | 0` is the bytes in use and `pos & mask` the place in the data. A record is an
// 8-byte header (payload length, type) and the payload, padded to 8 bytes, so every payload starts
// 8-aligned. A record never straddles the end: the producer fills the rest with a padding record
// (type 0) and starts at the beginning. Publication is one Atomics.store of HEAD after the bytes are
// written (release); the consumer's Atomics.load of HEAD before reading them is the acquire.
//
// Hot path (tryReserve/commit/next/release) allocates nothing: state lives in number fields.

import { RS_ERR_RING_BAD_CAPACITY, RS_ERR_SHM_BAD_LAYOUT } from '../errors.js';
import { Doorbell } from './doorbell.js';
import {
  isValidRingCapacity,
  RING_DATA,
  RING_DOORBELL,
  RING_HEAD,
  RING_HEADER_BYTES,
  RING_PRODUCER_WAITING,
  RING_TAIL,
} from './layout.js';
import { isProcessAlive } from './liveness.js';

export const RECORD_HEADER_BYTES = 8;
/** Record type of the padding record at the wrap; callers use types 1 .. 2^31-1. */
export const RECORD_TYPE_PADDING = 0;
export const MAX_RECORD_TYPE = 0x7fff_ffff;
export const PID_DETACHED = -1;
/** A blocked producer re-checks its consumer's liveness at least this often. */
export const WAIT_SLICE_MS = 25;

/** Bytes a record with `payloadBytes` of payload takes in the ring. */
export function recordBytes(payloadBytes: number): number {
  return RECORD_HEADER_BYTES + ((payloadBytes + 7) & ~7);
}

export function pidState(pid: number): 'attached' | 'never' | 'gone' {
  if (pid === 0) return 'never';
  if (pid === PID_DETACHED || !isProcessAlive(pid)) return 'gone';
  return 'attached';
}

/** What both ends share: the views, the geometry, the word indices. */
export abstract class RingEndpoint {
  /** Views over the whole SharedArrayBuffer: payload offsets are absolute byte offsets into these. */
  readonly bytes: Uint8Array;
  readonly i32: Int32Array;
  readonly u16: Uint16Array;
  readonly f32: Float32Array;
  readonly f64: Float64Array;
  readonly view: DataView;
  readonly ringOffset: number;
  readonly capacity: number;
  /** Largest payload a record may carry: capacity - 8. */
  readonly maxPayloadBytes: number;
  readonly doorbell: Doorbell;
  protected readonly dataStart: number;
  protected readonly mask: number;
  protected readonly headIndex: number;
  protected readonly tailIndex: number;
  protected readonly waitingIndex: number;

  constructor(sab: SharedArrayBuffer, ringOffset: number, capacity: number, doorbell?: Doorbell) {
    if (!isValidRingCapacity(capacity)) throw new RS_ERR_RING_BAD_CAPACITY(capacity);
    if (ringOffset % 64 !== 0 || ringOffset < 0) {
      throw new RS_ERR_SHM_BAD_LAYOUT(`ring offset ${ringOffset} is not 64-byte aligned`);
    }
    if (ringOffset + RING_HEADER_BYTES + capacity > sab.byteLength) {
      throw new RS_ERR_SHM_BAD_LAYOUT(`ring at ${ringOffset} runs past the buffer's end`);
    }
    const length = sab.byteLength;
    this.bytes = new Uint8Array(sab);
    this.i32 = new Int32Array(sab, 0, length >> 2);
    this.u16 = new Uint16Array(sab, 0, length >> 1);
    this.f32 = new Float32Array(sab, 0, length >> 2);
    this.f64 = new Float64Array(sab, 0, length >> 3);
    this.view = new DataView(sab);
    this.ringOffset = ringOffset;
    this.capacity = capacity;
    this.maxPayloadBytes = capacity - RECORD_HEADER_BYTES;
    this.doorbell = doorbell ?? new Doorbell(sab, ringOffset + RING_DOORBELL);
    this.dataStart = ringOffset + RING_DATA;
    this.mask = capacity - 1;
    this.headIndex = (ringOffset + RING_HEAD) >> 2;
    this.tailIndex = (ringOffset + RING_TAIL) >> 2;
    this.waitingIndex = (ringOffset + RING_PRODUCER_WAITING) >> 2;
  }

  /** Bytes published and not yet released. */
  used(): number {
    return (Atomics.load(this.i32, this.headIndex) - Atomics.load(this.i32, this.tailIndex)) | 0;
  }
}
