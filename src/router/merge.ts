/**
 * The P/D merge: a prefill answer and a decode answer of one request become the colocated answer.
 * Token ids, logprobs, masks and weight versions are the decode answer's (the decode instance
 * samples every completion token, the first included, as vLLM's nixl flow does). Routing rows are
 * merged by position (docs/contract.md, "Prefill/decode"): the prefill rows `[p.start, p.start +
 * p.rows)`, then the decode rows from `p.start + p.rows` on, dropping the first
 * `(p.start + p.rows) - d.start` decode rows (the positions both computed: P-1 after an import,
 * the whole prompt after a failed load). Arrays are typed and copied once into the merged ones.
 */
import type { DecodedChoice, DecodedRouting, GenerateResult } from '../client/decode.js';
import { RS_ERR_ROUTER_SHORT_ROWS, RS_ERR_ROUTER_UPSTREAM } from '../errors.js';
import type {
  ChoiceColumns,
  ChoiceFinishReason,
  GenerateResponseColumns,
  RoutingColumns,
} from '../protocol/response-columns.js';

/** The merged answer's columns (the writers of protocol/ encode it in any form). */
export function mergeAnswers(
  prefill: GenerateResult,
  decode: GenerateResult,
  requestId: string,
  kvTransferParams: unknown,
): GenerateResponseColumns {
  const p0 = prefill.choices[0];
  if (p0 === undefined) throw new RS_ERR_ROUTER_UPSTREAM('prefill', '', 'answer has no choice');
  const promptTokens = decode.usage?.promptTokens ?? 0;
  return {
    requestId,
    model: decode.model,
    created: decode.created,
    choices: decode.choices.map((d) => mergeChoice(p0, d, promptTokens)),
    usage: {
      promptTokens,
      completionTokens: decode.usage?.completionTokens ?? 0,
      // The prefill instance served the prompt: its prefix-cache hits are the request's.
      cachedTokens: prefill.usage?.cachedTokens ?? null,
    },
    kvTransferParams,
  };
}

export function mergeChoice(
  p: DecodedChoice,
  d: DecodedChoice,
  promptTokens: number,
): ChoiceColumns {
  return {
    index: d.index,
    tokenIds: d.tokenIds,
    logprobs: d.logprobs,
    maskCounts: d.mask?.counts ?? null,
    maskIds: d.mask?.ids ?? null,
    routing: mergeRouting(
      p.routedExperts,
      d.routedExperts,
      d.index,
      promptTokens + d.tokenIds.length - 1,
    ),
    weightVersions: d.weightVersions,
    finishReason: d.finishReason as ChoiceFinishReason | null,
    stopReason: d.stopReason,
  };
}

/**
 * Prefill rows then decode rows from where the prefill's end, by position. `end` is where the
 * colocated rows end (P + C - 1); a decode answer that does not reach from the prefill's end to
 * there is RS_ERR_ROUTER_SHORT_ROWS, never a silently short array.
 */
export function mergeRouting(
  p: DecodedRouting | null,
  d: DecodedRouting | null,
  index: number,
  end: number,
): RoutingColumns | null {
  if (p === null && d === null) return null;
  if (p === null || d === null) {
    throw new RS_ERR_ROUTER_SHORT_ROWS(index, `${p === null ? 'prefill' : 'decode'} sent none`);
  }
  const [pRows, layers, topk] = p.shape;
  const [dRows, dLayers, dTopk] = d.shape;
  if (dLayers !== layers || dTopk !== topk) {
    throw new RS_ERR_ROUTER_SHORT_ROWS(
      index,
      `decode rows are [*, ${dLayers}, ${dTopk}], prefill rows [*, ${layers}, ${topk}]`,
    );
  }
  const cut = p.start + pRows;
  if (d.start > cut) {
    throw new RS_ERR_ROUTER_SHORT_ROWS(index, `positions ${cut}..${d.start - 1} are missing`);
  }
  if (d.start + dRows < end) {
    throw new RS_ERR_ROUTER_SHORT_ROWS(
      index,
      `they end at position ${d.start + dRows - 1}, the completion at ${end - 1} (${end - d.start - dRows} short)`,
    );
  }
  const width = layers * topk;
  const drop = Math.max(0, Math.min(cut - d.start, dRows));
  const rows = pRows + dRows - drop;
  const wide = p.data instanceof Uint16Array || d.data instanceof Uint16Array;
  const data = wide ? new Uint16Array(rows * width) : new Uint8Array(rows * width);
  data.set(p.data, 0);
  data.set(d.data.subarray(drop * width), pRows * width);
  return { data, rows, layers, topk, start: p.start };
}
