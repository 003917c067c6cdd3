import type { MessagePort } from 'node:worker_threads';
import type { ErrorData } from '../../errors.js';
import type { ChatParseOptions } from '../../protocol/chat-parse/chat-output.js';
import type { ThreadPriority } from '../../shm/thread-priority.js';
import type { TokenBytesData } from './detokenizer.js';

/**
 * The messages between an API server's main thread and its output worker, and the worker's start
 * data: the control messages beside the data path (the data itself is in shared memory). Slots
 * travel with their generation, so a message about a request the slot has moved past is ignored.
 */

/**
 * What the main thread starts the output worker with; its token bytes (TokenBytesData): the served
 * tokenizer's table, shared, else the byte-level stand-in with the special ids.
 */
export interface OutputWorkerData extends TokenBytesData {
  /** The buffer holding the output ring (the shared region, or any SAB in tests). */
  ringSab: SharedArrayBuffer;
  ringOffset: number;
  ringCapacity: number;
  metaSab: SharedArrayBuffer;
  accSab: SharedArrayBuffer;
  arenaSab: SharedArrayBuffer;
  /** The worker's end of a MessageChannel (transferred); it reads it with receiveMessageOnPort. */
  port: MessagePort;
  serverIndex: number;
  /** Longest futex sleep when the ring is empty, ms (bounds how late a message is seen). */
  waitMs: number;
  /** Arena growth step, bytes. */
  arenaGrowStepBytes?: number;
  /** How far the worker lowers itself below the main thread (absent: not at all). */
  priority?: ThreadPriority;
}

// ---- main -> worker ----------------------------------------------------------------------------

/** The response of (slot, generation) has been sent: return its blocks. */
export interface FreeMessage {
  type: 'free';
  slot: number;
  generation: number;
}

/**
 * The engine died: every request whose slot still has the generation given here (0: none) will
 * get no final output; the main thread fails them. Generations are a snapshot of the slot meta
 * taken when the death was noticed, so requests started on the restarted engine are untouched.
 */
export interface EngineDownMessage {
  type: 'engine-down';
  generations: Int32Array;
}

/** A streaming request's strings, sent before its ADD record is committed. */
export interface StreamMessage {
  type: 'stream';
  slot: number;
  generation: number;
  requestId: string;
  model: string;
  created: number;
  /** OpenAI completions' echo: the prompt text the first chunk starts with. */
  echo?: string | null;
  /** With return_token_ids: the prompt ids the first chunk carries. */
  promptTokenIds?: Int32Array | null;
  /** Chat with a reasoning or tool-call parser on: how to split the text (stream-encoder.ts). */
  chatParse?: ChatParseOptions | null;
}

export interface StopMessage {
  type: 'stop';
}

export type ToOutputWorker = FreeMessage | EngineDownMessage | StreamMessage | StopMessage;

// ---- worker -> main ----------------------------------------------------------------------------

/** SSE bytes of one pass for every streaming request that has new events, in one buffer. */
export interface StreamBytes {
  slots: Int32Array;
  generations: Int32Array;
  /** Entry i's bytes are bytes[ends[i-1] (0 for the first) .. ends[i]). */
  ends: Int32Array;
  /** 1 when entry i ends its choice (the last event, and for n = 1 the usage event and [DONE]). */
  done: Uint8Array;
  bytes: ArrayBuffer;
}

/**
 * kv_transfer_params an engine answered this pass (a prefill leg through a vLLM engine): entry i
 * is bytes[ends[i-1] (0 for the first) .. ends[i]), one msgpack map, for (slots[i], generations[i]).
 */
export interface KvParamsBatch {
  slots: Int32Array;
  generations: Int32Array;
  ends: Int32Array;
  bytes: Uint8Array;
}

/** One drain pass's outcome (posted only when something happened). */
export interface OutputBatch {
  type: 'batch';
  /** Responses now complete: pack them (non-streaming), or the stream has ended (see streams). */
  finished: Int32Array;
  finishedGenerations: Int32Array;
  /** The engine confirmed these done: the slot may be reused once the main thread has freed it. */
  released: Int32Array;
  releasedGenerations: Int32Array;
  /** Completed by the worker (stop string, output error) while the engine still runs them: send ABORT. */
  stopped: Int32Array;
  stoppedGenerations: Int32Array;
  streams: StreamBytes | null;
  /** Set on the requests before `finished` is handled (their answers carry them). */
  kvParams: KvParamsBatch | null;
}

export interface OutputReady {
  type: 'ready';
}

/** An error in the worker, as plain data (errorFromData); `fatal` means the worker has stopped. */
export interface OutputFailure {
  type: 'error';
  error: ErrorData;
  fatal: boolean;
}

export interface OutputStopped {
  type: 'stopped';
}

export type FromOutputWorker = OutputBatch | OutputReady | OutputFailure | OutputStopped;
