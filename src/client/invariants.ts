import { RS_ERR_CLIENT_INVARIANT } from '../errors.js';
import type { DecodedChoice, GenerateResult } from './decode.js';

/**
 * The invariants of a generate answer (docs/contract.md), checked on decoded typed arrays: every
 * per-token array has one entry per completion token; the CSR mask's counts sum to its ids; each
 * non-empty mask row holds the token sampled there; logprobs lie in [-9999, 0]; routing rows end at
 * the last forwarded position, so `start = len(prompt) + len(completion) - 1 - rows`; usage adds up.
 * Throws RS_ERR_CLIENT_INVARIANT describing the first violation.
 */
export function checkInvariants(result: GenerateResult, promptLen: number): void {
  let completion = 0;
  for (const c of result.choices) {
    checkChoice(c, promptLen);
    completion += c.tokenIds.length;
  }
  const u = result.usage;
  if (u === null) return;
  const fail = (what: string): never => {
    throw new RS_ERR_CLIENT_INVARIANT(`usage: ${what}`);
  };
  if (u.promptTokens !== promptLen)
    fail(`prompt_tokens ${u.promptTokens}, prompt has ${promptLen}`);
  if (u.completionTokens !== completion) {
    fail(`completion_tokens ${u.completionTokens}, choices hold ${completion} tokens`);
  }
  if (u.totalTokens !== u.promptTokens + u.completionTokens) fail(`total_tokens ${u.totalTokens}`);
}

const FINISH_REASONS = new Set(['stop', 'length', 'abort']);

function checkChoice(c: DecodedChoice, promptLen: number): void {
  const n = c.tokenIds.length;
  const fail = (what: string): never => {
    throw new RS_ERR_CLIENT_INVARIANT(`choice ${c.index}: ${what}`);
  };
  if (c.finishReason !== null && !FINISH_REASONS.has(c.finishReason)) {
    fail(`finish_reason ${c.finishReason}`);
  }
  if (c.logprobs !== null) {
    if (c.logprobs.length !== n) fail(`${c.logprobs.length} logprobs for ${n} tokens`);
    for (let i = 0; i < n; i++) {
      const lp = c.logprobs[i] as number;
      if (!(lp <= 0 && lp >= -9999)) fail(`logprob ${lp} at ${i} is not in [-9999, 0]`);
    }
  }
  if (c.mask !== null) checkMask(c.mask.counts, c.mask.ids, c.tokenIds, fail);
  if (c.weightVersions !== null && c.weightVersions.length !== n) {
    fail(`${c.weightVersions.length} weight versions for ${n} tokens`);
  }
  const r = c.routedExperts;
  if (r !== null) {
    const [rows, layers, topk] = r.shape;
    if (r.data.length !== rows * layers * topk)
      fail(`routing has ${r.data.length} ids for shape [${r.shape}]`);
    const start = promptLen + n - 1 - rows;
    if (r.start !== start) {
      fail(`routing start ${r.start}, expected ${promptLen} + ${n} - 1 - ${rows} = ${start}`);
    }
  }
}

function checkMask(
  counts: Int32Array,
  ids: Int32Array,
  tokens: Int32Array,
  fail: (what: string) => never,
): void {
  if (counts.length !== tokens.length)
    fail(`${counts.length} mask counts for ${tokens.length} tokens`);
  let at = 0;
  for (let i = 0; i < counts.length; i++) {
    const count = counts[i] as number;
    if (count < 0) fail(`mask count ${count} at ${i}`);
    if (at + count > ids.length) fail(`mask counts run past the ${ids.length} ids at ${i}`);
    if (count > 0) {
      const token = tokens[i] as number;
      let found = false;
      for (let k = at; k < at + count && !found; k++) found = ids[k] === token;
      if (!found) fail(`mask row ${i} does not hold its sampled token ${token}`);
    }
    at += count;
  }
  if (at !== ids.length) fail(`mask counts sum to ${at} but there are ${ids.length} ids`);
}
