/**
 * What the main thread needs from output processing, whichever way it is done: by the output worker
 * and packer pool (`--output-processing workers`, the default) or on the main thread with one object
 * per token (`inline`, the benchmark's baseline). The request coordinator talks only to this.
 */
import type { GenerateRequest } from '../protocol/generate-request.js';
import type { ResponseForm } from '../protocol/generate-response.js';

/** What the packer needs to name a response, fixed when the request is accepted. */
export interface ResponseIdentity {
  /** Client-visible id, without the `generate-tokens-` prefix. */
  requestId: string;
  model: string;
  /** Unix seconds. */
  created: number;
}

/**
 * The sequences of one request: n = 1 has one; `n > 1` fans out into n engine requests (vLLM v1's
 * parallel sampling), answered together once every one has finished. Choice i is slots[i].
 */
export interface ChoiceGroup {
  readonly slots: number[];
  readonly gens: number[];
  /** Sequences not yet finished. */
  remaining: number;
  /** One sequence failed: the request is answered with its error and the others are aborted. */
  failed: boolean;
}

export interface OutputEvents {
  /**
   * The response is complete and encoded (non-streaming), or failed; (slot, gen) name the request's
   * first sequence.
   */
  complete(slot: number, gen: number, result: Buffer | Error): void;
  /** Streaming: bytes to write (SSE events); `last` when the stream's final event is included. */
  stream(slot: number, gen: number, bytes: Buffer, last: boolean): void;
  /** The output side finished the request itself (a stop string matched): the engine must abort it. */
  stopped(slot: number, gen: number): void;
  /** The engine confirmed the request in `slot` is over (its final output arrived). */
  released(slot: number, gen: number): void;
}

export interface OutputPath {
  /**
   * Registers choice `index` of a request (its sequence in group.slots[index]) before its ADD
   * record is written; `request.params` are that sequence's own (its child seed).
   */
  open(
    group: ChoiceGroup,
    index: number,
    request: GenerateRequest,
    form: ResponseForm,
    id: ResponseIdentity,
  ): void;
  /** The response is sent and the engine released the slot: its accumulators may be reused. */
  free(slot: number, gen: number): void;
  /** The engine died: forget every request's partial output. */
  engineDown(): void;
  /** Outstanding encode work (packer queue depth), for metrics. */
  queueDepth(): number;
  close(): Promise<void>;
}
