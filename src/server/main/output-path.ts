/**
 * What the main thread needs from output processing, whichever way it is done: by the output worker
 * and packer pool (`--output-processing workers`, the default) or on the main thread with one object
 * per token (`inline`, the benchmark's baseline). The request coordinator talks only to this, and
 * an output path only reports what happened to each sequence (slot, gen): when a request is
 * complete is decided once, by the coordinator and the request's ChoiceGroup.
 */
import type { ResponsePoolStats } from '../cross-thread/response-pool.js';
import type { RequestRecord } from './request-record.js';

export interface OutputEvents {
  /** The request whose sequence (slot, gen) still holds the slot, if any. */
  record(slot: number, gen: number): RequestRecord | undefined;
  /**
   * The sequence's answer side is complete: its choice is ready to encode, or it failed (`failure`,
   * a coded error). Streaming sequences report it too; their stream's last bytes come first.
   */
  finished(slot: number, gen: number, failure: Error | null): void;
  /** Streaming: SSE bytes to write; `last` when the stream's final event ([DONE]) is included. */
  stream(slot: number, gen: number, bytes: Buffer, last: boolean): void;
  /** The output side finished the sequence itself (a stop string matched): the engine must abort it. */
  stopped(slot: number, gen: number): void;
  /** The engine confirmed the sequence is over (its final output arrived). */
  released(slot: number, gen: number): void;
}

export interface OutputPath {
  /**
   * Registers choice `index` of `record` (its sequence in record.group.slots[index]) before that
   * sequence's ADD record is written.
   */
  open(record: RequestRecord, index: number): void;
  /**
   * Every choice of a non-streaming request finished well: its answer in record.form, at once
   * (encoded on this thread) or later (by another); a failure to encode throws or rejects.
   */
  encode(record: RequestRecord): Buffer | Promise<Buffer>;
  /**
   * A stream with several choices (OpenAI's n, or several prompts) whose every choice has sent its
   * last event: the events that end it (the usage event when asked, then [DONE]).
   */
  streamTail(record: RequestRecord): Buffer;
  /** The answer is settled and the engine released the slot: its output state may be reused. */
  free(slot: number, gen: number): void;
  /** The engine died: forget every request's partial output. */
  engineDown(): void;
  /** Outstanding encode work (packer queue depth), for metrics. */
  queueDepth(): number;
  /** Answers encoded on the main thread since the start, for metrics. */
  inlineAnswers(): number;
  /** How answers were placed in the response pool, for metrics; null without one. */
  poolStats(): ResponsePoolStats | null;
  close(): Promise<void>;
}
