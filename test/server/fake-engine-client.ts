// A fake of the coordinator's engine (EnginePort) for tests without a cluster, as vLLM tests its
// frontend against a mock engine that replays canned outputs. It records the ADD and ABORT records
// the coordinator writes, can be told that its request ring is full (for ADDs, for ABORTs) or that
// it is down, and writes canned STEP records into an output ring, in the engine core's format,
// for an output path to drain. The test decides when the engine "runs": nothing happens on its own.

import { RS_ERR_ENGINE_DEAD } from '../../src/errors.js';
import type { EnginePort } from '../../src/server/main/engine-port.js';
import { RING_HEADER_BYTES } from '../../src/shm/layout.js';
import { RingConsumer, RingProducer } from '../../src/shm/ring.js';
import { type AddFields, RecordType } from '../../src/wire/messages.js';
import { FinishReason } from '../../src/wire/types.js';
import { type StepRow, stepBytes, TINY_GEOMETRY, writeStep } from './output/step-records.js';

/** What one output of a running sequence carries (its slot and generation are filled in). */
export type Output = Omit<StepRow, 'slot' | 'gen'>;

export class FakeEngineClient implements EnginePort {
  /** Every ADD written, in order. */
  readonly adds: AddFields[] = [];
  /** The slot of every ABORT written, in order. */
  readonly aborts: number[] = [];
  /** Sequences the engine holds (added, not finished): slot -> generation. */
  readonly running = new Map<number, number>();
  /** The ADD with this index (0 = the first ever tried) throws this error instead of being written. */
  readonly addFailures = new Map<number, () => Error>();
  /** False: the request ring has no room for an ABORT now. */
  abortRoom = true;
  /** False: the engine misses its heartbeat (alive() is false while still "up"). */
  beating = true;
  /** The ring an output path drains (InlineOutputPath's consumer). */
  readonly outputRing: RingConsumer;
  readonly #producer: RingProducer;
  #up = true;
  #addsTried = 0;

  constructor(outputRingBytes = 1 << 20) {
    const sab = new SharedArrayBuffer(RING_HEADER_BYTES + outputRingBytes);
    this.#producer = new RingProducer(sab, 0, outputRingBytes);
    this.outputRing = new RingConsumer(sab, 0, outputRingBytes);
  }

  add(fields: AddFields): void {
    if (!this.#up) throw new RS_ERR_ENGINE_DEAD('the engine core is restarting');
    const failure = this.addFailures.get(this.#addsTried++);
    if (failure !== undefined) throw failure();
    this.adds.push(fields);
    this.running.set(fields.slot, fields.slotGen);
  }

  abort(slot: number): boolean {
    if (!this.#up) return true;
    if (!this.abortRoom) return false;
    this.aborts.push(slot);
    return true;
  }

  alive(): boolean {
    return this.#up && this.beating;
  }

  setUp(up: boolean): void {
    this.#up = up;
    // A restarted engine knows none of the old one's requests.
    if (!up) this.running.clear();
  }

  /** One engine step: a STEP record of `rows` in the output ring; finished rows end their sequence. */
  step(rows: readonly StepRow[]): void {
    const p = this.#producer;
    const at = p.tryReserve(RecordType.Step, stepBytes(rows, TINY_GEOMETRY));
    if (at < 0) throw new Error('the fake engine output ring is full: drain it in the test');
    writeStep(p, at, rows, TINY_GEOMETRY);
    p.commit();
    for (const row of rows) {
      const finished = (row.finish ?? FinishReason.None) !== FinishReason.None;
      if (finished && this.running.get(row.slot) === row.gen) this.running.delete(row.slot);
    }
  }

  /** One output of the sequence running in `slot`. */
  emit(slot: number, output: Output): void {
    const gen = this.running.get(slot);
    if (gen === undefined) throw new Error(`no sequence runs in slot ${slot}`);
    this.step([{ slot, gen, ...output }]);
  }

  /** `tokens` for the sequence in `slot`, one step each, the last one finishing with `finish`. */
  generate(slot: number, tokens: readonly number[], finish: number = FinishReason.Length): void {
    tokens.forEach((token, i) => {
      this.emit(slot, { token, finish: i === tokens.length - 1 ? finish : FinishReason.None });
    });
  }

  /** The engine's answer to the ABORTs it received: a final abort output for each still running. */
  confirmAborts(): void {
    for (const slot of new Set(this.aborts)) {
      if (this.running.has(slot)) this.emit(slot, { token: -1, finish: FinishReason.Abort });
    }
  }

  /** The generation of the latest ADD for `slot`. */
  genOf(slot: number): number {
    const add = this.adds.findLast((a) => a.slot === slot);
    if (add === undefined) throw new Error(`no ADD for slot ${slot}`);
    return add.slotGen;
  }
}
