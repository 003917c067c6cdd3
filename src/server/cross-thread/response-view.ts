// A finished request (or a stream delta's new positions) as the encoders' columns: typed-array
// views straight into the arena at the blocks the accumulator table names, nothing copied. A
// handful of objects per response or per delta, never per token. Used by the packers and by the
// output worker's stream encoder.

import type { RingserveError } from '../../errors.js';
import {
  type ChoiceColumns,
  type ChoiceFinishReason,
  choiceFinishReason,
  type PromptLogprobColumns,
  type RoutingColumns,
  type UsageFigures,
} from '../../protocol/response-columns.js';
import { FinishReason } from '../../wire/types.js';
import { type AccumulatorTable, AccWord, Column, OutputError } from './accumulators.js';
import { RS_ERR_OUTPUT_ARENA_FULL, RS_ERR_OUTPUT_BAD_STEP } from './errors.js';
import { rejectError } from './reject-error.js';
import { SlotFlag, type SlotMetaTable } from './slot-meta.js';

/** Where a delta starts: positions, mask ids and routing rows already sent (all 0 for a whole response). */
export interface ColumnsFrom {
  tokens: number;
  maskIds: number;
  routingRows: number;
}

const FROM_START: Readonly<ColumnsFrom> = Object.freeze({ tokens: 0, maskIds: 0, routingRows: 0 });

/** The coded error a failed request reports (the engine refused it, or the worker could not store it). */
export function requestFailure(
  acc: AccumulatorTable,
  slot: number,
  requestId: string,
): RingserveError | null {
  if (acc.finishReason(slot) !== FinishReason.Error) return null;
  switch (acc.outputError(slot)) {
    case OutputError.ArenaFull:
      return new RS_ERR_OUTPUT_ARENA_FULL(`the outputs of request ${requestId} did not fit`);
    case OutputError.BadStep:
      return new RS_ERR_OUTPUT_BAD_STEP(`the outputs of request ${requestId} were malformed`);
    default:
      return rejectError(acc.rejectReason(slot), requestId);
  }
}

export class ResponseView {
  readonly meta: SlotMetaTable;
  readonly acc: AccumulatorTable;
  readonly #arena: SharedArrayBuffer;

  constructor(meta: SlotMetaTable, acc: AccumulatorTable, arena: SharedArrayBuffer) {
    this.meta = meta;
    this.acc = acc;
    this.#arena = arena;
  }

  /** `finish_reason` of the slot's request; null while running or when it ended in an error. */
  finishName(slot: number): ChoiceFinishReason | null {
    return choiceFinishReason(this.acc.finishReason(slot));
  }

  /** True when the request ended in an error (the engine refused it, or the worker failed it). */
  failed(slot: number): boolean {
    return this.acc.finishReason(slot) === FinishReason.Error;
  }

  /** `stop_reason`: the matched stop string, else the stop token id, else null (EOS, length, abort). */
  stopReason(slot: number): number | string | null {
    const stopString = this.acc.stopStringIndex(slot);
    if (stopString >= 0) return this.meta.stopString(slot, stopString);
    const stopToken = this.acc.stopTokenId(slot);
    return stopToken >= 0 ? stopToken : null;
  }

  /**
   * The choice of `slot` from `from` to what has been accumulated. `finishReason` is filled once
   * the response is complete (pass null for a delta that is not the last).
   */
  choice(
    slot: number,
    index: number,
    from: Readonly<ColumnsFrom> = FROM_START,
    final = true,
  ): ChoiceColumns {
    const acc = this.acc;
    const flags = this.meta.flags(slot);
    const to = acc.completionTokens(slot);
    const n = Math.max(0, to - from.tokens);
    const withMask = (flags & SlotFlag.SamplingMask) !== 0;
    const k = acc.topK(slot);
    return {
      index,
      tokenIds: this.#i32(slot, Column.Tokens, from.tokens, n),
      logprobs:
        (flags & SlotFlag.Logprobs) !== 0 ? this.#f32(slot, Column.Logprobs, from.tokens, n) : null,
      maskCounts: withMask ? this.#i32(slot, Column.MaskCounts, from.tokens, n) : null,
      maskIds: withMask
        ? this.#i32(slot, Column.MaskIds, from.maskIds, acc.maskIdsCount(slot) - from.maskIds)
        : null,
      routing:
        (flags & SlotFlag.RoutedExperts) !== 0 ? this.#routing(slot, from.routingRows) : null,
      top:
        k > 0
          ? {
              ids: this.#i32(slot, Column.TopIds, from.tokens * k, n * k),
              logprobs: this.#f32(slot, Column.TopLogprobs, from.tokens * k, n * k),
              k,
            }
          : null,
      weightVersions: this.#i32(slot, Column.WeightVersions, from.tokens, n),
      finishReason: final ? this.finishName(slot) : null,
      stopReason: final ? this.stopReason(slot) : null,
    };
  }

  /**
   * The slot's prompt logprobs as views into the arena, or null when it stored none (not asked,
   * or a choice other than 0). `promptLength` comes from the slot's meta.
   */
  promptLogprobs(slot: number): PromptLogprobColumns | null {
    const acc = this.acc;
    const width = acc.promptWidth(slot);
    if (width <= 0) return null;
    const positions = acc.promptPositions(slot);
    const n = positions * width;
    return {
      promptLength: this.meta.promptLen(slot),
      positions,
      width,
      ids: this.#i32(slot, Column.PromptIds, 0, n),
      logprobs: this.#f32(slot, Column.PromptLogprobs, 0, n),
      ranks: this.#i32(slot, Column.PromptRanks, 0, n),
    };
  }

  /** Bytes `from..to` of the slot's text column (a view into the arena; empty without text). */
  text(slot: number, from: number, to: number): Uint8Array {
    if (to <= from || this.acc.columnClass(slot, Column.Text) < 0) return new Uint8Array(0);
    return new Uint8Array(this.#arena, this.acc.columnOffset(slot, Column.Text) + from, to - from);
  }

  /** Usage of a request made of `slots` (its n choices share one prompt). */
  usage(slots: readonly number[]): UsageFigures {
    let completion = 0;
    for (const s of slots) completion += this.acc.completionTokens(s);
    return {
      promptTokens: slots.length > 0 ? this.meta.promptLen(slots[0]!) : 0,
      completionTokens: completion,
      // vLLM writes `prompt_tokens_details: null` unless --enable-prompt-tokens-details; so does the contract.
      cachedTokens: null,
    };
  }

  #i32(slot: number, column: number, from: number, count: number): Int32Array {
    if (count <= 0 || this.acc.columnClass(slot, column) < 0) return new Int32Array(0);
    return new Int32Array(this.#arena, this.acc.columnOffset(slot, column) + from * 4, count);
  }

  #f32(slot: number, column: number, from: number, count: number): Float32Array {
    if (count <= 0 || this.acc.columnClass(slot, column) < 0) return new Float32Array(0);
    return new Float32Array(this.#arena, this.acc.columnOffset(slot, column) + from * 4, count);
  }

  /** Routing rows from row `fromRow`; `start` is that row's absolute position. */
  #routing(slot: number, fromRow: number): RoutingColumns {
    const acc = this.acc;
    const base = acc.wordIndex(slot, 0);
    const words = acc.words;
    const layers = words[base + AccWord.Layers]!;
    const topk = words[base + AccWord.Topk]!;
    const rows = Math.max(0, words[base + AccWord.RoutingRows]! - fromRow);
    const ids = rows * layers * topk;
    // With no row stored the start follows the contract's formula: prompt + completion - 1 - rows.
    const start =
      words[base + AccWord.RoutingRows]! > 0
        ? words[base + AccWord.RoutingFirstPos]! + fromRow
        : Math.max(0, this.meta.promptLen(slot) + acc.completionTokens(slot) - 1);
    const offset = acc.columnOffset(slot, Column.Routing);
    const hasBlock = ids > 0 && acc.columnClass(slot, Column.Routing) >= 0;
    const data =
      words[base + AccWord.RoutingIdBytes] === 2
        ? hasBlock
          ? new Uint16Array(this.#arena, offset + fromRow * layers * topk * 2, ids)
          : new Uint16Array(0)
        : hasBlock
          ? new Uint8Array(this.#arena, offset + fromRow * layers * topk, ids)
          : new Uint8Array(0);
    return { data, rows, layers, topk, start };
  }
}
