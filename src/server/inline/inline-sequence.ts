/**
 * How the inline baseline keeps a sequence: as a careful port of a Python frontend (vLLM's output
 * processor) keeps it. The sampled token ids and their weight versions are plain number[] (vLLM's
 * `token_ids: list[int]`); when logprobs are asked, one object per token holds the sampled token's
 * logprob (vLLM keeps a `{token_id: Logprob}` entry per position); when the sampling mask is asked,
 * one number[] per position holds its kept ids; routed experts go into one growing typed array per
 * sequence (inline-routing.ts), as vLLM's capturer keeps a numpy buffer. This per-token
 * representation is the one thing the baseline does differently from the worker path, on purpose:
 * it is what the benchmark's objects arms measure (docs/performance.md).
 *
 * The legacy answer is built from it directly (inline-legacy.ts); the packed forms, which a
 * per-token-object frontend can only make by packing its objects, go through the encoders' columns
 * (choiceColumns below).
 */
import type {
  ChoiceColumns,
  ChoiceFinishReason,
  GenerateResponseColumns,
  PromptLogprobColumns,
  RoutingColumns,
  UsageFigures,
} from '../../protocol/response-columns.js';
import type { RequestRecord } from '../main/request-record.js';
import { RoutingBuffer } from './inline-routing.js';

/** The sampled token's logprob at one position, the per-token object of the logprobs. */
export interface SampledLogprob {
  tokenId: number;
  logprob: number;
  /**
   * The legacy answer's `top_logprobs` entries (vLLM's order: the sampled token first, then the
   * engine's best, each token once, max(k, 1) of them), built as a Python frontend builds them.
   */
  top: { token: string; logprob: number; bytes: null }[];
}

export interface InlineSequence {
  readonly gen: number;
  readonly record: RequestRecord;
  /** This sequence's choice index in its request. */
  readonly index: number;
  readonly tokenIds: number[];
  /** The weight version each token was sampled under (ringserve's `weight_versions`). */
  readonly weightVersions: number[];
  /** One object per token; null when logprobs were not asked. */
  readonly logprobs: SampledLogprob[] | null;
  /** The kept token ids of each position; null when the sampling mask was not asked. */
  readonly masks: number[][] | null;
  /** null when routed experts were not asked. */
  readonly routing: RoutingBuffer | null;
  /**
   * Prompt logprobs (choice 0 of a request that asked prompt_logprobs): each position's entries
   * from position 1 on, pushed as they arrive, as a per-token-object frontend keeps them.
   */
  readonly prompt: InlinePrompt | null;
  /** Tokens and routing rows already sent as stream events. */
  streamed: number;
  streamedRows: number;
  /** How it finished (set when it did), for the answer built once every choice has. */
  finishName: ChoiceFinishReason | null;
  stopReason: number | string | null;
  /** Finished here (a stop string, an error) or by the engine's final output. */
  done: boolean;
}

export interface InlinePrompt {
  /** 1 + k, or 0 before the first position arrived. */
  width: number;
  ids: number[];
  logprobs: number[];
  ranks: number[];
}

export function newSequence(record: RequestRecord, index: number): InlineSequence {
  const p = record.request.params;
  return {
    gen: record.group.gens[index]!,
    record,
    index,
    tokenIds: [],
    weightVersions: [],
    logprobs: p.logprobs ? [] : null,
    masks: p.returnSamplingMask ? [] : null,
    routing: p.returnRoutedExperts ? new RoutingBuffer() : null,
    prompt:
      index === 0 && p.promptLogprobs >= 0 ? { width: 0, ids: [], logprobs: [], ranks: [] } : null,
    streamed: 0,
    streamedRows: 0,
    finishName: null,
    stopReason: null,
    done: false,
  };
}

/** Usage of a request made of `sequences` (its n choices share one prompt). */
export function usageOf(sequences: readonly InlineSequence[]): UsageFigures {
  let completion = 0;
  for (const s of sequences) completion += s.tokenIds.length;
  return {
    promptTokens: sequences[0]!.record.request.promptTokenIds.length,
    completionTokens: completion,
    cachedTokens: null,
  };
}

/**
 * The routing rows from row `fromRow` on, a view of the buffer. With no row held the start follows
 * the contract's formula, prompt + completion - 1 - rows, as the worker path's (response-view.ts).
 */
export function routingFrom(s: InlineSequence, routing: RoutingBuffer, fromRow: number) {
  const start =
    routing.rows > 0
      ? routing.start + fromRow
      : Math.max(0, s.record.request.promptTokenIds.length + s.tokenIds.length - 1);
  const rows = Math.max(0, routing.rows - fromRow);
  const { layers, topk } = routing;
  return { data: routing.ids(fromRow), rows, layers, topk, start } satisfies RoutingColumns;
}

/**
 * The packed forms' columns of tokens [from, end) and routing rows [fromRow, end) (a whole choice,
 * or a stream event's new part): the per-token objects packed into typed arrays.
 */
export function choiceColumns(
  s: InlineSequence,
  from: number,
  fromRow: number,
  finishReason: ChoiceFinishReason | null,
  stopReason: number | string | null,
): ChoiceColumns {
  const masks = s.masks?.slice(from) ?? null;
  return {
    index: s.index,
    tokenIds: Int32Array.from(s.tokenIds.slice(from)),
    logprobs: s.logprobs ? Float32Array.from(s.logprobs.slice(from), (t) => t.logprob) : null,
    maskCounts: masks ? Int32Array.from(masks, (m) => m.length) : null,
    maskIds: masks ? Int32Array.from(masks.flat()) : null,
    routing: s.routing ? routingFrom(s, s.routing, fromRow) : null,
    weightVersions: Int32Array.from(s.weightVersions.slice(from)),
    finishReason,
    stopReason,
  };
}

/** The whole answer's columns in a packed form, from every choice's per-token objects. */
export function responseColumns(sequences: InlineSequence[]): GenerateResponseColumns {
  const { identity, request } = sequences[0]!.record;
  return {
    requestId: identity.requestId,
    model: identity.model,
    created: identity.created,
    choices: sequences.map((s) => choiceColumns(s, 0, 0, s.finishName, s.stopReason)),
    usage: usageOf(sequences),
    kvTransferParams: request.kvTransferParams,
    promptLogprobs: promptColumns(sequences[0]!),
  };
}

/** The request's prompt logprobs as columns (choice 0 holds them), or null. */
export function promptColumns(s: InlineSequence): PromptLogprobColumns | null {
  const p = s.prompt;
  if (p === null || p.width === 0) return null;
  return {
    promptLength: s.record.request.promptTokenIds.length,
    positions: p.ids.length / p.width,
    width: p.width,
    ids: Int32Array.from(p.ids),
    logprobs: Float32Array.from(p.logprobs),
    ranks: Int32Array.from(p.ranks),
  };
}
