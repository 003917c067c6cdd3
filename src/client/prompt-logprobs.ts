import { RS_ERR_CLIENT_DECODE } from '../errors.js';
import { LOGPROB_FLOOR, type PromptLogprobColumns } from '../protocol/response-columns.js';
import { decodePackedArray } from './decode.js';

/**
 * A generate answer's top-level `prompt_logprobs` (GenerateResult.promptLogprobs, as received) as
 * columns, in either form. Both need what the request asked: the prompt's token ids and its
 * `prompt_logprobs` k.
 *
 * - The packed form (float32 `[prompt_len]`) carries the prompt tokens' logprobs alone: the columns
 *   have width 1, the prompt's ids, and ranks of 0 (not sent).
 * - The legacy form (vLLM's list of `{token id: {logprob, rank, decoded_token}}` dicts, null first)
 *   is read by rank, not by key order, since JSON.parse orders integer keys numerically: entry 0 is
 *   the prompt token's, entries 1..k the keys of rank 1..k in rank order (id -1 where fewer came).
 *   A null position is a missing one; positions after the first missing one are dropped, as the
 *   columns count positions from 1 without gaps.
 */
export function decodePromptLogprobs(
  value: unknown,
  promptTokenIds: ArrayLike<number>,
  k: number,
): PromptLogprobColumns | null {
  if (value === undefined || value === null) return null;
  const promptLength = promptTokenIds.length;
  if (!Array.isArray(value)) {
    const all = decodePackedArray(value, 'prompt_logprobs');
    if (!(all instanceof Float32Array) || all.length !== promptLength) {
      bad('', `expected float32 [${promptLength}]`);
    }
    const positions = Math.max(promptLength - 1, 0);
    return {
      promptLength,
      positions,
      width: 1,
      ids: Int32Array.from({ length: positions }, (_, i) => promptTokenIds[i + 1] as number),
      logprobs: all.slice(1),
      ranks: new Int32Array(positions),
    };
  }
  if (value.length !== promptLength) bad('', `${value.length} entries for ${promptLength} tokens`);
  const width = 1 + k;
  const ids: number[] = [];
  const logprobs: number[] = [];
  const ranks: number[] = [];
  let positions = 0;
  for (let p = 1; p < promptLength; p++) {
    const dict = value[p];
    if (dict === null) break;
    if (typeof dict !== 'object' || Array.isArray(dict)) bad(`[${p}]`, 'expected an object');
    const entries = Object.entries(dict as Record<string, unknown>).map(([key, v]) =>
      entry(key, v, p),
    );
    const own = entries.find((e) => e.id === promptTokenIds[p]);
    if (own === undefined) bad(`[${p}]`, `has no entry for prompt token ${promptTokenIds[p]}`);
    const best = entries.filter((e) => e.rank >= 1 && e.rank <= k).sort((a, b) => a.rank - b.rank);
    for (const e of [own, ...best.slice(0, k)]) {
      ids.push(e.id);
      logprobs.push(e.logprob);
      ranks.push(e.rank);
    }
    for (let j = best.length; j < k; j++) {
      ids.push(-1);
      logprobs.push(LOGPROB_FLOOR);
      ranks.push(0);
    }
    positions++;
  }
  return {
    promptLength,
    positions,
    width,
    ids: Int32Array.from(ids),
    logprobs: Float32Array.from(logprobs),
    ranks: Int32Array.from(ranks),
  };
}

function entry(key: string, v: unknown, p: number): { id: number; logprob: number; rank: number } {
  const id = Number(key);
  if (!Number.isSafeInteger(id)) bad(`[${p}]`, `key ${JSON.stringify(key)} is not a token id`);
  const o = v as { logprob?: unknown; rank?: unknown } | null;
  if (o === null || typeof o !== 'object' || typeof o.logprob !== 'number') {
    bad(`[${p}]["${key}"].logprob`, 'expected a number');
  }
  const rank = o.rank === null || o.rank === undefined ? 0 : o.rank;
  if (typeof rank !== 'number' || !Number.isInteger(rank))
    bad(`[${p}]["${key}"].rank`, 'expected an integer');
  return { id, logprob: o.logprob, rank };
}

function bad(path: string, what: string): never {
  throw new RS_ERR_CLIENT_DECODE(`prompt_logprobs${path}: ${what}`);
}
