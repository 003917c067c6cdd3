// What the main thread's packer pool (main/packer-pool.ts) and a packer thread (workers/packer.ts,
// response-packer.ts) pass each other: the task, the thread's start data, the answer (a failure as the
// coded error's plain data, src/errors.ts).
import type { ErrorData } from '../../errors.js';
import type { ChatParseOptions } from '../../protocol/chat-parse/chat-output.js';
import type { ResponseForm } from '../../protocol/generate-response.js';
import type { ThreadPriority } from '../../shm/thread-priority.js';
import type { TokenBytesData } from './detokenizer.js';
import type { PoolRun } from './response-pool.js';

/** One finished request to encode. */
export interface PackTask {
  /** The request's slots, choice i from slots[i] (n = 1: one slot). */
  slots: readonly number[];
  /** The slots' generations when the response finished; a packer refuses a slot that moved on. */
  generations?: readonly number[];
  form: ResponseForm;
  /** The id without the `generate-tokens-` prefix. */
  requestId: string;
  model: string;
  /** Unix seconds. */
  created: number;
  kvTransferParams?: unknown;
  /** The OpenAI routes' answer (form `completion` or `chat`): what the columns alone do not say. */
  openai?: PackOpenAi;
}

export interface PackOpenAi {
  /** Choices per prompt: choice i answers prompt floor(i / n). */
  n: number;
  /** Each prompt's length in tokens (usage counts each prompt once). */
  promptLens: number[];
  /** Completions' echo: each prompt's text; else null. */
  echo: readonly string[] | null;
  /** With return_token_ids: each prompt's ids; else null. */
  promptTokenIds: readonly Int32Array[] | null;
  topLogprobs: number;
  returnTokenIds: boolean;
  /** Chat with a reasoning or tool-call parser on: how to split each choice's text; else null. */
  chatParse?: ChatParseOptions | null;
}

/**
 * What a packer answers a task with: the response in a run of the response pool, or in a Buffer
 * moved to the main thread; or, when the request cannot be packed, its coded error as plain data.
 */
export type PackAnswer = PoolRun | Uint8Array | { error: ErrorData };

/**
 * A packer thread's start data; its token bytes (TokenBytesData), for the OpenAI answers' logprobs:
 * the served tokenizer's table, shared, else the byte-level stand-in with the special ids.
 */
export interface PackerWorkerData extends TokenBytesData {
  metaSab: SharedArrayBuffer;
  accSab: SharedArrayBuffer;
  arenaSab: SharedArrayBuffer;
  /** The response pool's buffer, or null: every answer in a Buffer of its own. */
  poolSab: SharedArrayBuffer | null;
  priority: ThreadPriority;
}
