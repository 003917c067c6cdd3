/**
 * The legacy form of /inference/v1/generate (docs/contract.md, "The legacy form") built the way a Python
 * frontend builds it: an object over what the sequence already holds (inline-sequence.ts), each
 * per-token logprob object becoming its `logprobs.content` entry, the held token ids, masks and
 * weight versions as they are, the routing buffer base64-encoded once, then one JSON.stringify.
 * Nothing goes through typed columns. Logprobs print as JSON.stringify prints a double (a float32
 * read as a double has up to 17 digits), as Python's json module prints a float: the same float32
 * values as the worker path's shortest text (test/protocol/generate-response.test.ts).
 */

import {
  type ChoiceFinishReason,
  narrowRouting,
  RESPONSE_ID_PREFIX,
  type UsageFigures,
} from '../../protocol/response-columns.js';
import { stringifyWithPromptLogprobs, usageObject } from '../../protocol/response-object.js';
import type { RoutingBuffer } from './inline-routing.js';
import {
  type InlineSequence,
  promptColumns,
  routingFrom,
  type SampledLogprob,
  usageOf,
} from './inline-sequence.js';

/** `values` from index `from` on: the held array itself when that is all of it. */
function tail<T>(values: T[], from: number): T[] {
  return from === 0 ? values : values.slice(from);
}

function logprobsContent(entries: readonly SampledLogprob[], from: number): object[] {
  const content: object[] = [];
  for (let i = from; i < entries.length; i++) {
    const e = entries[i]!;
    content.push({
      token: `token_id:${e.tokenId}`,
      logprob: e.logprob,
      top_logprobs: e.top,
      bytes: null,
    });
  }
  return content;
}

/** `routed_experts`: the rows from `fromRow` on as one packed array, base64 once. */
function routedExperts(s: InlineSequence, routing: RoutingBuffer, fromRow: number): object {
  const r = routingFrom(s, routing, fromRow);
  const data = narrowRouting(r.data);
  return {
    data: Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64'),
    shape: [r.rows, r.layers, r.topk],
    dtype: data instanceof Uint8Array ? 'uint8' : 'uint16',
    start: r.start,
  };
}

/** Choice `s` from token `from` and routing row `fromRow` on (a whole choice, or a stream event). */
export function legacyChoice(
  s: InlineSequence,
  from: number,
  fromRow: number,
  finishReason: ChoiceFinishReason | null,
  stopReason: number | string | null,
): object {
  return {
    index: s.index,
    finish_reason: finishReason,
    stop_reason: stopReason,
    logprobs: s.logprobs ? { content: logprobsContent(s.logprobs, from) } : null,
    token_ids: tail(s.tokenIds, from),
    sampling_mask: s.masks ? tail(s.masks, from) : null,
    routed_experts: s.routing ? routedExperts(s, s.routing, fromRow) : null,
    weight_versions: tail(s.weightVersions, from),
  };
}

/** The whole legacy answer of the request whose choices are `sequences`, as JSON text. */
export function stringifyLegacyResponse(sequences: readonly InlineSequence[]): string {
  const { identity, request } = sequences[0]!.record;
  const answer = {
    request_id: RESPONSE_ID_PREFIX + identity.requestId,
    model: identity.model,
    created: identity.created,
    choices: sequences.map((s) => legacyChoice(s, 0, 0, s.finishName, s.stopReason)),
    usage: usageObject(usageOf(sequences)),
    prompt_logprobs: null,
    kv_transfer_params: request.kvTransferParams ?? null,
  };
  return stringifyWithPromptLogprobs(answer, promptColumns(sequences[0]!), true);
}

/** One legacy stream event's JSON text (sse.ts frames it) with the choice's new part. */
export function legacyStreamEvent(
  s: InlineSequence,
  from: number,
  fromRow: number,
  finishReason: ChoiceFinishReason | null,
  stopReason: number | string | null,
  usage: UsageFigures | null,
): string {
  const { requestId, model, created } = s.record.identity;
  const event = {
    request_id: RESPONSE_ID_PREFIX + requestId,
    model,
    created,
    choices: [legacyChoice(s, from, fromRow, finishReason, stopReason)],
    usage: usage === null ? null : usageObject(usage),
  };
  return JSON.stringify(event);
}
