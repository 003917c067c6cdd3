import type { StepOutputs } from '../engine/step-outputs.js';
import { combine } from '../wire/hash.js';
import { MAX_TOP_LOGPROBS } from '../wire/sampling-check.js';
import type { CandidateSet } from './candidates.js';
import { EOS_LOGIT_BEFORE_TARGET, PositionShape, type SimModel } from './model.js';
import { LOGPROB_FLOOR } from './sampler.js';
import type { Sequence } from './sequence.js';

/**
 * The prompt positions a chunk ending at `end` (tokens [0, end) computed once it ran) emits prompt
 * logprobs for: [promptLogprobsTo, min(end + 1, P)). Position p scores prompt token p from the
 * logits of position p - 1, so a chunk covers the positions one past each token it forwards (as
 * vLLM's chunked prefill does; the last chunk stops at P - 1, whose logits sample the first output
 * token). Prefix-cache hits and loaded KV before the chunk are covered too: the cursor, not the
 * chunk's start, is where they begin. The output charge (output-charge.ts) counts with this.
 */
export function newPromptPositions(seq: Sequence, end: number): number {
  if (seq.params.promptLogprobs < 0) return 0;
  return Math.max(0, Math.min(end + 1, seq.numPromptTokens) - seq.promptLogprobsTo);
}

/**
 * vLLM's prompt_logprobs k: per prompt position p >= 1, the prompt token's logprob and rank and the
 * k best candidates, under the raw model distribution (vLLM computes them from the raw logits:
 * log_softmax at temperature 1, no penalties, no truncation). That is the distribution the sampler
 * would start from at p: model.shapeAt(hash of tokens [0, p), p) with the primary EOS at its
 * background level (EOS_LOGIT_BEFORE_TARGET, as with ignore_eos: the length profile shapes
 * responses, not prompts); the other EOS ids and the non-text specials have no mass.
 *
 *   entry 0:     the prompt token, its logprob, its rank = 1 + the tokens whose logit is higher, ties
 *                counted as vLLM counts them (logprob >= the token's); a token with no mass gets
 *                the floor and rank = vocabulary size (every token's logprob is >= -inf)
 *   entries 1-k: the k best candidates in descending order, ranks 1..k
 *
 * Each position costs O(events + k) on the sampler's CandidateSet (closed-form normaliser, one
 * walk for the k best, one walk bounded by the token's logit for its rank), never O(vocabulary).
 * The set is shared with the sampler: the runner forwards a sequence before it samples it, and
 * sample() resets the set itself. Doubles stay in locals and fields of this one loop (see
 * candidates.ts on boxing).
 */
export class PromptLogprobs {
  readonly #model: SimModel;
  readonly #cs: CandidateSet;
  readonly #shape = new PositionShape();
  #topIds = new Int32Array(MAX_TOP_LOGPROBS);
  #topLogits = new Float64Array(MAX_TOP_LOGPROBS);

  constructor(model: SimModel, candidates: CandidateSet) {
    this.#model = model;
    this.#cs = candidates;
  }

  /**
   * Emits the positions newPromptPositions(seq, end) into `row` (a new row when it is -1) and
   * advances the sequence's cursor; returns the row (-1 when there was nothing to emit).
   */
  emit(seq: Sequence, end: number, row: number, out: StepOutputs): number {
    const n = newPromptPositions(seq, end);
    if (n === 0) return row;
    const k = seq.params.promptLogprobs;
    if (k > this.#topIds.length) {
      this.#topIds = new Int32Array(k);
      this.#topLogits = new Float64Array(k);
    }
    const r = row >= 0 ? row : out.addRow(seq.server, seq.slot, this.#model.weightVersion);
    const width = 1 + k;
    const from = seq.promptLogprobsTo;
    let at = out.reservePrompt(n * width);
    out.promptStart[r] = at;
    out.promptPositions[r] = n;
    out.promptFirstPos[r] = from;
    out.promptWidth[r] = width;
    out.promptLength = at + n * width;
    const tokens = seq.tokens;
    let hash = seq.promptLogprobsHash;
    for (let pos = from; pos < from + n; pos++) {
      const token = tokens[pos] as number;
      this.#position(hash, pos, token, k, out, at);
      hash = combine(hash, token);
      at += width;
    }
    seq.promptLogprobsTo = from + n;
    seq.promptLogprobsHash = hash;
    return r;
  }

  /** Writes position `pos` (context hash `hash`, prompt token `token`) from entry `at` on. */
  #position(
    hash: number,
    pos: number,
    token: number,
    k: number,
    out: StepOutputs,
    at: number,
  ): void {
    const model = this.#model;
    const cs = this.#cs;
    const shape = this.#shape;
    model.shapeAt(hash, pos, shape);
    cs.reset(shape);
    cs.events.specialLogitIn = EOS_LOGIT_BEFORE_TARGET;
    cs.events.addSpecial(model.primaryEos);
    cs.finalize();
    cs.temperature = 1;
    cs.setTemperature();
    cs.totalMass();
    // log_softmax = (logit - top) - ln(mass relative to the top), in the sampler's order of
    // operations: at temperature 1 with nothing truncated, a sampled token's logprob and the one
    // it scores as a prompt token are the same number (a trainer compares them).
    const top = cs.topLogit;
    const logMass = Math.log(cs.walkMass);
    const ids = out.promptIds;
    const logprobs = out.promptLogprobs;
    const ranks = out.promptRanks;
    cs.limitCount = k;
    cs.limitLogit = Number.NEGATIVE_INFINITY;
    cs.limitMass = Number.POSITIVE_INFINITY;
    cs.walk(this.#topIds, 0, this.#topLogits);
    const got = cs.walkCount;
    const topIds = this.#topIds;
    const topLogits = this.#topLogits;
    for (let j = 0; j < got; j++) {
      ids[at + 1 + j] = topIds[j] as number;
      logprobs[at + 1 + j] = Math.max((topLogits[j] as number) - top - logMass, LOGPROB_FLOOR);
      ranks[at + 1 + j] = j + 1;
    }
    // Fewer than k candidates only in a model with fewer than k tokens that have mass: the rest
    // is padded with no token (-1) at the floor.
    for (let j = got; j < k; j++) {
      ids[at + 1 + j] = -1;
      logprobs[at + 1 + j] = LOGPROB_FLOOR;
      ranks[at + 1 + j] = j + 1;
    }
    ids[at] = token;
    const streamRank = model.rankOfToken(token, shape);
    if (streamRank < 0 && token !== model.primaryEos) {
      logprobs[at] = LOGPROB_FLOOR; // an EOS id other than the primary, or a special: no mass
      ranks[at] = model.vocabSize;
      return;
    }
    // The token's logit, the same expression the walk computes, so the walk counts it itself.
    // Three stores, not one store of a ?: chain: the chain's value was boxed, 16 bytes a position
    // (measured with the allocation test's prompt mode).
    if (streamRank < 0) cs.limitLogit = EOS_LOGIT_BEFORE_TARGET;
    else if (streamRank === 0) cs.limitLogit = 0;
    else cs.limitLogit = -shape.topGap - (streamRank - 1) * shape.decay;
    cs.limitCount = Number.POSITIVE_INFINITY;
    cs.walk(null, 0);
    logprobs[at] = Math.max(cs.limitLogit - top - logMass, LOGPROB_FLOOR);
    ranks[at] = cs.walkCount;
  }
}
