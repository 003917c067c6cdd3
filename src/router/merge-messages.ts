/**
 * What the main thread and a merge thread (workers/router-merge.ts) say to each other: one task
 * type and one reply type, as plain data (structured clone) with the bytes moved, never copied.
 * A request's merge state lives in the thread that decoded its prefill answer (merge-table.ts),
 * keyed by `id`; every later task of the request goes to that thread (merge-pool.ts).
 *
 *   main                                  merge thread
 *   prefill answer bytes ── 'prefill' ──▶ decode it, keep it; ◀── the handle (kv_transfer_params)
 *   decode answer bytes  ── 'merge'   ──▶ merge, encode, forget ◀── the client's answer bytes
 *   decode SSE bytes     ── 'chunk'   ──▶ re-write the events   ◀── the client's SSE bytes, done
 *   stream cut short     ── 'end'     ──▶ error event + [DONE], forget
 *   request given up     ── 'drop'    ──▶ forget
 */
import type { ErrorData } from '../errors.js';
import type { ResponseForm } from '../protocol/generate-response.js';

export type MergeOp = 'prefill' | 'merge' | 'chunk' | 'end' | 'drop';

/** What the client asked, as far as the merge needs it (sent once, with the prefill answer). */
export interface MergeSpec {
  requestId: string;
  /** The non-streamed answer's form; a stream is legacy when `"packed": false`, else packed. */
  form: ResponseForm;
  stream: boolean;
  /** The client's `kv_transfer_params` (echoed in the answer), or null. */
  clientKv: unknown;
  /** prompt_logprobs k, or -1 when none was asked. */
  promptLogprobsK: number;
  /** The prompt (only when prompt logprobs were asked: they are read against it). */
  promptTokenIds: readonly number[] | null;
}

export interface MergeTask {
  op: MergeOp;
  /** The request's key in its thread (the pool's counter, not the client's request id). */
  id: number;
  /** An upstream answer's bytes ('prefill', 'merge', 'chunk'), moved to the thread; else null. */
  bytes: Uint8Array | null;
  contentType: string;
  /** The instance that sent `bytes` (error messages name it). */
  upstream: string;
  /** 'prefill' only. */
  spec: MergeSpec | null;
}

/** How the decode instance came by the prompt's KV (router metrics): none sent no rows. */
export enum KvOutcome {
  None = 0,
  Imported = 1,
  Recomputed = 2,
}

export interface MergeReply {
  /** The client's bytes ('merge', 'chunk', 'end'), moved from the thread; null: nothing to send. */
  out: Uint8Array | null;
  /** 'chunk', 'end': the stream is over (its [DONE] is in `out`). */
  done: boolean;
  /** 'prefill': the prefill answer's kv_transfer_params, for the decode request. */
  handle: unknown;
  /** 'merge': imported or recomputed. */
  kv: KvOutcome;
}

/** A request the thread could not merge: its coded error as plain data (an Error loses its code). */
export interface MergeFailure {
  error: ErrorData;
}
