import type { PositionShape, SimModel } from '../../src/sim/model.js';
import { TOP_LOGIT } from '../../src/sim/sampler.js';
import { TokenCounts } from '../../src/sim/token-counts.js';
import type { SamplingParams } from '../../src/wire/types.js';
import { params } from './helpers.js';

/**
 * The sampler's semantics recomputed the slow, obvious way over a whole (tiny) vocabulary,
 * following vLLM v1's definitions: dense logits after penalties and suppression, the kept set,
 * and the cases the sampler tests walk through.
 */

export interface Dense {
  /** Kept ids in descending probability. */
  kept: number[];
  /** Probability of each kept id after renormalising over the kept set. */
  keptProb: number[];
  /** Probabilities over the top-k/min-p set (what top_p is measured against). */
  massBeforeTopP: number;
}

export function denseLogits(
  model: SimModel,
  shape: PositionShape,
  eosLogit: number,
  p: SamplingParams,
  counts: TokenCounts | null,
  suppress: boolean,
): Float64Array {
  const logits = new Float64Array(model.vocabSize);
  for (let id = 0; id < model.vocabSize; id++) {
    let l: number;
    if (id === model.primaryEos) l = eosLogit;
    else if (model.isEos(id)) l = -Infinity;
    else if (model.rankOfToken(id, shape) < 0)
      l = -Infinity; // special: never sampled
    else l = model.logitAtRank(model.rankOfToken(id, shape), shape);
    if (suppress && (id === model.primaryEos || p.stopTokenIds.includes(id))) l = -Infinity;
    if (counts !== null && l > -Infinity) {
      const k = counts.indexOf(id);
      if (k >= 0) {
        const seen = counts.outputCount[k] as number;
        let abs = TOP_LOGIT + l;
        if (p.repetitionPenalty !== 1 && (seen > 0 || counts.inPrompt[k] === 1)) {
          abs = abs > 0 ? abs / p.repetitionPenalty : abs * p.repetitionPenalty;
        }
        abs -= p.frequencyPenalty * seen;
        if (seen > 0) abs -= p.presencePenalty;
        l = abs - TOP_LOGIT;
      }
    }
    logits[id] = l;
  }
  return logits;
}

export function denseKept(logits: Float64Array, p: SamplingParams): Dense {
  const ids = Array.from(logits.keys()).filter((id) => (logits[id] as number) > -Infinity);
  ids.sort((a, b) => (logits[b] as number) - (logits[a] as number));
  const top = logits[ids[0] as number] as number;
  const w = (id: number): number => Math.exp(((logits[id] as number) - top) / p.temperature);
  let set = ids;
  if (p.minP > 0) set = set.filter((id) => w(id) >= p.minP);
  if (p.topK > 0) set = set.slice(0, p.topK);
  const z = set.reduce((s, id) => s + w(id), 0);
  if (p.topP < 1) {
    const keep: number[] = [];
    let before = 0;
    for (const id of set) {
      if (before >= p.topP * z) break;
      keep.push(id);
      before += w(id);
    }
    set = keep;
  }
  const zk = set.reduce((s, id) => s + w(id), 0);
  return { kept: set, keptProb: set.map((id) => w(id) / zk), massBeforeTopP: z };
}

export interface Case {
  p: SamplingParams;
  counts: TokenCounts | null;
  suppress: boolean;
}

export function cases(): Case[] {
  const out: Case[] = [];
  const temps = [0.3, 0.7, 1, 1.6];
  const topKs = [0, 1, 7, 60];
  const topPs = [1, 0.97, 0.6];
  const minPs = [0, 0.02];
  for (const temperature of temps)
    for (const topK of topKs)
      for (const topP of topPs)
        for (const minP of minPs)
          out.push({ p: params({ temperature, topK, topP, minP }), counts: null, suppress: false });
  // Penalties over a sequence that has seen some tokens (and EOS), and min_tokens suppression.
  const counts = new TokenCounts(8);
  for (const id of [5, 17, 17, 300, 998, 999]) counts.addOutput(id);
  for (const id of [5, 6, 7, 400]) counts.addPrompt(id);
  const stops = Int32Array.from([6, 17, 450]);
  for (const [pres, freq, rep] of [
    [0.5, 0.2, 1.3],
    [-1.5, -0.5, 0.7],
    [0, 0, 2],
  ] as const) {
    for (const suppress of [false, true]) {
      out.push({
        p: params({
          presencePenalty: pres,
          frequencyPenalty: freq,
          repetitionPenalty: rep,
          topK: 40,
          topP: 0.9,
          stopTokenIds: stops,
        }),
        counts,
        suppress,
      });
      out.push({
        p: params({
          presencePenalty: pres,
          frequencyPenalty: freq,
          repetitionPenalty: rep,
          topK: 0,
          topP: 1,
          temperature: 0.8,
          stopTokenIds: stops,
        }),
        counts,
        suppress,
      });
    }
  }
  return out;
}
