import { RS_ERR_VLLM_BAD_FIELD } from '../../errors.js';
import type { VllmLayout } from './layouts.js';
import { MsgWriter } from './msgpack-writer.js';
import { Dtype, type Shape, writeNdarray } from './ndarray.js';
import { writeAny } from './values.js';

/**
 * The engine side of the output socket (VLLM-ENGINE.md section 5): one EngineCoreOutputs per
 * step, frames `[body, *aux]`, EngineCoreOutput elements in the layout's order. The caller fills
 * one reused OutputRecord per request and calls output(); nothing here allocates per token.
 * ringserve's sampling-mask extension goes after the layout's last EngineCoreOutput field, as a
 * trailing `[counts <i4 [k], ids <i4 [n]]` element that stock vLLM frontends ignore.
 */

/** ENGINE_CORE_DEAD: the one-frame death notice an engine sends before it exits. */
export const ENGINE_CORE_DEAD = Buffer.from('ENGINE_CORE_DEAD', 'latin1');

/** vLLM's FinishReason values on the wire. */
export const VllmFinishReason = { Stop: 0, Length: 1, Abort: 2, Error: 3, Repetition: 4 } as const;

/**
 * One EngineCoreOutput to encode. Byte sources are views over whole typed arrays (made once by
 * the caller, remade when an array grows) plus element offsets, so no view is made per output.
 */
export class OutputRecord {
  requestId = '';
  /** new_token_ids = tokenIds[tokenStart .. tokenStart + tokenCount). */
  tokenIds: Int32Array = new Int32Array(0);
  tokenStart = 0;
  tokenCount = 0;
  /** The same tokens as bytes, for LogprobsLists' token id column (W = 1). */
  tokenBytes: Uint8Array = new Uint8Array(0);
  /** Float32 bytes of the sampled tokens' logprobs, or null: new_logprobs is nil. */
  logprobBytes: Uint8Array | null = null;
  logprobStart = 0;
  /** -1: not finished. */
  finishReason = -1;
  /** -1: nil. */
  stopReason = -1;
  /** First output only: prefill_stats figures (null: nil). */
  prefill: PrefillStats | null = null;
  /** Routing rows as bytes (uint8 or uint16 ids), or null: routed_experts is nil. */
  routedBytes: Uint8Array | null = null;
  routedByteStart = 0;
  routedRows = 0;
  routedLayers = 0;
  routedTopk = 0;
  routedWide = false;
  /** CSR sampling mask (extension): counts (Int32 bytes) of tokenCount entries, then the ids. */
  maskCountBytes: Uint8Array | null = null;
  maskCountStart = 0;
  maskIdBytes: Uint8Array = new Uint8Array(0);
  maskIdStart = 0;
  maskIdCount = 0;
}

export interface PrefillStats {
  numPromptTokens: number;
  numComputedTokens: number;
  numCachedTokens: number;
  numLocalCachedTokens: number;
  numExternalCachedTokens: number;
}

/** The scheduler_stats map an engine sends each step (the fields ringserve reads). */
export interface SchedulerStatsFields {
  numRunningReqs: number;
  numWaitingReqs: number;
  kvCacheUsage: number;
  /** Prefix-cache figures of this interval (vLLM sends deltas). */
  prefixRequests: number;
  prefixQueries: number;
  prefixHits: number;
}

export interface UtilityReply {
  callId: number;
  /** null on success. */
  failure: string | null;
  result: unknown;
}

export class OutputsEncoder {
  readonly #layout: VllmLayout;
  readonly #masks: boolean;
  readonly #w = new MsgWriter(1 << 16);
  #aux: Buffer[] = [];
  #expected = 0;
  #written = 0;
  readonly #shape: Shape = { dims: 0, d0: 0, d1: 0, d2: 0 };

  /** `masks`: append the sampling-mask element (only when the registration announced it). */
  constructor(layout: VllmLayout, masks: boolean) {
    this.#layout = layout;
    this.#masks = masks;
  }

  /** Starts a message of `count` outputs. */
  begin(engineIndex: number, count: number): void {
    const w = this.#w;
    w.reset();
    this.#aux = [];
    this.#expected = count;
    this.#written = 0;
    w.arrayHeader(this.#layout.outputs.length);
    for (const field of this.#layout.outputs) {
      if (field === 'engine_index') w.int(engineIndex, field);
      else if (field === 'outputs') break;
      else w.nil();
    }
    w.arrayHeader(count);
  }

  output(o: OutputRecord): void {
    const w = this.#w;
    const fields = this.#layout.output;
    w.arrayHeader(fields.length + (this.#masks ? 1 : 0));
    for (const field of fields) {
      switch (field) {
        case 'request_id':
          w.str(o.requestId);
          break;
        case 'new_token_ids':
          w.arrayHeader(o.tokenCount);
          for (let i = 0; i < o.tokenCount; i++) w.int(o.tokenIds[o.tokenStart + i] as number);
          break;
        case 'new_logprobs':
          this.#logprobs(o);
          break;
        case 'finish_reason':
          if (o.finishReason < 0) w.nil();
          else w.int(o.finishReason, field);
          break;
        case 'stop_reason':
          if (o.stopReason < 0) w.nil();
          else w.int(o.stopReason, field);
          break;
        case 'prefill_stats':
          if (o.prefill === null) w.nil();
          else writePrefill(w, o.prefill);
          break;
        case 'routed_experts':
          this.#routed(o);
          break;
        case 'num_nans_in_logits':
          w.int(0);
          break;
        default:
          w.nil();
      }
    }
    if (this.#masks) this.#mask(o);
    this.#written++;
  }

  /** Ends the message; returns its frames `[body, *aux]`. */
  end(
    stats: SchedulerStatsFields | null,
    timestamp: number,
    utility: UtilityReply | null,
  ): Buffer[] {
    if (this.#written !== this.#expected) {
      throw new RS_ERR_VLLM_BAD_FIELD(
        'outputs',
        `${this.#written} written, ${this.#expected} announced`,
      );
    }
    const w = this.#w;
    let past = false;
    for (const field of this.#layout.outputs) {
      if (field === 'outputs') {
        past = true;
        continue;
      }
      if (!past) continue;
      if (field === 'scheduler_stats' && stats !== null) writeStats(w, stats);
      else if (field === 'timestamp') w.float(timestamp);
      else if (field === 'utility_output' && utility !== null) writeUtility(w, utility);
      else w.nil();
    }
    return [w.toBuffer(), ...this.#aux];
  }

  #logprobs(o: OutputRecord): void {
    const w = this.#w;
    if (o.logprobBytes === null) {
      w.nil();
      return;
    }
    const k = o.tokenCount;
    const s = this.#shape;
    s.dims = 2;
    s.d0 = k;
    s.d1 = 1;
    w.arrayHeader(4);
    writeNdarray(w, Dtype.i4, s, o.tokenBytes, o.tokenStart * 4, k * 4, this.#aux);
    writeNdarray(w, Dtype.f4, s, o.logprobBytes, o.logprobStart * 4, k * 4, this.#aux);
    // sampled_token_ranks: the simulator does not rank the sampled token; 0 means not computed.
    s.dims = 1;
    writeNdarray(w, Dtype.i8, s, zeroBytes(k * 8), 0, k * 8, this.#aux);
    w.nil();
  }

  #routed(o: OutputRecord): void {
    const w = this.#w;
    if (o.routedBytes === null) {
      w.nil();
      return;
    }
    const s = this.#shape;
    s.dims = 3;
    s.d0 = o.routedRows;
    s.d1 = o.routedLayers;
    s.d2 = o.routedTopk;
    const width = o.routedWide ? 2 : 1;
    const n = o.routedRows * o.routedLayers * o.routedTopk * width;
    const dtype = o.routedWide ? Dtype.u2 : Dtype.u1;
    writeNdarray(w, dtype, s, o.routedBytes, o.routedByteStart, n, this.#aux);
  }

  #mask(o: OutputRecord): void {
    const w = this.#w;
    if (o.maskCountBytes === null) {
      w.nil();
      return;
    }
    const s = this.#shape;
    s.dims = 1;
    w.arrayHeader(2);
    s.d0 = o.tokenCount;
    writeNdarray(
      w,
      Dtype.i4,
      s,
      o.maskCountBytes,
      o.maskCountStart * 4,
      o.tokenCount * 4,
      this.#aux,
    );
    s.d0 = o.maskIdCount;
    writeNdarray(w, Dtype.i4, s, o.maskIdBytes, o.maskIdStart * 4, o.maskIdCount * 4, this.#aux);
  }
}

let zeros = new Uint8Array(8 * 1024);

/** At least n zero bytes (sampled_token_ranks), grown when an output carries more tokens. */
function zeroBytes(n: number): Uint8Array {
  if (zeros.length < n) zeros = new Uint8Array(Math.max(n, zeros.length * 2));
  return zeros;
}

function writePrefill(w: MsgWriter, p: PrefillStats): void {
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

function writeStats(w: MsgWriter, s: SchedulerStatsFields): void {
  w.mapHeader(4);
  w.str('num_running_reqs');
  w.int(s.numRunningReqs);
  w.str('num_waiting_reqs');
  w.int(s.numWaitingReqs);
  w.str('kv_cache_usage');
  w.float(s.kvCacheUsage);
  w.str('prefix_cache_stats');
  w.mapHeader(4);
  w.str('reset');
  w.bool(false);
  w.str('requests');
  w.int(s.prefixRequests);
  w.str('queries');
  w.int(s.prefixQueries);
  w.str('hits');
  w.int(s.prefixHits);
}

/** utility_output = [call_id, failure_message, result]; success wraps the value as [nil, value]. */
function writeUtility(w: MsgWriter, u: UtilityReply): void {
  w.arrayHeader(3);
  w.int(u.callId, 'utility_output.call_id');
  if (u.failure === null) {
    w.nil();
    w.arrayHeader(2);
    w.nil();
    writeAny(w, u.result, 'utility_output.result');
  } else {
    w.str(u.failure);
    w.nil();
  }
}

/** A message with no outputs carrying one utility reply. */
export function encodeUtilityReply(
  layout: VllmLayout,
  engineIndex: number,
  reply: UtilityReply,
  timestamp: number,
): Buffer[] {
  const e = new OutputsEncoder(layout, false);
  e.begin(engineIndex, 0);
  return e.end(null, timestamp, reply);
}
