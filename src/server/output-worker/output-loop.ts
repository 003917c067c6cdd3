// The output worker's loop, runnable in any thread (workers/output-worker.ts is its entry point).
// It never returns to its event loop while running: it drains the output ring, scatters, encodes
// stream deltas, posts one message per pass, reads main-thread messages synchronously between
// passes, and sleeps on the ring's futex doorbell (bounded) when the ring is empty.
import { type MessagePort, receiveMessageOnPort } from 'node:worker_threads';
import { errorToData } from '../../errors.js';
import { recorderFromEnvironment } from '../../obs/worker-metrics.js';
import { RingConsumer } from '../../shm/ring.js';
import { RecordType } from '../../wire/messages.js';
import { AccumulatorTable } from '../cross-thread/accumulators.js';
import { BlockArena } from '../cross-thread/block-arena.js';
import { tokenBytesFor } from '../cross-thread/detokenizer.js';
import type {
  FromOutputWorker,
  OutputBatch,
  OutputWorkerData,
  ToOutputWorker,
} from '../cross-thread/messages.js';
import { ResponseView } from '../cross-thread/response-view.js';
import { SlotMetaTable } from '../cross-thread/slot-meta.js';
import { reservedScratch } from '../cross-thread/writer-scratch.js';
import { StepScatter } from './scatter.js';
import { SlotEventList } from './slot-events.js';
import { StreamEncoder } from './stream-encoder.js';

/** Records handled per pass at most, so a flooded ring still yields messages and stream events. */
const MAX_RECORDS_PER_PASS = 256;
/**
 * How often, at most, an idle pass asks the arena to give free memory back (block-arena.ts trim()):
 * rarely enough that a steady load's free blocks stay warm, soon enough that a burst's peak is
 * returned within a second or two of its end.
 */
const TRIM_EVERY_MS = 1_000;
/**
 * An arena with no live request is left as it is until the ring has been quiet this long: an
 * engine restart (a few seconds) or a short gap between rollout batches does not give back what
 * the next requests fault in again at once; an idle server gives it back after 10 s.
 */
export const EMPTY_HOLD_MS = 10_000;

export class OutputLoop {
  readonly scatter: StepScatter;
  readonly #arena: BlockArena;
  readonly #consumer: RingConsumer;
  readonly #port: MessagePort;
  readonly #streams: StreamEncoder;
  readonly #waitMs: number;
  readonly #lookupHeaders = (): void => this.#readMessages();
  /** Called on every idle pass (memory-collect.ts: answers the main thread's request to collect). */
  readonly #onIdle: (() => void) | null;
  #running = true;
  #lastTrimMs = 0;
  /** When the last pass that handled records ran (performance.now()). */
  #lastRecordsMs = 0;

  constructor(data: OutputWorkerData, onIdle: (() => void) | null = null) {
    this.#onIdle = onIdle;
    const meta = new SlotMetaTable(data.metaSab);
    const acc = new AccumulatorTable(data.accSab);
    const arena = new BlockArena(
      data.arenaSab,
      data.arenaGrowStepBytes === undefined ? {} : { growStepBytes: data.arenaGrowStepBytes },
    );
    this.#arena = arena;
    const tokens = tokenBytesFor(data);
    // Request metrics into the region, when the API server shared where (worker-metrics.ts).
    const metrics = recorderFromEnvironment((slot) => meta.promptLen(slot));
    this.scatter = new StepScatter({
      meta,
      acc,
      arena,
      tokens,
      ...(metrics === null ? {} : { metrics }),
    });
    this.#streams = new StreamEncoder(
      new ResponseView(meta, acc, data.arenaSab),
      new SlotEventList(acc.slots),
      tokens,
      reservedScratch(),
    );
    this.#consumer = new RingConsumer(data.ringSab, data.ringOffset, data.ringCapacity);
    this.#port = data.port;
    this.#waitMs = data.waitMs;
  }

  /** Runs until a stop message; posts `ready` first and `stopped` last. */
  run(): void {
    this.#post({ type: 'ready' });
    try {
      while (this.#running) {
        this.#readMessages();
        if (!this.#running) break;
        if (this.#pass() > 0) {
          this.#lastRecordsMs = performance.now();
        } else {
          this.#trimWhenDue();
          this.#onIdle?.();
          this.#consumer.waitForData(this.#waitMs);
        }
      }
      this.#consumer.detach();
      this.#post({ type: 'stopped' });
    } catch (err) {
      this.#post({ type: 'error', error: errorToData(err), fatal: true });
    }
  }

  /** One drain pass: returns the number of records handled. */
  #pass(): number {
    const consumer = this.#consumer;
    const scatter = this.scatter;
    scatter.clearEvents();
    let records = 0;
    while (records < MAX_RECORDS_PER_PASS && consumer.next()) {
      records++;
      if (consumer.type !== RecordType.Step) continue;
      try {
        scatter.scatterStep(consumer, consumer.offset, consumer.length);
      } catch (err) {
        if ((err as { code?: unknown }).code !== 'RS_ERR_OUTPUT_BAD_STEP') throw err;
        this.#post({ type: 'error', error: errorToData(err), fatal: false });
      }
    }
    if (records > 0) consumer.release();
    const streams = this.#streams.encode(scatter.streamed, this.#lookupHeaders);
    const kvParams = scatter.kvParams.toBatch();
    if (
      streams !== null ||
      kvParams !== null ||
      scatter.finished.count + scatter.released.count + scatter.stopped.count > 0
    ) {
      const finished = scatter.finished.toArrays();
      const released = scatter.released.toArrays();
      const stopped = scatter.stopped.toArrays();
      const batch: OutputBatch = {
        type: 'batch',
        finished: finished.slots,
        finishedGenerations: finished.generations,
        released: released.slots,
        releasedGenerations: released.generations,
        stopped: stopped.slots,
        stoppedGenerations: stopped.generations,
        streams,
        kvParams,
      };
      this.#port.postMessage(batch, streams === null ? [] : [streams.bytes]);
    }
    return records;
  }

  /**
   * On an idle pass: gives the arena's excess free memory back, at most every TRIM_EVERY_MS (an
   * arena with no live request only once the ring has been quiet for EMPTY_HOLD_MS, and then the
   * stream encoder's writer too).
   */
  #trimWhenDue(): void {
    const now = performance.now();
    if (now - this.#lastTrimMs < TRIM_EVERY_MS) return;
    this.#lastTrimMs = now;
    if (this.#arena.liveBytes === 0 && now - this.#lastRecordsMs < EMPTY_HOLD_MS) return;
    if (this.#arena.excessBytes > 0) this.#arena.trim();
    // Nothing to give back (nothing written since the last time) costs a reset and a compare.
    if (this.#arena.liveBytes === 0) this.#streams.release();
  }

  /** Applies every pending main-thread message. */
  #readMessages(): void {
    for (;;) {
      const received = receiveMessageOnPort(this.#port);
      if (received === undefined) return;
      this.#apply(received.message as ToOutputWorker);
    }
  }

  #apply(msg: ToOutputWorker): void {
    switch (msg.type) {
      case 'free':
        this.scatter.free(msg.slot, msg.generation);
        return;
      case 'stream':
        this.#streams.setHeader(msg.slot, msg);
        return;
      case 'engine-down':
        for (let slot = 0; slot < msg.generations.length; slot++) {
          const gen = msg.generations[slot]!;
          if (gen !== 0) this.scatter.engineGone(slot, gen);
        }
        return;
      case 'stop':
        this.#running = false;
        return;
    }
  }

  #post(msg: FromOutputWorker): void {
    this.#port.postMessage(msg);
  }
}
