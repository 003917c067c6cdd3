/**
 * What OutputsReader hands its sink: one EngineCoreOutput, and a message's scheduler_stats, each
 * as one object reused for the whole stream (typed-array scratch for the per-token columns, byte
 * ranges for the request id and the routing rows), so reading creates no object per token.
 */

/** One EngineCoreOutput; reused for the next: read it inside OutputsSink.output(). */
export class OutputView {
  /** request_id is body[idOffset .. idOffset + idLength) (UTF-8); requestId() decodes it. */
  body: Uint8Array = new Uint8Array(0);
  idOffset = 0;
  idLength = 0;
  /** new_token_ids in tokenIds[0 .. tokenCount). */
  tokenCount = 0;
  tokenIds = new Int32Array(64);
  /** new_logprobs present: column 0 (the sampled tokens' logprobs) in logprobs[0 .. tokenCount). */
  hasLogprobs = false;
  /** W of LogprobsLists: 1 + the widest top-k of the engine step. */
  logprobWidth = 0;
  logprobs = new Float32Array(64);
  /**
   * Columns 1 .. W-1 (the engine's top candidates) of token t: topIds / topLogprobs
   * [t * (W - 1) .. (t + 1) * (W - 1)).
   */
  topIds = new Int32Array(64);
  topLogprobs = new Float32Array(64);
  /** sampled_token_ranks: the sampled token's 1-based rank, ranks[0 .. tokenCount). */
  ranks = new Int32Array(64);
  /**
   * new_prompt_logprobs_tensors present: promptPositions rows of promptWidth entries (W = 1 + the
   * engine's prompt top-k), row-major in promptIds / promptLogprobs [r * W .. (r + 1) * W), and
   * the prompt token's rank of row r in promptRanks[r]. Row r of the first such output scores
   * prompt position 1 + r (vLLM's LogprobsTensors; later outputs continue).
   */
  hasPromptLogprobs = false;
  promptPositions = 0;
  promptWidth = 0;
  promptIds = new Int32Array(64);
  promptLogprobs = new Float32Array(64);
  promptRanks = new Int32Array(64);
  /** -1 while running; else vLLM's FinishReason (0 stop, 1 length, 2 abort, 3 error, 4 repetition). */
  finishReason = -1;
  /** The stop token id, -1 for nil; a string stop_reason sets stopReasonIsText (and -1 here). */
  stopReason = -1;
  stopReasonIsText = false;
  hasPrefillStats = false;
  numPromptTokens = 0;
  numComputedTokens = 0;
  numCachedTokens = 0;
  numLocalCachedTokens = 0;
  numExternalCachedTokens = 0;
  /** routed_experts present: rows x layers x topk ids of routedWidth bytes, in routedData. */
  hasRoutedExperts = false;
  routedRows = 0;
  routedLayers = 0;
  routedTopk = 0;
  routedWidth = 1;
  routedData: Uint8Array = new Uint8Array(0);
  routedOffset = 0;
  routedLength = 0;
  numNansInLogits = 0;
  /**
   * new_sampling_mask present: token t's kept ids are maskIds[start .. start + maskCounts[t]), the
   * rows in token order (start = the sum of the counts before t).
   */
  hasMask = false;
  maskCounts = new Int32Array(64);
  maskIdCount = 0;
  maskIds = new Int32Array(256);
  /**
   * kv_transfer_params (a map, as the engine encoded it) is body[kvParamsOffset ..
   * kvParamsOffset + kvParamsLength); 0 length: nil.
   */
  kvParamsOffset = 0;
  kvParamsLength = 0;

  requestId(): string {
    const b = this.body;
    return Buffer.from(b.buffer, b.byteOffset + this.idOffset, this.idLength).toString('utf8');
  }

  /** Whether the request id's bytes equal `id` (ASCII ids: no string is made). */
  requestIdEquals(id: string): boolean {
    if (id.length !== this.idLength) return false;
    const b = this.body;
    for (let i = 0; i < id.length; i++) if (b[this.idOffset + i] !== id.charCodeAt(i)) return false;
    return true;
  }
}

/** The scheduler_stats fields ringserve reads; reused. */
export class SchedulerStatsView {
  numRunningReqs = 0;
  numWaitingReqs = 0;
  kvCacheUsage = 0;
  prefixRequests = 0;
  prefixQueries = 0;
  prefixHits = 0;
  /** The engine's own step counter (vLLM >= 0.23; 0 when absent). */
  stepCounter = 0;
}
