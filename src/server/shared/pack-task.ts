// What the main thread's packer pool (main/packer-pool.ts) and a packer thread (workers/packer.ts,
// packer/pack.ts) pass each other: the task, the thread's start data, a failure as plain data.
import type { ChatParseOptions } from '../../protocol/chat-parse/chat-output.js';
import type { ResponseForm } from '../../protocol/generate-response.js';
import type { ThreadPriority } from '../../shm/thread-priority.js';
import type { SharedTokenBytes } from '../../tokenizer/token-bytes.js';

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

/** What a packer returns instead of bytes when a request cannot be packed. */
export interface PackFailure {
  code: string;
  message: string;
  statusCode: number;
}

export interface PackerWorkerData {
  metaSab: SharedArrayBuffer;
  accSab: SharedArrayBuffer;
  arenaSab: SharedArrayBuffer;
  /** The response pool's buffer, or null: every answer in a Buffer of its own. */
  poolSab: SharedArrayBuffer | null;
  priority: ThreadPriority;
  /** Model preset and its special token ids: the token bytes of the OpenAI answers' logprobs. */
  preset: string;
  specialTokenIds: number[];
  /** The served tokenizer's byte table (shared, not copied); absent: the preset's stand-in. */
  tokenBytes?: SharedTokenBytes;
}
