/**
 * How the inline baseline keeps a sequence: one JS object per generated token and a number[] per
 * routing row, as a per-token-object frontend (vLLM's Python API server) does; turned into the
 * encoders' columns only when an answer or a stream event is built. This per-token representation
 * is the one thing the baseline does differently from the worker path, on purpose: it is what the
 * benchmark's objects arms measure (README, Performance).
 */
import {
  type ChoiceColumns,
  type ChoiceFinishReason,
  type GenerateResponseColumns,
  narrowRouting,
} from '../protocol/response-columns.js';
import type { RequestRecord } from './request-record.js';

/** One generated token, as a per-token-object frontend keeps it. */
export interface TokenOutput {
  id: number;
  logprob: number;
  mask: number[] | null;
  weightVersion: number;
}

export interface InlineSequence {
  readonly gen: number;
  readonly record: RequestRecord;
  /** This sequence's choice index in its request. */
  readonly index: number;
  tokens: TokenOutput[];
  /** Routing rows not yet sent (each layers*topk ids) and the position of the first. */
  routing: number[][];
  routingStart: number;
  layers: number;
  topk: number;
  numCached: number;
  /** Tokens already sent as stream events. */
  streamed: number;
  /** How it finished (set when it did), for the answer built once every choice has. */
  finishName: ChoiceFinishReason | null;
  stopReason: number | string | null;
  /** Finished here (a stop string, an error) or by the engine's final output. */
  done: boolean;
}

export function newSequence(record: RequestRecord, index: number): InlineSequence {
  return {
    gen: record.group.gens[index]!,
    record,
    index,
    tokens: [],
    routing: [],
    routingStart: -1,
    layers: 0,
    topk: 0,
    numCached: 0,
    streamed: 0,
    finishName: null,
    stopReason: null,
    done: false,
  };
}

/** The columns of `tokens` and `routing` (a whole choice, or a stream event's new part). */
export function choiceColumns(
  s: InlineSequence,
  tokens: TokenOutput[],
  routing: number[][],
  routingStart: number,
  finishReason: ChoiceFinishReason | null,
  stopReason: number | string | null,
): ChoiceColumns {
  const p = s.record.request.params;
  return {
    index: s.index,
    tokenIds: Int32Array.from(tokens, (t) => t.id),
    logprobs: p.logprobs ? Float32Array.from(tokens, (t) => t.logprob) : null,
    maskCounts: p.returnSamplingMask ? Int32Array.from(tokens, (t) => t.mask?.length ?? 0) : null,
    maskIds: p.returnSamplingMask ? Int32Array.from(tokens.flatMap((t) => t.mask ?? [])) : null,
    routing: p.returnRoutedExperts
      ? {
          data: narrowRouting(Uint16Array.from(routing.flat())),
          rows: routing.length,
          layers: s.layers,
          topk: s.topk,
          start: Math.max(0, routingStart),
        }
      : null,
    weightVersions: Int32Array.from(tokens, (t) => t.weightVersion),
    finishReason,
    stopReason,
  };
}

/** The whole answer's columns, from the per-token objects of every choice. */
export function responseColumns(sequences: InlineSequence[]): GenerateResponseColumns {
  const first = sequences[0]!;
  const { identity, request } = first.record;
  return {
    requestId: identity.requestId,
    model: identity.model,
    created: identity.created,
    choices: sequences.map((s) =>
      choiceColumns(s, s.tokens, s.routing, s.routingStart, s.finishName, s.stopReason),
    ),
    usage: {
      promptTokens: request.promptTokenIds.length,
      completionTokens: sequences.reduce((sum, s) => sum + s.tokens.length, 0),
      cachedTokens: null,
    },
    kvTransferParams: request.kvTransferParams,
  };
}
