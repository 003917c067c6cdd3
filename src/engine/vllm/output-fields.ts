import type { MsgReader } from './msgpack-reader.js';
import { Dtype, type NdarrayView, readNdarray } from './ndarray.js';
import type { OutputView, SchedulerStatsView } from './output-view.js';

/**
 * The structured fields of one EngineCoreOutput, each read in place into the reused OutputView
 * (docs/vllm-protocol.md, "Outputs"): new_logprobs (LogprobsLists), new_prompt_logprobs_tensors
 * (LogprobsTensors), routed_experts,
 * new_sampling_mask (SamplingMaskLists), prefill_stats, and a message's scheduler_stats. A field
 * that does not match vLLM's struct throws RS_ERR_VLLM_DECODE naming it (the reader turns that
 * into a failure of the output's request alone).
 */

/** LogprobsLists: [token ids int [k, W], logprobs <f4 [k, W], ranks int [k], cu_num (nil)]. */
export function readLogprobs(
  r: MsgReader,
  frames: readonly Uint8Array[],
  nd: NdarrayView,
  o: OutputView,
): void {
  const n = r.arrayHeader('new_logprobs');
  if (n < 3) r.fail('new_logprobs', `LogprobsLists has ${n} fields`);
  const k = o.tokenCount;
  readNdarray(r, 'new_logprobs.logprob_token_ids', frames, nd);
  if (!isInt(nd.dtype) || nd.dims !== 2 || nd.shape0 !== k || nd.shape1 < 1)
    r.fail('new_logprobs.logprob_token_ids', `expected int [${k}, W], got ${nd.dtype}`);
  const w = nd.shape1;
  const top = w - 1;
  if (o.topIds.length < k * top) o.topIds = new Int32Array(grow(k * top));
  if (o.topLogprobs.length < k * top) o.topLogprobs = new Float32Array(grow(k * top));
  if (top > 0) {
    const v = viewOf(r, nd);
    for (let t = 0; t < k; t++)
      for (let c = 1; c < w; c++) o.topIds[t * top + c - 1] = intAt(v, nd, t * w + c, r);
  }
  readNdarray(r, 'new_logprobs.logprobs', frames, nd);
  if (nd.dtype !== Dtype.f4 || nd.dims !== 2 || nd.shape0 !== k || nd.shape1 !== w)
    r.fail('new_logprobs.logprobs', `expected <f4 [${k}, ${w}]`);
  if (o.logprobs.length < k) o.logprobs = new Float32Array(grow(k));
  const lv = viewOf(r, nd);
  for (let t = 0; t < k; t++) {
    o.logprobs[t] = lv.getFloat32(nd.offset + t * w * 4, true);
    for (let c = 1; c < w; c++)
      o.topLogprobs[t * top + c - 1] = lv.getFloat32(nd.offset + (t * w + c) * 4, true);
  }
  readNdarray(r, 'new_logprobs.sampled_token_ranks', frames, nd);
  if (!isInt(nd.dtype) || nd.elements !== k)
    r.fail('new_logprobs.sampled_token_ranks', `expected int [${k}]`);
  if (o.ranks.length < k) o.ranks = new Int32Array(grow(k));
  const rv = viewOf(r, nd);
  for (let t = 0; t < k; t++) o.ranks[t] = intAt(rv, nd, t, r);
  for (let i = 3; i < n; i++) r.skip('new_logprobs');
  o.logprobWidth = w;
  o.hasLogprobs = true;
}

const PL_IDS = 'new_prompt_logprobs_tensors.logprob_token_ids';
const PL_LOGPROBS = 'new_prompt_logprobs_tensors.logprobs';
const PL_RANKS = 'new_prompt_logprobs_tensors.selected_token_ranks';

/**
 * LogprobsTensors (prompt logprobs): [token ids int [P, W], logprobs f4 [P, W], ranks int [P],
 * cu_num_generated_tokens (nil; absent before vLLM #26060)]: row r scores the prompt token after
 * the ones before it, column 0 that token, columns 1 .. W-1 the engine's best candidates. torch
 * tensors, so torch dtype names (`int32`, `float32`; vLLM's default model runner fills int32 ids
 * and ranks, Model Runner V2 int64 ids of width 1). Copied into the view's scratch, no object per
 * position.
 */
export function readPromptLogprobs(
  r: MsgReader,
  frames: readonly Uint8Array[],
  nd: NdarrayView,
  o: OutputView,
): void {
  const n = r.arrayHeader('new_prompt_logprobs_tensors');
  if (n < 3) r.fail('new_prompt_logprobs_tensors', `LogprobsTensors has ${n} fields`);
  readNdarray(r, PL_IDS, frames, nd);
  if (!isInt(nd.dtype) || nd.dims !== 2 || nd.shape1 < 1)
    r.fail(PL_IDS, `expected int [P, W >= 1], got ${nd.dtype} of ${nd.dims} dimensions`);
  const p = nd.shape0;
  const w = nd.shape1;
  const total = p * w;
  if (o.promptIds.length < total) o.promptIds = new Int32Array(grow(total));
  if (o.promptLogprobs.length < total) o.promptLogprobs = new Float32Array(grow(total));
  if (o.promptRanks.length < p) o.promptRanks = new Int32Array(grow(p));
  const iv = viewOf(r, nd);
  for (let i = 0; i < total; i++) o.promptIds[i] = intAt(iv, nd, i, r, PL_IDS);
  readNdarray(r, PL_LOGPROBS, frames, nd);
  if (nd.dtype !== Dtype.f4 || nd.dims !== 2 || nd.shape0 !== p || nd.shape1 !== w)
    r.fail(PL_LOGPROBS, `expected float32 [${p}, ${w}], got ${nd.dtype}`);
  const lv = viewOf(r, nd);
  for (let i = 0; i < total; i++) o.promptLogprobs[i] = lv.getFloat32(nd.offset + i * 4, true);
  // (Read through the return value: TypeScript keeps nd's narrowing from the checks above.)
  const ranks = readNdarray(r, PL_RANKS, frames, nd);
  if (!isInt(ranks.dtype) || ranks.dims !== 1 || ranks.shape0 !== p)
    r.fail(PL_RANKS, `expected int [${p}], got ${ranks.dtype} of ${ranks.dims} dimensions`);
  const rv = viewOf(r, nd);
  for (let i = 0; i < p; i++) o.promptRanks[i] = intAt(rv, nd, i, r, PL_RANKS);
  for (let i = 3; i < n; i++) r.skip('new_prompt_logprobs_tensors');
  o.promptPositions = p;
  o.promptWidth = w;
  o.hasPromptLogprobs = true;
}

/** routed_experts: |u1 or <u2 [rows, layers, topk]; the bytes stay where they are. */
export function readRouted(
  r: MsgReader,
  frames: readonly Uint8Array[],
  nd: NdarrayView,
  o: OutputView,
): void {
  readNdarray(r, 'routed_experts', frames, nd);
  if ((nd.dtype !== Dtype.u1 && nd.dtype !== Dtype.u2) || nd.dims !== 3) {
    r.fail('routed_experts', `expected |u1 or <u2 [rows, layers, topk], got ${nd.dtype}`);
  }
  o.hasRoutedExperts = true;
  o.routedRows = nd.shape0;
  o.routedLayers = nd.shape1;
  o.routedTopk = nd.shape2;
  o.routedWidth = nd.width;
  o.routedData = nd.data;
  o.routedOffset = nd.offset;
  o.routedLength = nd.length;
}

/**
 * SamplingMaskLists (vLLM >= 0.28): [token ids <i4 [n], CSR offsets <i8 [rows + 1] or nil for a
 * single row, cu_num_generated_tokens (nil per request)], one row per new token.
 */
export function readSamplingMask(
  r: MsgReader,
  frames: readonly Uint8Array[],
  nd: NdarrayView,
  o: OutputView,
): void {
  const n = r.arrayHeader('new_sampling_mask');
  if (n < 2) r.fail('new_sampling_mask', `SamplingMaskLists has ${n} fields`);
  const k = o.tokenCount;
  readNdarray(r, 'new_sampling_mask.token_ids', frames, nd);
  if (!isInt(nd.dtype) || nd.dims !== 1) r.fail('new_sampling_mask.token_ids', 'expected int [n]');
  const total = nd.elements;
  if (o.maskIds.length < total) o.maskIds = new Int32Array(grow(total));
  const iv = viewOf(r, nd);
  for (let i = 0; i < total; i++) o.maskIds[i] = intAt(iv, nd, i, r);
  if (o.maskCounts.length < k) o.maskCounts = new Int32Array(grow(k));
  if (r.nil('new_sampling_mask.offsets')) {
    if (k !== 1) r.fail('new_sampling_mask.offsets', `nil (one row) for ${k} tokens`);
    o.maskCounts[0] = total;
  } else {
    readNdarray(r, 'new_sampling_mask.offsets', frames, nd);
    if (!isInt(nd.dtype) || nd.elements !== k + 1)
      r.fail('new_sampling_mask.offsets', `expected int [${k + 1}]`);
    const ov = viewOf(r, nd);
    let prev = intAt(ov, nd, 0, r);
    if (prev !== 0) r.fail('new_sampling_mask.offsets', 'the first offset is not 0');
    for (let t = 0; t < k; t++) {
      const next = intAt(ov, nd, t + 1, r);
      if (next < prev || next > total) r.fail('new_sampling_mask.offsets', 'not a CSR offset list');
      o.maskCounts[t] = next - prev;
      prev = next;
    }
    if (prev !== total) r.fail('new_sampling_mask.offsets', `end ${prev} for ${total} ids`);
  }
  for (let i = 2; i < n; i++) r.skip('new_sampling_mask');
  o.maskIdCount = total;
  o.hasMask = true;
}

export function readPrefill(r: MsgReader, o: OutputView): void {
  o.numPromptTokens = 0;
  o.numComputedTokens = 0;
  o.numCachedTokens = 0;
  o.numLocalCachedTokens = 0;
  o.numExternalCachedTokens = 0;
  for (let n = r.mapHeader('prefill_stats'); n > 0; n--) {
    const key = r.str('prefill_stats key');
    const f = 'prefill_stats';
    if (key === 'num_prompt_tokens') o.numPromptTokens = r.int(f);
    else if (key === 'num_computed_tokens') o.numComputedTokens = r.int(f);
    else if (key === 'num_cached_tokens') o.numCachedTokens = r.int(f);
    else if (key === 'num_local_cached_tokens') o.numLocalCachedTokens = r.int(f);
    else if (key === 'num_external_cached_tokens') o.numExternalCachedTokens = r.int(f);
    else r.skip(f);
  }
  o.hasPrefillStats = true;
}

/** The scheduler_stats map (a dataclass: keyed by name; keys ringserve does not read are skipped). */
export function readSchedulerStats(r: MsgReader, s: SchedulerStatsView): void {
  for (let n = r.mapHeader('scheduler_stats'); n > 0; n--) {
    const key = r.str('scheduler_stats key');
    const f = 'scheduler_stats';
    if (key === 'num_running_reqs') s.numRunningReqs = r.int(f);
    else if (key === 'num_waiting_reqs') s.numWaitingReqs = r.int(f);
    else if (key === 'kv_cache_usage') s.kvCacheUsage = r.float(f);
    else if (key === 'step_counter') s.stepCounter = r.int(f);
    else if (key === 'prefix_cache_stats' && !r.nil(f)) {
      for (let k = r.mapHeader(f); k > 0; k--) {
        const name = r.str('prefix_cache_stats key');
        if (name === 'requests') s.prefixRequests = r.int(f);
        else if (name === 'queries') s.prefixQueries = r.int(f);
        else if (name === 'hits') s.prefixHits = r.int(f);
        else r.skip(f);
      }
    } else r.skip(f);
  }
}

function isInt(d: Dtype): boolean {
  return d === Dtype.i4 || d === Dtype.i8;
}

/** A DataView over the array's bytes: the reader's own for an inline array, else the frame's. */
function viewOf(r: MsgReader, nd: NdarrayView): DataView {
  return nd.data === r.buf ? r.view : new DataView(nd.data.buffer, nd.data.byteOffset);
}

/** Element i of an int array (<i4 or <i8, the latter within the int32 range). */
function intAt(
  v: DataView,
  nd: NdarrayView,
  i: number,
  r: MsgReader,
  field = 'int64 array',
): number {
  if (nd.dtype === Dtype.i4) return v.getInt32(nd.offset + i * 4, true);
  const lo = v.getUint32(nd.offset + i * 8, true);
  const hi = v.getInt32(nd.offset + i * 8 + 4, true);
  if ((hi !== 0 || lo > 0x7fffffff) && (hi !== -1 || lo < 0x80000000))
    r.fail(field, `element ${i} is outside the int32 range`);
  return lo | 0;
}

export function grow(n: number): number {
  return Math.max(64, 2 ** Math.ceil(Math.log2(n)));
}
