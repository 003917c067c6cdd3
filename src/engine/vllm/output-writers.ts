import type { MsgWriter } from './msgpack-writer.js';
import { type AuxFrames, Dtype, type Shape, TorchDtype, writeNdarray } from './ndarray.js';
import type { OutputRecord, PrefillStats, SchedulerStatsFields } from './outputs.js';

/**
 * The structured fields of an EngineCoreOutput as vLLM's engine writes them (docs/vllm-protocol.md,
 * "Outputs"), from an OutputRecord's typed arrays. Matrices are assembled in module scratch that
 * grows and is reused (one engine thread writes at a time), and arrays of 256 bytes or more are
 * copied into the encoder's aux arena, so writing allocates nothing per token.
 */

const shape: Shape = { dims: 0, d0: 0, d1: 0, d2: 0 };
let scratchI32 = new Int32Array(1024);
let scratchF32 = new Float32Array(1024);
/** int64 values as little-endian (low, high) word pairs: a BigInt per value would be garbage. */
let scratchI64 = new Int32Array(512);
let bytesI32 = new Uint8Array(scratchI32.buffer);
let bytesF32 = new Uint8Array(scratchF32.buffer);
let bytesI64 = new Uint8Array(scratchI64.buffer);

/** A byte view of the last typed array asked for, remade only when another array is asked. */
class ByteView {
  #source: ArrayBufferView = new Uint8Array(0);
  #bytes: Uint8Array = new Uint8Array(0);
  of(a: ArrayBufferView): Uint8Array {
    if (a !== this.#source) {
      this.#source = a;
      this.#bytes = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    }
    return this.#bytes;
  }
}
const maskView = new ByteView();
const promptIdView = new ByteView();
const promptLogprobView = new ByteView();

function ensure(n: number): void {
  if (scratchI32.length >= n) return;
  const size = Math.max(n, scratchI32.length * 2);
  scratchI32 = new Int32Array(size);
  scratchF32 = new Float32Array(size);
  bytesI32 = new Uint8Array(scratchI32.buffer);
  bytesF32 = new Uint8Array(scratchF32.buffer);
}

function ensureI64(n: number): void {
  if (scratchI64.length >= 2 * n) return;
  scratchI64 = new Int32Array(Math.max(2 * n, scratchI64.length * 2));
  bytesI64 = new Uint8Array(scratchI64.buffer);
}

/** Element i of the int64 scratch = v (a safe integer within int32 here: ranks, offsets). */
function setI64(i: number, v: number): void {
  scratchI64[2 * i] = v;
  scratchI64[2 * i + 1] = v < 0 ? -1 : 0;
}

/**
 * LogprobsLists [token ids <i4 [k, W], logprobs <f4 [k, W], sampled_token_ranks <i8 [k], nil]:
 * column 0 the sampled token, columns 1 .. W-1 the top candidates (vLLM's sampler casts the ids to
 * int32 and leaves the ranks int64).
 */
export function writeLogprobs(w: MsgWriter, o: OutputRecord, aux: AuxFrames): void {
  const lp = o.logprobs;
  if (lp === null) {
    w.nil();
    return;
  }
  const k = o.tokenCount;
  const width = 1 + o.topWidth;
  ensure(k * width);
  ensureI64(k);
  for (let t = 0; t < k; t++) {
    const row = t * width;
    scratchI32[row] = o.tokenIds[o.tokenStart + t] as number;
    scratchF32[row] = lp[o.logprobStart + t] as number;
    const top = o.topStart + t * o.topWidth;
    for (let c = 1; c < width; c++) {
      scratchI32[row + c] = o.topIds[top + c - 1] as number;
      scratchF32[row + c] = o.topLogprobs[top + c - 1] as number;
    }
    // A rank is >= 1 (vLLM's Rust client refuses 0); an engine that did not rank says 1.
    setI64(t, Math.max(1, o.ranks[o.rankStart + t] ?? 1));
  }
  w.arrayHeader(4);
  shape.dims = 2;
  shape.d0 = k;
  shape.d1 = width;
  writeNdarray(w, Dtype.i4, shape, bytesI32, 0, k * width * 4, aux);
  writeNdarray(w, Dtype.f4, shape, bytesF32, 0, k * width * 4, aux);
  shape.dims = 1;
  writeNdarray(w, Dtype.i8, shape, bytesI64, 0, k * 8, aux);
  w.nil();
}

/**
 * LogprobsTensors [token ids int32 [P, W], logprobs float32 [P, W], selected_token_ranks int32
 * [P], nil]: torch tensors, so torch dtype names, with the dtypes vLLM's default model runner
 * fills (LogprobsTensors.empty_cpu: int32 ids and ranks). The ids and logprobs go out from the
 * record's arrays as they are (position-major is row-major); the ranks, one per position, are
 * gathered into scratch.
 */
export function writePromptLogprobs(w: MsgWriter, o: OutputRecord, aux: AuxFrames): void {
  const lp = o.promptLogprobs;
  if (lp === null) {
    w.nil();
    return;
  }
  const p = o.promptPositions;
  const width = o.promptWidth;
  const n = p * width;
  w.arrayHeader(4);
  shape.dims = 2;
  shape.d0 = p;
  shape.d1 = width;
  const from = o.promptStart * 4;
  writeNdarray(w, TorchDtype.i4, shape, promptIdView.of(o.promptIds), from, n * 4, aux);
  writeNdarray(w, TorchDtype.f4, shape, promptLogprobView.of(lp), from, n * 4, aux);
  ensure(p);
  // A rank is >= 1 (vLLM's Rust client refuses 0), as for sampled tokens.
  for (let q = 0; q < p; q++)
    scratchI32[q] = Math.max(1, o.promptRanks[o.promptStart + q * width]!);
  shape.dims = 1;
  writeNdarray(w, TorchDtype.i4, shape, bytesI32, 0, p * 4, aux);
  w.nil();
}

/** routed_experts: |u1 or <u2 [rows, num_hidden_layers, topk]. */
export function writeRouted(w: MsgWriter, o: OutputRecord, aux: AuxFrames): void {
  if (o.routedBytes === null) {
    w.nil();
    return;
  }
  shape.dims = 3;
  shape.d0 = o.routedRows;
  shape.d1 = o.routedLayers;
  shape.d2 = o.routedTopk;
  const width = o.routedWide ? 2 : 1;
  const n = o.routedRows * o.routedLayers * o.routedTopk * width;
  const dtype = o.routedWide ? Dtype.u2 : Dtype.u1;
  writeNdarray(w, dtype, shape, o.routedBytes, o.routedByteStart, n, aux);
}

/**
 * SamplingMaskLists [token ids <i4 [n], offsets <i8 [k + 1] (nil for one row), nil]: the kept ids
 * of every new token, in token order (vLLM >= 0.28, engine-wide `--enable-return-sampling-mask`).
 */
export function writeMask(w: MsgWriter, o: OutputRecord, aux: AuxFrames): void {
  const counts = o.maskCounts;
  if (counts === null) {
    w.nil();
    return;
  }
  const k = o.tokenCount;
  w.arrayHeader(3);
  shape.dims = 1;
  shape.d0 = o.maskIdCount;
  const maskBytes = maskView.of(o.maskIds);
  writeNdarray(w, Dtype.i4, shape, maskBytes, o.maskIdStart * 4, o.maskIdCount * 4, aux);
  if (k === 1) w.nil();
  else {
    ensureI64(k + 1);
    let at = 0;
    setI64(0, 0);
    for (let t = 0; t < k; t++) {
      at += counts[o.maskCountStart + t] as number;
      setI64(t + 1, at);
    }
    shape.d0 = k + 1;
    writeNdarray(w, Dtype.i8, shape, bytesI64, 0, (k + 1) * 8, aux);
  }
  w.nil();
}

export function writePrefill(w: MsgWriter, p: PrefillStats): void {
  w.mapHeader(5);
  w.str('num_prompt_tokens');
  w.int(p.numPromptTokens);
  w.str('num_computed_tokens');
  w.int(p.numComputedTokens);
  w.str('num_cached_tokens');
  w.int(p.numCachedTokens);
  w.str('num_local_cached_tokens');
  w.int(p.numLocalCachedTokens);
  w.str('num_external_cached_tokens');
  w.int(p.numExternalCachedTokens);
}

/**
 * SchedulerStats, complete: every key vLLM's Rust frontend and SMG require (num_running_reqs,
 * num_waiting_reqs, step_counter, current_wave, kv_cache_usage, the seven prefix_cache_stats
 * keys, kv_cache_eviction_events), the optional ones nil.
 */
export function writeStats(w: MsgWriter, s: SchedulerStatsFields): void {
  w.mapHeader(9);
  w.str('num_running_reqs');
  w.int(s.numRunningReqs);
  w.str('num_waiting_reqs');
  w.int(s.numWaitingReqs);
  w.str('num_skipped_waiting_reqs');
  w.int(0);
  w.str('step_counter');
  w.int(s.stepCounter);
  w.str('current_wave');
  w.int(0);
  w.str('kv_cache_usage');
  w.float(s.kvCacheUsage);
  w.str('prefix_cache_stats');
  w.mapHeader(7);
  w.str('reset');
  w.bool(false);
  w.str('requests');
  w.int(s.prefixRequests);
  w.str('queries');
  w.int(s.prefixQueries);
  w.str('hits');
  w.int(s.prefixHits);
  w.str('preempted_requests');
  w.int(0);
  w.str('preempted_queries');
  w.int(0);
  w.str('preempted_hits');
  w.int(0);
  w.str('connector_prefix_cache_stats');
  w.nil();
  w.str('kv_cache_eviction_events');
  w.arrayHeader(0);
}
