import type { JsonWriter } from './json-writer.js';
import {
  type ChoiceColumns,
  checkChoiceColumns,
  LOGPROB_FLOOR,
  narrowRouting,
  type TopColumns,
  type UsageFigures,
} from './response-columns.js';

/**
 * One choice object, shared by the whole response and by stream chunks (whose choices carry only
 * the new positions). Packed form: per-token arrays as base64 packed arrays, `logprobs: null`.
 * Legacy form (stock vLLM's): `logprobs.content` objects, `sampling_mask` as int[][], no
 * `completion_logprobs`. Both are written byte by byte from the typed arrays, no per-token objects:
 * the legacy form is slower for the client, not for the server.
 */
export function writeChoiceJson(w: JsonWriter, c: ChoiceColumns, legacy: boolean): void {
  checkChoiceColumns(c);
  const n = c.tokenIds.length;
  w.raw('{"index":').int(c.index).raw(',"finish_reason":');
  if (c.finishReason === null) w.null();
  else w.raw('"').raw(c.finishReason).raw('"');
  w.raw(',"stop_reason":');
  if (c.stopReason === null) w.null();
  else if (typeof c.stopReason === 'number') w.int(c.stopReason);
  else w.string(c.stopReason);
  w.raw(',"logprobs":');
  if (legacy && c.logprobs !== null) writeLegacyLogprobs(w, c.tokenIds, c.logprobs, c.top ?? null);
  else w.null();
  w.raw(',"token_ids":').intArray(c.tokenIds);
  if (!legacy) {
    w.raw(',"completion_logprobs":');
    if (c.logprobs === null) w.null();
    else w.packedArray(c.logprobs, [n], 'float32');
  }
  w.raw(',"sampling_mask":');
  if (c.maskCounts === null || c.maskIds === null) w.null();
  else if (legacy) writeLegacyMask(w, c.maskCounts, c.maskIds);
  else {
    w.raw('{"ids":').packedArray(c.maskIds, [c.maskIds.length], 'int32');
    w.raw(',"counts":').packedArray(c.maskCounts, [n], 'int32').raw('}');
  }
  w.raw(',"routed_experts":');
  const r = c.routing;
  if (r === null) w.null();
  else {
    const data = narrowRouting(r.data);
    w.raw('{').packedArrayFields(
      data,
      [r.rows, r.layers, r.topk],
      data instanceof Uint8Array ? 'uint8' : 'uint16',
    );
    w.raw(',"start":').int(r.start).raw('}');
  }
  if (c.weightVersions !== null) {
    w.raw(',"weight_versions":');
    if (legacy) w.intArray(c.weightVersions);
    else w.packedArray(c.weightVersions, [n], 'int32');
  }
  w.raw('}');
}

/**
 * `{"content":[{"token":"token_id:<id>","logprob":lp,"top_logprobs":[..],"bytes":null},...]}`.
 * `top_logprobs` is vLLM's (its generate route's legacy logprobs, ChatCompletionLogProbs): the
 * sampled token first, then the engine's best candidates in order, each token once, max(k, 1)
 * entries (k = 0 lists the sampled token alone), each `{"token","logprob","bytes":null}`.
 */
function writeLegacyLogprobs(
  w: JsonWriter,
  tokenIds: Int32Array,
  logprobs: Float32Array,
  top: TopColumns | null,
): void {
  const k = top === null ? 0 : top.k;
  const limit = Math.max(k, 1);
  w.raw('{"content":[');
  for (let i = 0; i < tokenIds.length; i++) {
    const id = tokenIds[i] as number;
    w.raw(i === 0 ? '{"token":"token_id:' : ',{"token":"token_id:');
    w.int(id)
      .raw('","logprob":')
      .number(logprobs[i] as number);
    w.raw(',"top_logprobs":[{"token":"token_id:')
      .int(id)
      .raw('","logprob":')
      .number(logprobs[i] as number)
      .raw(',"bytes":null}');
    let listed = 1;
    for (let t = i * k, end = t + k; t < end && listed < limit; t++) {
      const other = (top as TopColumns).ids[t] as number;
      if (other < 0 || other === id) continue;
      w.raw(',{"token":"token_id:')
        .int(other)
        .raw('","logprob":')
        .number(Math.max((top as TopColumns).logprobs[t] as number, LOGPROB_FLOOR))
        .raw(',"bytes":null}');
      listed++;
    }
    w.raw('],"bytes":null}');
  }
  w.raw(']}');
}

/** The CSR mask as int[][]: one array of kept ids per position, `[]` where the count is 0. */
function writeLegacyMask(w: JsonWriter, counts: Int32Array, ids: Int32Array): void {
  w.raw('[');
  let at = 0;
  for (let i = 0; i < counts.length; i++) {
    if (i > 0) w.raw(',');
    const count = counts[i] as number;
    w.intArray(ids, at, at + count);
    at += count;
  }
  w.raw(']');
}

export function writeUsageJson(w: JsonWriter, u: UsageFigures): void {
  w.raw('{"prompt_tokens":').int(u.promptTokens);
  w.raw(',"completion_tokens":').int(u.completionTokens);
  w.raw(',"total_tokens":').int(u.promptTokens + u.completionTokens);
  w.raw(',"prompt_tokens_details":');
  if (u.cachedTokens === null) w.null();
  else w.raw('{"cached_tokens":').int(u.cachedTokens).raw('}');
  w.raw('}');
}
