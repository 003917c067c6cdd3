/**
 * The engine's message types: what goes in (EngineRequest), what the engine reports about itself
 * (EngineStats, StepTiming). Per-step outputs are columnar and live in step-outputs.ts.
 */

/** Why a request stopped. `None` marks an output row of a request that keeps running. */
export enum FinishReason {
  None = 0,
  /** EOS, a stop token id (or, decided by the API server, a stop string). */
  Stop = 1,
  /** max_tokens or max_model_len reached. */
  Length = 2,
  Abort = 3,
  /** The engine refused the request (see reject.ts for the reason code); it never ran. */
  Error = 4,
}

/** vLLM's name of a finish reason, as answers (`finish_reason`), log lines and metrics say it. */
export type FinishReasonName = 'stop' | 'length' | 'abort' | 'error';

/** The one table from FinishReason codes to their names (None has no name). */
export const FINISH_REASON_NAMES: Readonly<Record<FinishReason, FinishReasonName | null>> = {
  [FinishReason.None]: null,
  [FinishReason.Stop]: 'stop',
  [FinishReason.Length]: 'length',
  [FinishReason.Abort]: 'abort',
  [FinishReason.Error]: 'error',
};

/** The name of a FinishReason code read from a ring or a table; null for None or an unknown code. */
export function finishReasonName(code: number): FinishReasonName | null {
  return FINISH_REASON_NAMES[code as FinishReason] ?? null;
}

/** Sampling parameters as fixed fields, already validated and defaulted by the API server. */
export interface SamplingParams {
  temperature: number;
  topP: number;
  /** 0 = off (the API maps -1 to 0). */
  topK: number;
  minP: number;
  /** A 53-bit safe integer, or null: the engine then draws one when the request is added. */
  seed: number | null;
  maxTokens: number;
  minTokens: number;
  stopTokenIds: Int32Array;
  ignoreEos: boolean;
  presencePenalty: number;
  frequencyPenalty: number;
  repetitionPenalty: number;
  logprobs: boolean;
  /**
   * With `logprobs`: how many of the position's most likely tokens to return beside the sampled
   * one (vLLM's `logprobs: k`, columns 1..k of its LogprobsLists); 0 = the sampled token only.
   * At most MAX_TOP_LOGPROBS (sampling-check.ts).
   */
  topLogprobs: number;
  returnSamplingMask: boolean;
  returnRoutedExperts: boolean;
  /** Absolute sequence position of the first routing row to return (skips leading prompt rows). */
  routedExpertsPromptStart: number;
  /**
   * vLLM's `prompt_logprobs`: -1 none; k >= 0 the logprob of every prompt token after the first
   * (and, with k > 0, the k most likely tokens at each of those positions).
   */
  promptLogprobs: number;
}

/** One sequence. The API server fans `n > 1` out into n requests seeded with childSeed(seed, i). */
export interface EngineRequest {
  /** API server index and its request slot: where this request's outputs go. */
  server: number;
  slot: number;
  promptTokenIds: Int32Array;
  params: SamplingParams;
  /** Lower value = scheduled first (vLLM's convention); used by the `priority` policy only. */
  priority: number;
  cacheSalt: string | null;
  arrivalTimeMs: number;
  /**
   * Prefill/decode. pinKv: a prefill instance keeps the prompt's KV blocks when the request ends,
   * for a decode instance to import (until the transfer timeout). importKvTokens: a decode
   * instance imports the KV of this many leading prompt tokens from a prefill instance instead of
   * computing them (0: none; a failed load is recomputed).
   */
  pinKv?: boolean;
  importKvTokens?: number;
  /** The LoRA adapter the request runs with (its lora_int_id, from the engine's table); 0: none. */
  loraId?: number;
  /**
   * kv_transfer_params for an engine that takes them itself (a vLLM engine behind the bridge: its
   * KV connector reads them from SamplingParams.extra_args), one msgpack map, passed on unchanged.
   * null or absent: none. The simulator ignores it (its P/D fields are pinKv / importKvTokens).
   */
  kvParams?: Uint8Array | null;
  /**
   * Token ids the simulator emits first, as if sampled (chat formats, echo mode); null/absent: none.
   * At most MAX_SCRIPT_TOKENS (messages.ts); past max_tokens it is cut as any answer is. The
   * vLLM bridge ignores it (a real model samples its own answer).
   */
  script?: Int32Array | null;
  /** With a script: the answer ends after it (the model's EOS is emitted next); else sampling goes on. */
  scriptEnds?: boolean;
  /**
   * The data-parallel engine rank the request must run on (vLLM's EngineCoreRequest
   * data_parallel_rank, from the `X-data-parallel-rank` header), in [0, --data-parallel-size);
   * null/absent: the engine core picks. The simulator ignores it (its only rank is 0).
   */
  dataParallelRank?: number | null;
}

/** The figures the engine publishes in the shared stats block (names after vLLM's metrics). */
export interface EngineStats {
  running: number;
  waiting: number;
  /** Used KV blocks / num_gpu_blocks, 0..1. */
  kvUsage: number;
  numPreemptions: number;
  /** Prefix-cache lookups of new requests, in tokens (vLLM's PrefixCacheStats.queries). */
  prefixQueries: number;
  prefixHits: number;
  /** Prompt tokens of requests whose prefill completed (cached ones included, as vLLM counts). */
  promptTokens: number;
  generationTokens: number;
  weightVersion: number;
  numGpuBlocks: number;
  blockSize: number;
  steps: number;
  /** Prompt tokens whose KV came from outside the pool: P/D imports and CPU-tier reloads. */
  externalHitTokens?: number;
  kvLoadFailures?: number;
  /** A vLLM bridge: engine messages or outputs that did not decode (each failed only its requests). */
  vllmUndecodable?: number;
  offloadStoredBlocks?: number;
  offloadLoadedBlocks?: number;
}

/**
 * What one step() did. The engine returns the same object every step (no allocation per step);
 * read it before the next call.
 */
export interface StepTiming {
  /** Modelled duration of this step in ms after `speedup` (0 in max-speed mode or when idle). */
  ms: number;
  /** Requests that sampled a token this step (decodes and completed prefills). */
  sampledSeqs: number;
  /** Requests forwarded for exactly one token (pure decodes). */
  decodeSeqs: number;
  /** Tokens forwarded as prefill (prompt chunks and recompute after preemption). */
  prefillTokens: number;
  /** Sum over forwarded requests of their context length after this step. */
  totalContext: number;
  /** Tokens sampled this step (= generation tokens added). */
  generatedTokens: number;
}
