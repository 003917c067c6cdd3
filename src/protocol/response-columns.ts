import { RS_ERR_PROTOCOL_BAD_COLUMNS } from '../errors.js';
import { LOGPROB_FLOOR } from '../wire/sampling-check.js';
import { type FinishReasonName, finishReasonName } from '../wire/types.js';

/**
 * What the encoders take: a finished request (or a stream chunk's new positions) as typed-array
 * views over the per-request accumulators. The views may point into SharedArrayBuffers; nothing is
 * copied before encoding. One ChoiceColumns per choice, a handful of objects per request.
 */

/** A choice's `finish_reason`: a request that ended in an error is answered with an error body. */
export type ChoiceFinishReason = Exclude<FinishReasonName, 'error'>;

/** `finish_reason` of a choice that ended with FinishReason `code`; null while running or on error. */
export function choiceFinishReason(code: number): ChoiceFinishReason | null {
  const name = finishReasonName(code);
  return name === 'error' ? null : name;
}

export interface RoutingColumns {
  /** rows × layers × topk expert ids, row-major. */
  data: Uint8Array | Uint16Array;
  rows: number;
  layers: number;
  topk: number;
  /** Absolute sequence position of row 0. */
  start: number;
}

/** The lowest logprob the answers write (vLLM's floor for -inf and everything below). */
export { LOGPROB_FLOOR };

/** A logprob as the answers write it: floored at LOGPROB_FLOOR, NaN (no value) as the floor. */
export function floorLogprob(lp: number): number {
  return Number.isNaN(lp) ? LOGPROB_FLOOR : Math.max(lp, LOGPROB_FLOOR);
}

/**
 * The engine's best candidates at each completion position (a request that asked top_logprobs
 * k > 0 in an answer that lists them): `k` entries per position, position-major, best first as the
 * engine ranked them. The sampled token may be among them or not; an entry with id -1 is padding
 * (the engine had fewer) and is never written.
 */
export interface TopColumns {
  ids: Int32Array;
  logprobs: Float32Array;
  k: number;
}

export interface ChoiceColumns {
  index: number;
  tokenIds: Int32Array;
  /** Logprob of each sampled token (floored at -9999), or null when logprobs were not asked. */
  logprobs: Float32Array | null;
  /** Sampling-mask CSR: a count per position, the kept ids concatenated; null when not asked. */
  maskCounts: Int32Array | null;
  maskIds: Int32Array | null;
  routing: RoutingColumns | null;
  /** Candidates beside the sampled tokens; absent or null when none were asked or kept. */
  top?: TopColumns | null;
  /**
   * ringserve's extension, `choice.weight_versions`: the weight version each completion token was
   * sampled under, one int32 per token, in token order. An /update_weights that lands while a
   * request runs splits it: tokens before the swap carry the old version, tokens after it the new
   * one (a trainer with in-flight updates needs the split per token, not just first and last, to
   * weigh or drop the stale part). Wire forms, like the other per-token columns:
   *   packed JSON: `"weight_versions": {"data": <base64 int32 LE>, "shape": [n], "dtype": "int32"}`
   *   legacy JSON: `"weight_versions": [v, v, ...]`
   *   msgpack:     the packed form with `data` as bin
   *   stream:      each event carries the versions of its new tokens only.
   * The version is the one /update_weights answered (`weight_version`): from the manifest
   * `<weight_dir>/ringserve-weights.json` {"version": n}, else the previous one + 1. Written only
   * when non-null; a client must treat an absent field as "not reported", never as a version.
   */
  weightVersions: Int32Array | null;
  /** null while a streamed choice is still running. */
  finishReason: ChoiceFinishReason | null;
  /** The stop token id or stop string that ended the choice, else null. */
  stopReason: number | string | null;
}

export interface UsageFigures {
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens served from the prefix cache; null writes `prompt_tokens_details: null`. */
  cachedTokens: number | null;
}

export interface GenerateResponseColumns {
  /** The request id without the prefix; the response says `generate-tokens-<requestId>`. */
  requestId: string;
  model: string;
  /** Unix seconds. */
  created: number;
  choices: readonly ChoiceColumns[];
  usage: UsageFigures;
  /** Passed through as given (P/D disaggregation); null when none. */
  kvTransferParams: unknown;
  /** The request's prompt logprobs (sampling_params.prompt_logprobs k >= 0); absent or null: none. */
  promptLogprobs?: PromptLogprobColumns | null;
}

/**
 * Prompt logprobs as the engine computed them: `positions` prompt positions from position 1 on
 * (position 0 has none; fewer than promptLength - 1 only when the engine did not send them all,
 * and the missing ones are answered as missing), `width` = 1 + k entries each, position-major.
 * Entry 0 is the prompt token with its rank in the vocabulary (1 = the most likely), entries
 * 1..k the best candidates with ranks 1..k.
 *   packed JSON: `"prompt_logprobs": {"data", "shape": [promptLength], "dtype": "float32"}`, the
 *                prompt token's logprob at each position, position 0 and missing ones -9999
 *   legacy JSON: vLLM's list: null for position 0, then per position a dict keyed by token id,
 *                the prompt token first, `{"logprob", "rank", "decoded_token": null}` each
 *   msgpack:     the packed form with `data` as bin
 */
export interface PromptLogprobColumns {
  promptLength: number;
  positions: number;
  width: number;
  ids: Int32Array;
  logprobs: Float32Array;
  ranks: Int32Array;
}

/** Throws RS_ERR_PROTOCOL_BAD_COLUMNS unless the prompt logprob columns agree with each other. */
export function checkPromptLogprobColumns(p: PromptLogprobColumns): void {
  const n = p.positions * p.width;
  if (p.width < 1 || p.positions < 0 || p.positions > Math.max(p.promptLength - 1, 0)) {
    throw new RS_ERR_PROTOCOL_BAD_COLUMNS(
      `prompt logprobs: ${p.positions} positions of width ${p.width} for a ${p.promptLength}-token prompt`,
    );
  }
  if (p.ids.length !== n || p.logprobs.length !== n || p.ranks.length !== n) {
    throw new RS_ERR_PROTOCOL_BAD_COLUMNS(
      `prompt logprobs: ${p.ids.length} ids, ${p.logprobs.length} logprobs, ${p.ranks.length} ranks for ${n} entries`,
    );
  }
}

/**
 * The packed form's array: the prompt token's logprob at each of the promptLength positions,
 * -9999 at position 0 and at any the engine did not send. One array per response.
 */
export function promptTokenLogprobs(p: PromptLogprobColumns): Float32Array {
  const out = new Float32Array(p.promptLength).fill(LOGPROB_FLOOR);
  for (let i = 0; i < p.positions; i++) {
    out[i + 1] = floorLogprob(p.logprobs[i * p.width] as number);
  }
  return out;
}

export const RESPONSE_ID_PREFIX = 'generate-tokens-';

/** Throws RS_ERR_PROTOCOL_BAD_COLUMNS unless the columns of a choice agree with each other. */
export function checkChoiceColumns(c: ChoiceColumns): void {
  const n = c.tokenIds.length;
  const bad = (what: string): never => {
    throw new RS_ERR_PROTOCOL_BAD_COLUMNS(`choice ${c.index}: ${what}`);
  };
  if (c.logprobs !== null && c.logprobs.length !== n) {
    bad(`${c.logprobs.length} logprobs for ${n} tokens`);
  }
  if ((c.maskCounts === null) !== (c.maskIds === null))
    bad('mask counts and ids must come together');
  if (c.maskCounts !== null && c.maskIds !== null) {
    if (c.maskCounts.length !== n) bad(`${c.maskCounts.length} mask counts for ${n} tokens`);
    let sum = 0;
    for (let i = 0; i < n; i++) sum += c.maskCounts[i] as number;
    if (sum !== c.maskIds.length)
      bad(`mask counts sum to ${sum} but there are ${c.maskIds.length} ids`);
  }
  const r = c.routing;
  if (r !== null && r.data.length !== r.rows * r.layers * r.topk) {
    bad(`routing holds ${r.data.length} ids, not ${r.rows} x ${r.layers} x ${r.topk}`);
  }
  const t = c.top;
  if (t != null && (t.ids.length !== n * t.k || t.logprobs.length !== n * t.k)) {
    bad(`${t.ids.length} top ids and ${t.logprobs.length} logprobs for ${n} tokens x ${t.k}`);
  }
  if (c.weightVersions !== null && c.weightVersions.length !== n) {
    bad(`${c.weightVersions.length} weight versions for ${n} tokens`);
  }
}

/**
 * The contract sends routing as uint8 when every expert id is <= 255, else uint16. A Uint16Array
 * whose ids all fit is narrowed into a new Uint8Array (one per response, not per token).
 */
export function narrowRouting(data: Uint8Array | Uint16Array): Uint8Array | Uint16Array {
  if (data instanceof Uint8Array) return data;
  for (let i = 0; i < data.length; i++) if ((data[i] as number) > 255) return data;
  return Uint8Array.from(data);
}
