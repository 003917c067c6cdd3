import { EOS_LOGIT_BEFORE_TARGET, PositionShape, type SimModel } from '../../src/sim/model.js';
import { LOGPROB_FLOOR } from '../../src/sim/sampler.js';
import { Sequence } from '../../src/sim/sequence.js';
import { denseLogits } from './dense-reference.js';
import { params, request } from './helpers.js';

/**
 * Prompt logprobs recomputed the slow, obvious way (vLLM's definition): log_softmax at temperature
 * 1 over the raw logits of the whole (tiny) vocabulary at position p, the prompt token's rank the
 * count of tokens whose logprob is >= its own, the k best in descending order with ranks 1..k.
 */
export interface PromptPosition {
  ids: number[];
  logprobs: number[];
  ranks: number[];
}

/** The context hash of tokens[0 .. p), as the engine's sequence folds it (adapter key included). */
export function contextHashOf(tokens: Int32Array, p: number, adapterKey = 0): number {
  const req = request(0, {}, { promptTokenIds: tokens.subarray(0, p) });
  return new Sequence(0, req, 1, adapterKey).contextHash;
}

export function densePromptPosition(
  model: SimModel,
  tokens: Int32Array,
  p: number,
  k: number,
  adapterKey = 0,
): PromptPosition {
  const shape = new PositionShape();
  model.shapeAt(contextHashOf(tokens, p, adapterKey), p, shape);
  const raw = params({ temperature: 1, topK: 0, topP: 1, minP: 0 });
  const logits = denseLogits(model, shape, EOS_LOGIT_BEFORE_TARGET, raw, null, false);
  let max = Number.NEGATIVE_INFINITY;
  for (const l of logits) max = Math.max(max, l);
  let z = 0;
  for (const l of logits) z += Math.exp(l - max);
  const logZ = max + Math.log(z);
  const lp = Array.from(logits, (l) => l - logZ);
  const order = Array.from(logits.keys()).filter((id) => (lp[id] as number) > -Infinity);
  order.sort((a, b) => (lp[b] as number) - (lp[a] as number));
  const token = tokens[p] as number;
  const own = lp[token] as number;
  const rank = lp.filter((v) => v >= own).length;
  const top = order.slice(0, k);
  return {
    ids: [token, ...top],
    logprobs: [own, ...top.map((id) => lp[id] as number)].map((v) => Math.max(v, LOGPROB_FLOOR)),
    ranks: [rank, ...top.map((_, j) => j + 1)],
  };
}
