import { LOGPROB_FLOOR, MAX_TOP_LOGPROBS } from '../wire/sampling-check.js';
import type { SamplingParams } from '../wire/types.js';
import { CandidateSet, SORT_HORIZON_RANKS } from './candidates.js';
import type { PositionShape, SimModel } from './model.js';
import type { TokenCounts } from './token-counts.js';

/** Below this temperature sampling is greedy (vLLM's _SAMPLING_EPS). */
export const GREEDY_TEMPERATURE = 1e-5;

/** Re-exported: the one floor (wire/sampling-check.ts); vLLM's processed mode has -inf there. */
export { LOGPROB_FLOOR };

/**
 * The most kept-token ids (the sampling mask) one sampled position of a request can carry, known
 * before it is sampled: top_k bounds it, else only the vocabulary does (top_p or min_p alone); 1
 * for greedy; 0 when no mask is asked or nothing truncates (see `keptCount`). The engine charges
 * each sampling sequence this much of its API server's output ring before the step.
 */
export function maxKeptIds(params: SamplingParams, vocabSize: number): number {
  if (!params.returnSamplingMask) return 0;
  if (params.temperature < GREEDY_TEMPERATURE) return 1;
  if (params.topK > 0) return Math.min(params.topK, vocabSize);
  return params.minP > 0 || params.topP < 1 ? vocabSize : 0;
}

/**
 * Absolute logit of stream rank 0. Only the repetition penalty sees absolute logits (it divides
 * positive ones and multiplies negative ones, as vLLM does); 20 sits in the range of a real LM
 * head's top logit. Everything else works on logits relative to rank 0.
 */
export const TOP_LOGIT = 20;

/**
 * The least logit margin a forced token gets over every other candidate (see Sampler.forced): a
 * position's own top gap can be 0, and a tie would leave the top to the sort.
 */
export const FORCED_MIN_GAP = 0.05;

/**
 * The sampler, in vLLM v1's order: penalties (repetition on prompt + output tokens, then frequency
 * and presence on output tokens) -> min_tokens suppression of EOS and stop ids -> temperature ->
 * min_p -> top_k -> top_p (on the renormalised top-k set) -> draw.
 *
 * Logprob: "processed" (vLLM's logprobs_mode=processed_logprobs): the log of the sampled token's
 * probability under the distribution it was actually drawn from, i.e. after penalties,
 * temperature and truncation, renormalised over the kept set. That is the behaviour policy's
 * probability an RL trainer needs for importance ratios. Greedy draws from a point mass: logprob 0,
 * kept set = {argmax}.
 *
 * Kept set (the sampling mask): the tokens top_k / top_p / min_p keep; keptCount is 0 when none of
 * them is active (the whole vocabulary is kept: the contract's "no mask at this position").
 *
 * Rank and top candidates (vLLM's sampled_token_ranks and LogprobsLists columns 1..k) are read off
 * the candidate set after the draw, under the same processed distribution; they never change it.
 *
 * Forced tokens (a scripted answer, EngineRequest.script): the position's distribution is the
 * model's with the forced token moved to the top, its logit raised (when it is not that high
 * already) to the best other candidate's plus the position's own top gap (at least
 * FORCED_MIN_GAP), as a model that means to write the script would have it. Everything after
 * that is the ordinary sampler on that distribution (penalties, min_tokens, temperature,
 * truncation); the token is its top candidate, so it is always in the kept set (the mask holds
 * it, as a client's invariants require), its rank is 1, its logprob is the top candidate's
 * processed logprob (0 when greedy) and the top candidates start with it. No draw is made.
 */
export class Sampler {
  readonly candidates: CandidateSet;
  readonly #model: SimModel;
  /** Input, set before sample(): the primary EOS id's logit from the model (length shaping). */
  eosLogit = 0;
  /** Input, set before sample(): the uniform in [0, 1) for this (request seed, position). */
  uniform = 0;
  /** Input, set before sample(): the token id the position emits (see the class comment); -1 none. */
  forced = -1;
  /** Output: the token drawn. */
  token = -1;
  /**
   * Output: its processed logprob (see the class comment), in a one-slot typed array rather than
   * a field: reading a double field from another object boxed it in the engine's loop (measured
   * 5.8 bytes of garbage per token); a typed-array element never is.
   */
  readonly logprobOut = new Float64Array(1);
  /** Output: size of the kept set, or 0 when no truncation applied. */
  keptCount = 0;
  /**
   * Output: the token's 1-based position in the candidates' descending order (1 = the most
   * likely; 1 for greedy). The final walk ends on the drawn token, so this is its walkCount.
   * vLLM counts the tokens whose logprob is >= the token's (ops/logprobs.py): the same number
   * unless two candidates' logits tie exactly.
   */
  rank = 0;
  #keptLogitFloor = Number.NEGATIVE_INFINITY;
  /** The draw's kept mass and temperature (1 and 1 for greedy's point mass), for writeTop(). */
  #keptMass = 1;
  #temperature = 1;
  #topIds = new Int32Array(MAX_TOP_LOGPROBS);
  #topLogits = new Float64Array(MAX_TOP_LOGPROBS);

  /** @param sortHorizon see CandidateSet (tests lower it) */
  constructor(model: SimModel, sortHorizon = SORT_HORIZON_RANKS) {
    this.#model = model;
    this.candidates = new CandidateSet(model, sortHorizon);
  }

  /** The last draw's logprob (convenience for tests; the engine reads logprobOut). */
  get logprob(): number {
    return this.logprobOut[0] as number;
  }

  /**
   * Draws the next token. Doubles come in through `eosLogit` and `uniform` (fields, not
   * arguments: see candidates.ts on boxing).
   * @param counts the sequence's token counts when it asked for a penalty, else null
   * @param suppressStops min_tokens not reached yet: EOS and stop ids get no mass
   */
  sample(
    shape: PositionShape,
    params: SamplingParams,
    counts: TokenCounts | null,
    suppressStops: boolean,
  ): void {
    const cs = this.candidates;
    const model = this.#model;
    cs.reset(shape);
    let eosSeen = false;
    if (counts !== null) eosSeen = this.#addPenalised(shape, params, counts, suppressStops);
    const ev = cs.events;
    if (!eosSeen && !suppressStops) {
      ev.specialLogitIn = this.eosLogit;
      ev.addSpecial(model.primaryEos);
    }
    if (suppressStops) this.#addStopHoles(shape, params.stopTokenIds, counts);
    if (this.forced >= 0) this.#addForced(shape);
    cs.finalize();
    this.#decide(params);
  }

  /** Writes the kept set (keptCount ids, descending probability) into out from `at`. */
  writeKept(out: Int32Array, at: number): void {
    if (this.keptCount === 0) return;
    const cs = this.candidates;
    cs.limitCount = this.keptCount;
    cs.limitLogit = this.#keptLogitFloor;
    cs.limitMass = Number.POSITIVE_INFINITY;
    cs.walk(out, at);
  }

  /**
   * Writes the k most likely candidates (descending) into ids and their logprobs into logprobs,
   * from `at`; returns how many (fewer than k only when the position has fewer candidates). The
   * logprobs are the draw's: (logit - top) / T - ln(kept mass) inside the kept set, the floor
   * outside it; greedy's point mass gives the top token 0 and every other the floor. The sampled
   * token is among them when its rank is <= k (as in vLLM), with the very logprob it was given.
   */
  writeTop(ids: Int32Array, logprobs: Float32Array, at: number, k: number): number {
    if (k > this.#topIds.length) {
      this.#topIds = new Int32Array(k);
      this.#topLogits = new Float64Array(k);
    }
    const cs = this.candidates;
    cs.limitCount = k;
    cs.limitLogit = Number.NEGATIVE_INFINITY;
    cs.limitMass = Number.POSITIVE_INFINITY;
    cs.walk(this.#topIds, 0, this.#topLogits);
    const n = cs.walkCount;
    // The first `inside` of them are in the kept set (all of them when nothing truncated). Split
    // loops, not an `inside ? logprob : floor` per item: that choice allocated 20 bytes per token
    // in the engine's loop (measured with the allocation test's top mode); these allocate none.
    const inside = this.keptCount === 0 ? n : Math.min(this.keptCount, n);
    const top = cs.topLogit;
    const t = this.#temperature;
    const logMass = Math.log(this.#keptMass);
    const topIds = this.#topIds;
    const topLogits = this.#topLogits;
    for (let j = 0; j < n; j++) ids[at + j] = topIds[j] as number;
    for (let j = 0; j < inside; j++) {
      const lp = ((topLogits[j] as number) - top) / t - logMass;
      logprobs[at + j] = Math.max(lp, LOGPROB_FLOOR);
    }
    for (let j = inside; j < n; j++) logprobs[at + j] = LOGPROB_FLOOR;
    return n;
  }

  #decide(params: SamplingParams): void {
    const cs = this.candidates;
    const t = params.temperature;
    if (t < GREEDY_TEMPERATURE) {
      cs.temperature = 1;
      cs.setTemperature();
      this.token = cs.topId;
      this.logprobOut[0] = 0;
      this.keptCount = 1;
      this.rank = 1;
      this.#keptLogitFloor = Number.NEGATIVE_INFINITY;
      this.#keptMass = 1;
      this.#temperature = 1;
      return;
    }
    cs.temperature = t;
    cs.setTemperature();
    // min_p keeps p >= min_p * p_max, i.e. logit >= top + T * ln(min_p).
    cs.limitLogit = params.minP > 0 ? cs.topLogit + t * Math.log(params.minP) : -Infinity;
    cs.limitCount = params.topK > 0 ? params.topK : Number.POSITIVE_INFINITY;
    cs.limitMass = Number.POSITIVE_INFINITY;
    if (params.topK > 0 || params.minP > 0) {
      cs.walk(null, 0);
    } else {
      // Everything is kept so far: its mass in closed form, without walking the vocabulary.
      cs.totalMass();
      cs.walkCount = Number.POSITIVE_INFINITY;
    }
    let keptMass = cs.walkMass;
    if (params.topP < 1) {
      // vLLM keeps a token while the mass strictly above it is < top_p (of the top-k set).
      cs.limitCount = cs.walkCount;
      cs.limitMass = params.topP * keptMass;
      cs.walk(null, 0);
      keptMass = cs.walkMass;
    }
    const kept = cs.walkCount;
    if (this.forced >= 0) {
      // The forced token is the top candidate (#addForced): taken as a draw that stops at once,
      // its logprob as writeTop() writes the top's (0 - ln 1 is +0, where -ln 1 would be -0).
      this.token = cs.topId;
      this.logprobOut[0] = 0 - Math.log(keptMass);
      this.rank = 1;
    } else {
      cs.limitCount = kept;
      cs.limitMass = this.uniform * keptMass;
      cs.walk(null, 0);
      if (cs.walkCount === 0) {
        this.token = cs.topId;
        this.logprobOut[0] = -Math.log(keptMass);
        this.rank = 1;
      } else {
        this.token = cs.lastId;
        this.logprobOut[0] = (cs.lastLogit - cs.topLogit) / t - Math.log(keptMass);
        this.rank = cs.walkCount;
      }
    }
    const truncated = params.topK > 0 || params.minP > 0 || params.topP < 1;
    // Greedy keeps exactly one; otherwise 0 means "no truncation: the whole vocabulary".
    this.keptCount = truncated ? kept : 0;
    this.#keptLogitFloor = cs.limitLogit;
    this.#keptMass = keptMass;
    this.#temperature = t;
  }

  /**
   * Moves the forced token to the top (see the class comment): its own special's logit is raised
   * when it has one (EOS, a penalised token), else it becomes a special, its stream rank a hole
   * (unless a hole already: a suppressed stop id). Any id in the vocabulary can be forced, one
   * with no mass of its own too (another EOS id, a non-text special, a suppressed one).
   */
  #addForced(shape: PositionShape): void {
    const ev = this.candidates.events;
    const id = this.forced;
    const rank = this.#model.rankOfToken(id, shape);
    const hole = rank >= 0 && hasHole(ev.holes, ev.numHoles, rank);
    // The best other candidate's logit, or a bound above it: the stream's top (rank 1's when the
    // token is rank 0; holes only lower it), then every other special. The token's own logit:
    // its special's, its stream rank's, or none (no mass).
    let best = rank === 0 ? -shape.topGap : 0;
    let own = Number.NEGATIVE_INFINITY;
    if (rank === 0 && !hole) own = 0;
    else if (rank > 0 && !hole) own = -shape.topGap - (rank - 1) * shape.decay;
    let special = -1;
    for (let i = 0; i < ev.numSpecials; i++) {
      const logit = ev.specialLogit[i] as number;
      if (ev.specialId[i] === id) {
        special = i;
        own = logit;
      } else if (logit > best) best = logit;
    }
    // Raised to a margin over the rest when it is not that far on top already (then it keeps
    // the model's own distribution: the script says what the model would have).
    ev.specialLogitIn = Math.max(own, best + Math.max(shape.topGap, FORCED_MIN_GAP));
    if (special >= 0) {
      ev.specialLogit[special] = ev.specialLogitIn;
      return;
    }
    if (rank >= 0 && !hole) ev.addHole(rank);
    ev.addSpecial(id);
  }

  /** min_tokens not reached: stop ids get no mass. Holes stay distinct (totalMass needs it). */
  #addStopHoles(shape: PositionShape, stops: Int32Array, counts: TokenCounts | null): void {
    const model = this.#model;
    for (let i = 0; i < stops.length; i++) {
      const id = stops[i] as number;
      if (id < 0 || id >= model.vocabSize || isStopId(stops, id, i)) continue;
      if (counts !== null && counts.indexOf(id) >= 0) continue; // a hole already
      const rank = model.rankOfToken(id, shape);
      if (rank >= 0) this.candidates.events.addHole(rank);
    }
  }

  /**
   * Turns every token the sequence has seen into a special with its penalised logit (and a hole
   * at its stream rank). Returns whether the primary EOS was among them.
   */
  #addPenalised(
    shape: PositionShape,
    params: SamplingParams,
    counts: TokenCounts,
    suppressStops: boolean,
  ): boolean {
    const cs = this.candidates;
    const model = this.#model;
    const rp = params.repetitionPenalty;
    const freq = params.frequencyPenalty;
    const presence = params.presencePenalty;
    let eosSeen = false;
    for (let k = 0; k < counts.size; k++) {
      const id = counts.ids[k] as number;
      const rank = model.rankOfToken(id, shape);
      let base: number;
      if (rank < 0) {
        if (id !== model.primaryEos) continue; // the other EOS ids have no mass at all
        eosSeen = true;
        if (suppressStops) continue;
        base = this.eosLogit;
      } else {
        cs.events.addHole(rank);
        if (suppressStops && isStopId(params.stopTokenIds, id, params.stopTokenIds.length))
          continue;
        base = rank === 0 ? 0 : -shape.topGap - (rank - 1) * shape.decay;
      }
      const seen = counts.outputCount[k] as number;
      let logit = TOP_LOGIT + base;
      if (rp !== 1 && (seen > 0 || counts.inPrompt[k] === 1)) {
        logit = logit > 0 ? logit / rp : logit * rp;
      }
      logit -= freq * seen;
      if (seen > 0) logit -= presence;
      cs.events.specialLogitIn = logit - TOP_LOGIT;
      cs.events.addSpecial(id);
    }
    return eosSeen;
  }
}

/** Whether rank is among holes[0 .. n) (unsorted before finalize()). */
function hasHole(holes: Int32Array, n: number, rank: number): boolean {
  for (let i = 0; i < n; i++) if (holes[i] === rank) return true;
  return false;
}

/** Whether id is among stops[0 .. end). */
function isStopId(stops: Int32Array, id: number, end: number): boolean {
  for (let i = 0; i < end; i++) if (stops[i] === id) return true;
  return false;
}
