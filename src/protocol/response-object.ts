import {
  type ChoiceColumns,
  checkChoiceColumns,
  type GenerateResponseColumns,
  LOGPROB_FLOOR,
  narrowRouting,
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

/** `usage`, shared with the inline baseline's legacy objects (server/inline-legacy.ts). */
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
    prompt_logprobs: null,
    kv_transfer_params: res.kvTransferParams ?? null,
  };
}

/** The JSON response made the slow way: objects, then JSON.stringify. */
export function stringifyGenerateResponse(res: GenerateResponseColumns, legacy: boolean): string {
  return JSON.stringify(responseObject(res, legacy));
}
