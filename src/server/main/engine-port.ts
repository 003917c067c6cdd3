/**
 * What the request coordinator needs from the engine: the seam between per-request bookkeeping and
 * the request ring. EngineClient (engine-client.ts) is the real one; the coordinator's tests drive a
 * fake that records ADD and ABORT records and replays canned step records
 * (test/server/fake-engine-client.ts).
 */
import type { EngineNote } from '../../wire/engine-note.js';
import type { AddFields } from '../../wire/messages.js';

export interface EnginePort {
  /**
   * Writes and publishes an ADD record. Throws a coded 503 when the engine is down
   * (RS_ERR_ENGINE_DEAD), its ring stays full past a short bound (RS_ERR_RING_FULL) or it is gone
   * (RS_ERR_RING_PEER_GONE); the request is then refused and nothing of it reached the engine.
   */
  add(fields: AddFields): void;
  /**
   * Asks the engine to end the request in `slot` (its final output, finish abort, confirms it).
   * Never throws and never waits: false when the ring has no room now, and the caller retries
   * later; true when written, or when there is nothing to abort (the engine is down).
   */
  abort(slot: number): boolean;
  /** The supervisor has not reported the engine down, and it beats. */
  alive(): boolean;
  /** What the engine says of itself (why it cannot take requests); absent: nothing. */
  note?(): EngineNote;
  /** Between the supervisor's engine-down and engine-up: false. */
  setUp(up: boolean): void;
}
