/**
 * The API server's side of the engine: writes ADD and ABORT records into this server's request ring,
 * runs control commands, and reads the engine's heartbeat and stats from the shared region.
 * (vLLM v1 keeps this in core_client.py; the transport itself is src/shm/ring.ts.)
 */

import { RS_ERR_ENGINE_DEAD } from '../../errors.js';
import { engineNoteSeq, readEngineNote } from '../../shm/engine-note.js';
import {
  ENGINE_STATE_STARTING,
  ENGINE_STATS_INDEX,
  STAT_SAMPLING_MASKS,
  STATS_SLOT_COUNT,
} from '../../shm/layout.js';
import type { Region } from '../../shm/region.js';
import { requestRingProducer } from '../../shm/region.js';
import type { RingProducer } from '../../shm/ring.js';
import { engineLastBeatMs, enginePid, engineStat, engineState, statsSeq } from '../../shm/words.js';
import { ControlClient } from '../../wire/control-channel.js';
import { type EngineNote, parseEngineNote } from '../../wire/engine-note.js';
import {
  ABORT_BYTES,
  type AddFields,
  addRecordBytes,
  RecordType,
  writeAbort,
  writeAdd,
} from '../../wire/messages.js';
import type { EnginePort } from './engine-port.js';

/** The engine beats once per loop turn (<= 50 ms idle); this much silence means it is stuck. */
export const HEARTBEAT_STALE_MS = 2_000;
/** How long an ADD may wait for room in a full request ring before the request gets a 503. */
const ADD_WAIT_MS = 20;

export class EngineClient implements EnginePort {
  readonly region: Region;
  readonly server: number;
  readonly control: ControlClient;
  readonly #ring: RingProducer;
  /** False between the supervisor's engine-down and engine-up. */
  #up = true;
  readonly #stats = new Float64Array(STATS_SLOT_COUNT);
  #noteText = '';
  #noteSeq = -1;
  #note: EngineNote = parseEngineNote('');

  constructor(region: Region, server: number) {
    this.region = region;
    this.server = server;
    this.#ring = requestRingProducer(region, server);
    this.control = new ControlClient(region, server);
  }

  /**
   * Writes and publishes an ADD record (EnginePort.add). A ring that stays full is RS_ERR_RING_FULL,
   * an engine found gone while waiting RS_ERR_RING_PEER_GONE: the ring's own errors, cause intact.
   */
  add(fields: AddFields): void {
    if (!this.#up) throw new RS_ERR_ENGINE_DEAD('the engine core is restarting');
    const at = this.#ring.reserve(RecordType.Add, addRecordBytes(fields), ADD_WAIT_MS);
    writeAdd(this.#ring, at, fields);
    this.#ring.commit();
  }

  /**
   * Writes an ABORT for `slot` if the ring has room now (EnginePort.abort): it runs in event handlers
   * (a socket's close, a stop string), so it neither throws nor waits on the ring's futex.
   */
  abort(slot: number): boolean {
    // A restarting engine forgets every request of the old one: there is nothing to abort.
    if (!this.#up) return true;
    let at = -1;
    try {
      at = this.#ring.tryReserve(RecordType.Abort, ABORT_BYTES);
    } catch {
      // Only a bad size or type throws here, neither possible for an ABORT: retry like a full ring.
    }
    // A full ring may leave a padding record pending at the wrap: publish it so the engine passes it.
    if (at >= 0) writeAbort(this.#ring, at, slot);
    this.#ring.commit();
    return at >= 0;
  }

  setUp(up: boolean): void {
    this.#up = up;
  }

  get up(): boolean {
    return this.#up;
  }

  /** Milliseconds since the engine's last heartbeat (Infinity before the first). */
  heartbeatAgeMs(): number {
    const last = engineLastBeatMs(this.region.f64);
    return last > 0 ? Date.now() - last : Number.POSITIVE_INFINITY;
  }

  /**
   * Alive: the supervisor has not reported it down, it beats, and the engine behind it can take
   * requests (a bridge publishes ENGINE_STATE_STARTING until its vLLM engine has registered).
   */
  alive(): boolean {
    const i32 = this.region.i32;
    return (
      this.#up &&
      enginePid(i32) !== 0 &&
      engineState(i32) !== ENGINE_STATE_STARTING &&
      this.heartbeatAgeMs() < HEARTBEAT_STALE_MS
    );
  }

  /** Whether the engine returns sampling masks (a vLLM engine only with ringserve's extension). */
  samplingMasks(): boolean {
    return engineStat(this.region.f64, STAT_SAMPLING_MASKS) === 1;
  }

  /**
   * The engine's note (why it cannot take requests, which engine it is, its LoRA adapters): one
   * atomic load while it is unchanged; copied and parsed when its seqlock word has moved.
   */
  note(): EngineNote {
    const seq = engineNoteSeq(this.region);
    if (seq === this.#noteSeq) return this.#note;
    const text = readEngineNote(this.region);
    // A write under way (an odd word) is read again next time; the text read is consistent.
    this.#noteSeq = (seq & 1) === 0 && engineNoteSeq(this.region) === seq ? seq : -1;
    if (text !== this.#noteText) {
      this.#noteText = text;
      this.#note = parseEngineNote(text);
    }
    return this.#note;
  }

  /** A consistent copy of the engine's stats block (seqlock read); index with the STAT_* constants. */
  stats(): Float64Array {
    const { i32, f64 } = this.region;
    for (let attempt = 0; attempt < 100; attempt++) {
      const before = statsSeq(i32);
      if ((before & 1) !== 0) continue;
      for (let s = 0; s < STATS_SLOT_COUNT; s++) this.#stats[s] = f64[ENGINE_STATS_INDEX + s]!;
      if (statsSeq(i32) === before) break;
    }
    return this.#stats;
  }
}
