import { FinishReason } from '../../../wire/types.js';
import { bytesOfBuffer, copyIds } from '../../copy-ids.js';
import type { StepOutputs } from '../../step-outputs.js';
import type { VllmLayout } from '../layouts.js';
import {
  OutputRecord,
  OutputsEncoder,
  type PrefillStats,
  type SchedulerStatsFields,
  VllmFinishReason,
} from '../outputs.js';
import type { RoutingShape } from '../routing-shape.js';
import type { LiveRequest, LiveRequests } from './live-requests.js';

/**
 * Turns one step of an EngineCore (StepOutputs columns, all of server 0) into vLLM's
 * EngineCoreOutputs, with vLLM's rules (docs/vllm-protocol.md, "Outputs"): an output only for a
 * request with new tokens or a finish; nothing after the frontend's ABORT; the prompt's routing
 * rows (from routed_experts_prompt_start, held while the prompt is chunked) and prefill_stats in
 * the first output with tokens, then one row per forwarded position. Routing rows go out as
 * [rows, num_hidden_layers, topk] like vLLM's capturer: a model whose first layers are dense (GLM)
 * gets zero ids there. LogprobsLists: column 0 the sampled token, then the request's k best
 * candidates (StepOutputs' top area), ranks from the simulator's candidate order. Prompt logprobs
 * (StepOutputs' prompt area, per prefill chunk) are held with the routing rows and go out whole in
 * that first output, as one LogprobsTensors of every position (held-prompt.ts), for a request that
 * asked (an empty one for a one-token prompt, as vLLM sends).
 */

const FINISH_TO_VLLM: Readonly<Record<FinishReason, number>> = {
  [FinishReason.None]: -1,
  [FinishReason.Stop]: VllmFinishReason.Stop,
  [FinishReason.Length]: VllmFinishReason.Length,
  [FinishReason.Abort]: VllmFinishReason.Abort,
  [FinishReason.Error]: VllmFinishReason.Error,
};

/** The rows the encoder writes: the card's shape and the width of its expert ids. */
export interface EncodedRoutingShape extends RoutingShape {
  /** uint16 ids (more than 256 experts). */
  wide: boolean;
}

export class StepEncoder {
  readonly #encoder: OutputsEncoder;
  readonly #shape: EncodedRoutingShape;
  readonly #rec = new OutputRecord();
  readonly #prefill: PrefillStats = {
    numPromptTokens: 0,
    numComputedTokens: 0,
    numCachedTokens: 0,
    numLocalCachedTokens: 0,
    numExternalCachedTokens: 0,
  };
  /** Bytes of one vLLM row and of the leading dense part of it. */
  readonly #rowBytes: number;
  readonly #denseBytes: number;
  #routed = new Uint8Array(4096);
  #routedBytes = bytesOfBuffer(this.#routed);
  #views = new Map<ArrayBufferLike, Uint8Array>();
  /** Requests whose first output went out in the last encode (scheduler_stats' prefix requests). */
  startedLastStep = 0;

  constructor(layout: VllmLayout, shape: EncodedRoutingShape) {
    this.#encoder = new OutputsEncoder(layout);
    this.#shape = shape;
    const width = shape.wide ? 2 : 1;
    this.#rowBytes = shape.hiddenLayers * shape.topk * width;
    this.#denseBytes = (shape.hiddenLayers - shape.routingLayers) * shape.topk * width;
  }

  /**
   * Encodes the step; finished requests leave `table`. Returns the frames (copies, for a reader of
   * frames; the engine sends encodeWire's bytes), or null when there is nothing to send and no
   * stats are given.
   */
  encode(
    out: StepOutputs,
    table: LiveRequests,
    engineIndex: number,
    stats: SchedulerStatsFields | null,
    timestamp: number,
  ): Buffer[] | null {
    if (!this.#encode(out, table, engineIndex, stats)) return null;
    return this.#encoder.end(stats, timestamp, null);
  }

  /** As encode(), but returns the message's ZMTP wire bytes (OutputsEncoder.endWire). */
  encodeWire(
    out: StepOutputs,
    table: LiveRequests,
    engineIndex: number,
    stats: SchedulerStatsFields | null,
    timestamp: number,
  ): Buffer | null {
    if (!this.#encode(out, table, engineIndex, stats)) return null;
    return this.#encoder.endWire(stats, timestamp);
  }

  /** Writes the step's outputs into the encoder, up to its end; false when there is no message. */
  #encode(
    out: StepOutputs,
    table: LiveRequests,
    engineIndex: number,
    stats: SchedulerStatsFields | null,
  ): boolean {
    let count = 0;
    for (let i = 0; i < out.count; i++) {
      const r = table.atSlot(out.slot[i] as number);
      if (r === undefined) continue;
      if ((out.token[i] as number) < 0 && out.finish[i] === FinishReason.None) {
        this.#holdRouting(out, i, r);
        r.prompt?.hold(out, i);
      } else if (!(r.clientAborted && out.finish[i] === FinishReason.Abort)) count++;
    }
    if (count === 0 && stats === null) {
      this.#releaseFinished(out, table);
      return false;
    }
    const e = this.#encoder;
    e.begin(engineIndex, count);
    this.startedLastStep = 0;
    for (let i = 0; i < out.count; i++) {
      const r = table.atSlot(out.slot[i] as number);
      if (r === undefined) continue;
      const finish = out.finish[i] as FinishReason;
      if ((out.token[i] as number) < 0 && finish === FinishReason.None) continue;
      if (!(r.clientAborted && finish === FinishReason.Abort)) this.#output(out, i, r);
    }
    this.#releaseFinished(out, table);
    if (stats !== null) stats.prefixRequests = this.startedLastStep;
    return true;
  }

  #releaseFinished(out: StepOutputs, table: LiveRequests): void {
    for (let i = 0; i < out.count; i++) {
      if (out.finish[i] === FinishReason.None) continue;
      const r = table.atSlot(out.slot[i] as number);
      if (r !== undefined) table.release(r);
    }
  }

  #output(out: StepOutputs, i: number, r: LiveRequest): void {
    const o = this.#rec;
    const hasToken = (out.token[i] as number) >= 0;
    o.requestId = r.id;
    o.tokenIds = out.token;
    o.tokenStart = i;
    o.tokenCount = hasToken ? 1 : 0;
    o.logprobs = r.logprobs && hasToken ? out.logprob : null;
    o.logprobStart = i;
    o.ranks = out.rank;
    o.rankStart = i;
    // Every output of a request has W = 1 + its k (the top area holds exactly k, or none).
    o.topWidth = o.logprobs === null ? 0 : (out.topCount[i] as number);
    o.topIds = out.topIds;
    o.topLogprobs = out.topLogprobs;
    o.topStart = out.topStart[i] as number;
    const finish = out.finish[i] as FinishReason;
    o.finishReason = FINISH_TO_VLLM[finish];
    // vLLM's connector answers kv_transfer_params on the request's final output only.
    o.kvTransferParams = finish === FinishReason.None ? null : r.kvTransferParams;
    o.stopReason = out.stopTokenId[i] as number;
    o.prefill = null;
    o.routedBytes = null;
    if (hasToken && !r.started) {
      r.started = true;
      this.startedLastStep++;
      const p = this.#prefill;
      const cached = out.numCachedTokens[i] as number;
      // A P/D import counts as cached: its tokens came from the prefill engine (NixlConnector's).
      const external = Math.min(r.importedTokens, cached);
      p.numPromptTokens = r.promptLength;
      p.numComputedTokens = r.promptLength - cached;
      p.numCachedTokens = cached;
      p.numLocalCachedTokens = cached - external;
      p.numExternalCachedTokens = external;
      o.prefill = p;
    }
    if (hasToken && (r.pendingRows > 0 || (out.routingRows[i] as number) > 0))
      this.#routing(out, i, r);
    o.promptLogprobs = null;
    const prompt = r.prompt;
    if (hasToken && prompt !== null && !prompt.sent) {
      prompt.hold(out, i);
      o.promptLogprobs = prompt.logprobs;
      o.promptIds = prompt.ids;
      o.promptRanks = prompt.ranks;
      o.promptStart = 0;
      o.promptPositions = prompt.positions;
      o.promptWidth = prompt.width;
    }
    o.maskCounts = null;
    if (r.mask && hasToken) {
      o.maskCounts = out.maskCount;
      o.maskCountStart = i;
      o.maskIds = out.maskIds;
      o.maskIdStart = out.maskStart[i] as number;
      o.maskIdCount = out.maskCount[i] as number;
    }
    this.#encoder.output(o);
    if (o.promptLogprobs !== null) prompt?.release();
  }

  /** The held prompt rows and this row's rows, expanded to vLLM's row shape, into the record. */
  #routing(out: StepOutputs, i: number, r: LiveRequest): void {
    const rows = out.routingRows[i] as number;
    const need = r.pendingBytes + rows * this.#rowBytes;
    if (this.#routed.length < need) {
      this.#routed = new Uint8Array(Math.max(need, this.#routed.length * 2));
      this.#routedBytes = bytesOfBuffer(this.#routed);
    }
    if (r.pendingBytes > 0) this.#routed.set(r.pendingRouting.subarray(0, r.pendingBytes));
    this.#expand(out, i, this.#routed, this.#routedBytes, r.pendingBytes);
    const o = this.#rec;
    o.routedBytes = this.#routed;
    o.routedByteStart = 0;
    o.routedRows = r.pendingRows + rows;
    o.routedLayers = this.#shape.hiddenLayers;
    o.routedTopk = this.#shape.topk;
    o.routedWide = this.#shape.wide;
    r.pendingBytes = 0;
    r.pendingRows = 0;
    r.pendingRouting = EMPTY;
  }

  /** A prompt chunk's rows, kept until the request's first output with tokens. */
  #holdRouting(out: StepOutputs, i: number, r: LiveRequest): void {
    const rows = out.routingRows[i] as number;
    if (rows === 0) return;
    const need = r.pendingBytes + rows * this.#rowBytes;
    if (r.pendingRouting.length < need) {
      const grown = new Uint8Array(Math.max(need, r.pendingRouting.length * 2));
      grown.set(r.pendingRouting.subarray(0, r.pendingBytes));
      r.pendingRouting = grown;
    }
    // Once per prompt chunk: a view of the request's own buffer, made once per chunk.
    this.#expand(out, i, r.pendingRouting, bytesOfBuffer(r.pendingRouting), r.pendingBytes);
    r.pendingBytes = need;
    r.pendingRows += rows;
  }

  /** Writes row i's routing rows at `at` in `into`, each prefixed with the dense layers' zeros. */
  #expand(out: StepOutputs, i: number, into: Uint8Array, intoBytes: Uint8Array, at: number): void {
    const rows = out.routingRows[i] as number;
    const width = this.#shape.wide ? 2 : 1;
    const src = this.#bytes(out.routing);
    const ownBytes = out.routingRowWidth * width;
    let from = (out.routingStart[i] as number) * ownBytes;
    let to = at;
    for (let k = 0; k < rows; k++) {
      if (this.#denseBytes > 0) into.fill(0, to, to + this.#denseBytes);
      to += this.#denseBytes;
      copyIds(src, out.routingBytes, from, into, intoBytes, to, ownBytes);
      from += ownBytes;
      to += ownBytes;
    }
  }

  /** A byte view of a whole typed array, made once per underlying buffer. */
  #bytes(a: ArrayBufferView): Uint8Array {
    let v = this.#views.get(a.buffer);
    if (v === undefined) {
      if (this.#views.size > 64) this.#views = new Map();
      v = new Uint8Array(a.buffer);
      this.#views.set(a.buffer, v);
    }
    return v;
  }
}

const EMPTY = new Uint8Array(0);
