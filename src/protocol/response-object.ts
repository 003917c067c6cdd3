import { randomBytes } from 'node:crypto';
import {
  type ChoiceColumns,
  checkChoiceColumns,
  checkPromptLogprobColumns,
  floorLogprob,
  type GenerateResponseColumns,
  LOGPROB_FLOOR,
  narrowRouting,
  type PromptLogprobColumns,
  promptTokenLogprobs,
  RESPONSE_ID_PREFIX,
  type UsageFigures,
} from './response-columns.js';

/**
 * The same response as generate-response.ts, built the straightforward way: JS objects, one per
 * token in the legacy form, then JSON.stringify. It is what a per-token-object frontend does (the
 * `--output-processing inline` baseline can use it) and the independent oracle the byte writers are
 * tested against. Not for the hot path.
 */

export interface PackedArrayObject {
  data: string;
  shape: number[];
  dtype: string;
}

function packed(view: ArrayBufferView, shape: number[], dtype: string): PackedArrayObject {
  const bytes = Buffer.from(view.buffer, view.byteOffset, view.byteLength);
  return { data: bytes.toString('base64'), shape, dtype };
}

/** `usage`, shared with the inline baseline's legacy objects (server/inline/inline-legacy.ts). */
export function usageObject(u: UsageFigures): Record<string, unknown> {
  return {
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    total_tokens: u.promptTokens + u.completionTokens,
    prompt_tokens_details: u.cachedTokens === null ? null : { cached_tokens: u.cachedTokens },
  };
}

function maskRows(counts: Int32Array, ids: Int32Array): number[][] {
  const rows: number[][] = [];
  let at = 0;
  for (const count of counts) {
    rows.push(Array.from(ids.subarray(at, at + count)));
    at += count;
  }
  return rows;
}

/**
 * vLLM's candidate list at completion position i: the sampled token first, then the engine's
 * best in order, each token once, padding left out; at most `limit` [id, logprob] pairs.
 */
export function candidates(c: ChoiceColumns, i: number, limit: number): [number, number][] {
  const out: [number, number][] = [];
  if (limit <= 0) return out;
  const id = c.tokenIds[i] as number;
  out.push([id, c.logprobs?.[i] as number]);
  const top = c.top;
  if (top == null) return out;
  for (let t = i * top.k; t < (i + 1) * top.k && out.length < limit; t++) {
    const other = top.ids[t] as number;
    if (other >= 0 && other !== id)
      out.push([other, Math.max(top.logprobs[t] as number, LOGPROB_FLOOR)]);
  }
  return out;
}

export function choiceObject(c: ChoiceColumns, legacy: boolean): Record<string, unknown> {
  checkChoiceColumns(c);
  const n = c.tokenIds.length;
  const tokenIds = Array.from(c.tokenIds);
  const out: Record<string, unknown> = {
    index: c.index,
    finish_reason: c.finishReason,
    stop_reason: c.stopReason,
    logprobs:
      legacy && c.logprobs !== null
        ? {
            content: tokenIds.map((id, i) => ({
              token: `token_id:${id}`,
              logprob: c.logprobs?.[i],
              top_logprobs: candidates(c, i, Math.max(c.top?.k ?? 0, 1)).map(([t, lp]) => ({
                token: `token_id:${t}`,
                logprob: lp,
                bytes: null,
              })),
              bytes: null,
            })),
          }
        : null,
    token_ids: tokenIds,
  };
  if (!legacy)
    out.completion_logprobs = c.logprobs === null ? null : packed(c.logprobs, [n], 'float32');
  if (c.maskCounts === null || c.maskIds === null) out.sampling_mask = null;
  else if (legacy) out.sampling_mask = maskRows(c.maskCounts, c.maskIds);
  else {
    out.sampling_mask = {
      ids: packed(c.maskIds, [c.maskIds.length], 'int32'),
      counts: packed(c.maskCounts, [n], 'int32'),
    };
  }
  const r = c.routing;
  if (r === null) out.routed_experts = null;
  else {
    const data = narrowRouting(r.data);
    const dtype = data instanceof Uint8Array ? 'uint8' : 'uint16';
    out.routed_experts = { ...packed(data, [r.rows, r.layers, r.topk], dtype), start: r.start };
  }
  if (c.weightVersions !== null) {
    out.weight_versions = legacy
      ? Array.from(c.weightVersions)
      : packed(c.weightVersions, [n], 'int32');
  }
  return out;
}

/** vLLM's Logprob as its JSON has it (decoded_token null: token-in/token-out). */
export interface PromptLogprobObject {
  logprob: number;
  rank: number;
  decoded_token: null;
}

/**
 * vLLM's prompt_logprobs list, each position's dict as [token id, Logprob] pairs in Python's dict
 * order: built from the engine's row with a Map, which keeps the first key's place and the last
 * value as a dict does. null for position 0 and for any position the engine did not send.
 */
export function promptLogprobEntries(
  p: PromptLogprobColumns,
): ([number, PromptLogprobObject][] | null)[] {
  checkPromptLogprobColumns(p);
  const out: ([number, PromptLogprobObject][] | null)[] = [null];
  for (let i = 0; i < p.promptLength - 1; i++) {
    if (i >= p.positions) {
      out.push(null);
      continue;
    }
    const dict = new Map<number, PromptLogprobObject>();
    for (let j = i * p.width; j < (i + 1) * p.width; j++) {
      const id = p.ids[j] as number;
      if (id < 0) continue;
      dict.set(id, {
        logprob: floorLogprob(p.logprobs[j] as number),
        rank: p.ranks[j] as number,
        decoded_token: null,
      });
    }
    out.push([...dict]);
  }
  return out;
}

/**
 * The top-level `prompt_logprobs` value: null, the packed float32 array, or (legacy) the list with
 * each dict as a plain object (JSON.stringify would order its integer keys numerically: the
 * stringify functions below write the legacy list's text themselves).
 */
export function promptLogprobsObject(
  p: PromptLogprobColumns | null | undefined,
  legacy: boolean,
): unknown {
  if (p == null) return null;
  if (!legacy) {
    checkPromptLogprobColumns(p);
    return packed(promptTokenLogprobs(p), [p.promptLength], 'float32');
  }
  return promptLogprobEntries(p).map((e) => (e === null ? null : Object.fromEntries(e)));
}

/** The legacy list's JSON text, each dict's keys in vLLM's order. */
function promptLogprobsText(p: PromptLogprobColumns): string {
  const items = promptLogprobEntries(p).map((e) =>
    e === null ? 'null' : `{${e.map(([id, v]) => `"${id}":${JSON.stringify(v)}`).join(',')}}`,
  );
  return `[${items.join(',')}]`;
}

/** Stands in for the legacy prompt_logprobs text until it is spliced in (random: no collision). */
const PROMPT_PLACEHOLDER = `ringserve-prompt-logprobs-${randomBytes(12).toString('hex')}`;

/**
 * JSON.stringify of an answer object whose `prompt_logprobs` is written from `prompt`: the legacy
 * list spliced in as text (dict key order kept), the packed array as an object.
 */
export function stringifyWithPromptLogprobs(
  answer: Record<string, unknown>,
  prompt: PromptLogprobColumns | null | undefined,
  legacy: boolean,
): string {
  if (prompt == null || !legacy) {
    return JSON.stringify({ ...answer, prompt_logprobs: promptLogprobsObject(prompt, legacy) });
  }
  const text = JSON.stringify({ ...answer, prompt_logprobs: PROMPT_PLACEHOLDER });
  return text.replace(`"${PROMPT_PLACEHOLDER}"`, () => promptLogprobsText(prompt));
}

export function responseObject(
  res: GenerateResponseColumns,
  legacy: boolean,
): Record<string, unknown> {
  return {
    request_id: RESPONSE_ID_PREFIX + res.requestId,
    model: res.model,
    created: res.created,
    choices: res.choices.map((c) => choiceObject(c, legacy)),
    usage: usageObject(res.usage),
    prompt_logprobs: promptLogprobsObject(res.promptLogprobs, legacy),
    kv_transfer_params: res.kvTransferParams ?? null,
  };
}

/** The JSON response made the slow way: objects, then JSON.stringify. */
export function stringifyGenerateResponse(res: GenerateResponseColumns, legacy: boolean): string {
  return stringifyWithPromptLogprobs(responseObject(res, legacy), res.promptLogprobs, legacy);
}
