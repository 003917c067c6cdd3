import { RS_ERR_VLLM_BAD_FIELD } from '../../errors.js';
import type { VllmLayout } from './layouts.js';
import { MsgWriter } from './msgpack-writer.js';
import { AuxFrames } from './ndarray.js';
import {
  writeLogprobs,
  writeMask,
  writePrefill,
  writePromptLogprobs,
  writeRouted,
  writeStats,
} from './output-writers.js';
import { writeAny } from './values.js';
import { encodeMessageFrom } from './zmtp.js';

/**
 * The engine side of the output socket (docs/vllm-protocol.md, "Outputs"): one EngineCoreOutputs
 * per step, frames `[body, *aux]`, EngineCoreOutput elements in the layout's order, every field
 * written (msgspec writes every field of an array-like struct, and a frontend tells the layout
 * from their count). The caller fills one reused OutputRecord per request and calls output();
 * nothing here allocates per token.
 */

/** ENGINE_CORE_DEAD: the one-frame death notice an engine sends before it exits. */
export const ENGINE_CORE_DEAD = Buffer.from('ENGINE_CORE_DEAD', 'latin1');

/** vLLM's FinishReason values on the wire. */
export const VllmFinishReason = { Stop: 0, Length: 1, Abort: 2, Error: 3, Repetition: 4 } as const;

/**
 * One EngineCoreOutput to encode: `tokenCount` tokens, token t's values at offset t of each
 * source (the sources are whole typed arrays owned by the caller, plus start offsets, so no view
 * is made per output).
 */
export class OutputRecord {
  requestId = '';
  /** new_token_ids = tokenIds[tokenStart .. tokenStart + tokenCount). */
  tokenIds: Int32Array = new Int32Array(0);
  tokenStart = 0;
  tokenCount = 0;
  /** The sampled tokens' logprobs from logprobStart, or null: new_logprobs is nil. */
  logprobs: Float32Array | null = null;
  logprobStart = 0;
  /** 1-based ranks of the sampled tokens, from rankStart (LogprobsLists.sampled_token_ranks). */
  ranks: Int32Array = new Int32Array(0);
  rankStart = 0;
  /** Top candidates per token (LogprobsLists columns 1 .. topWidth), token t's at topStart + t * topWidth. */
  topWidth = 0;
  topIds: Int32Array = new Int32Array(0);
  topLogprobs: Float32Array = new Float32Array(0);
  topStart = 0;
  /**
   * Prompt logprobs (new_prompt_logprobs_tensors), or null: nil. promptPositions positions of
   * promptWidth entries each from promptStart, position-major as StepOutputs keeps them: entry 0
   * the prompt token, whose rank (promptRanks) is the position's, entries 1.. its best candidates.
   */
  promptLogprobs: Float32Array | null = null;
  promptIds: Int32Array = new Int32Array(0);
  promptRanks: Int32Array = new Int32Array(0);
  promptStart = 0;
  promptPositions = 0;
  promptWidth = 1;
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
  /**
   * Sampling mask rows (new_sampling_mask), or null: token t keeps maskCounts[maskCountStart + t]
   * ids, all of them in maskIds[maskIdStart .. maskIdStart + maskIdCount) in token order.
   */
  maskCounts: Int32Array | null = null;
  maskCountStart = 0;
  maskIds: Int32Array = new Int32Array(0);
  maskIdStart = 0;
  maskIdCount = 0;
  /** kv_transfer_params (a P/D prefill's handle, on its final output), or null: nil. */
  kvTransferParams: Readonly<Record<string, unknown>> | null = null;
}

export interface PrefillStats {
  numPromptTokens: number;
  numComputedTokens: number;
  numCachedTokens: number;
  numLocalCachedTokens: number;
  numExternalCachedTokens: number;
}

/** The scheduler_stats map an engine sends each step. */
export interface SchedulerStatsFields {
  numRunningReqs: number;
  numWaitingReqs: number;
  kvCacheUsage: number;
  /** Prefix-cache figures of this interval (vLLM sends deltas). */
  prefixRequests: number;
  prefixQueries: number;
  prefixHits: number;
  /** Steps since the engine started (vLLM's step_counter). */
  stepCounter: number;
}

/** EngineCoreOutputs' wave fields: wave_complete and start_wave (null: nil). */
export interface WaveFields {
  complete: number | null;
  start: number | null;
}

export interface UtilityReply {
  /** Echoed as it came (vLLM's Python frontend sends uint64 ids). */
  callId: number | bigint;
  /** null on success. */
  failure: string | null;
  result: unknown;
}

/** Where an encoder's writer starts: a step's outputs; it grows when a message needs more. */
const STEP_CAPACITY = 1 << 16;
/** Where the writer of a one-off message with no outputs starts (a utility reply, a wave edge). */
const SMALL_CAPACITY = 1 << 10;

export class OutputsEncoder {
  readonly #layout: VllmLayout;
  readonly #w: MsgWriter;
  readonly #aux = new AuxFrames();
  #expected = 0;
  #written = 0;

  /** `capacity`: the writer's first size in bytes (it grows as needed); 64 KiB unless given. */
  constructor(layout: VllmLayout, capacity = STEP_CAPACITY) {
    this.#layout = layout;
    this.#w = new MsgWriter(capacity);
  }

  /** The layout this encoder writes. */
  get layout(): VllmLayout {
    return this.#layout;
  }

  /** Starts a message of `count` outputs. */
  begin(engineIndex: number, count: number): void {
    const w = this.#w;
    w.reset();
    this.#aux.reset();
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
    w.arrayHeader(fields.length);
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
          writeLogprobs(w, o, this.#aux);
          break;
        case 'new_prompt_logprobs_tensors':
          writePromptLogprobs(w, o, this.#aux);
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
          writeRouted(w, o, this.#aux);
          break;
        case 'new_sampling_mask':
          writeMask(w, o, this.#aux);
          break;
        case 'kv_transfer_params':
          if (o.kvTransferParams === null) w.nil();
          else writeAny(w, o.kvTransferParams, field);
          break;
        case 'num_nans_in_logits':
          w.int(0);
          break;
        default:
          w.nil();
      }
    }
    this.#written++;
  }

  /** Ends the message; returns its frames `[body, *aux]` (copies: the encoder's next message may start). */
  end(
    stats: SchedulerStatsFields | null,
    timestamp: number,
    utility: UtilityReply | null,
    wave: WaveFields | null = null,
  ): Buffer[] {
    this.#finish(stats, timestamp, utility, wave);
    return [this.#w.toBuffer(), ...this.#aux.copies()];
  }

  /**
   * Ends a message of outputs; returns its ZMTP wire bytes (zmtp.ts encodeMessageFrom), every
   * byte of the body and the aux frames copied once, into the one buffer a PUSH socket writes
   * (ZmtpPush.sendEncoded). The headless engine's step path.
   */
  endWire(stats: SchedulerStatsFields | null, timestamp: number): Buffer {
    this.#finish(stats, timestamp, null, null);
    const w = this.#w;
    return encodeMessageFrom(w.bytes, w.length, this.#aux);
  }

  /** The fields after `outputs`. */
  #finish(
    stats: SchedulerStatsFields | null,
    timestamp: number,
    utility: UtilityReply | null,
    wave: WaveFields | null,
  ): void {
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
      else if (field === 'wave_complete' && wave !== null && wave.complete !== null)
        w.int(wave.complete, field);
      else if (field === 'start_wave' && wave !== null && wave.start !== null)
        w.int(wave.start, field);
      else w.nil();
    }
  }
}

/** utility_output = [call_id, failure_message, result]; success wraps the value as [nil, value]. */
function writeUtility(w: MsgWriter, u: UtilityReply): void {
  w.arrayHeader(3);
  w.bigInt(u.callId, 'utility_output.call_id');
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
  const e = new OutputsEncoder(layout, SMALL_CAPACITY);
  e.begin(engineIndex, 0);
  return e.end(null, timestamp, reply);
}

/**
 * A message with no outputs carrying a DP wave edge: `wave_complete` (every MoE DP rank sends it to
 * client 0 when its group's wave ends and no coordinator is configured) and/or `start_wave`.
 * `encoder`, an OutputsEncoder of `layout` the caller keeps for these messages, is reused (the
 * frames returned are copies); without one, a small one is made for the call.
 */
export function encodeWaveMessage(
  layout: VllmLayout,
  engineIndex: number,
  wave: WaveFields,
  timestamp: number,
  encoder?: OutputsEncoder,
): Buffer[] {
  if (encoder !== undefined && encoder.layout !== layout) {
    throw new RS_ERR_VLLM_BAD_FIELD('layout', 'the wave encoder was made for another layout');
  }
  const e = encoder ?? new OutputsEncoder(layout, SMALL_CAPACITY);
  e.begin(engineIndex, 0);
  return e.end(null, timestamp, null, wave);
}
