import { CandidateEvents } from './candidate-events.js';
import type { PositionShape, SimModel } from './model.js';

/**
 * The candidates of one position in descending logit order, walked lazily: the model's ranked
 * stream (closed-form logits, see model.ts) merged with "specials" (tokens whose logit was moved:
 * EOS, penalised tokens) and minus "holes" (stream ranks that are a special, or suppressed).
 *
 *   stream ranks:  0 | 1 2 3 ... a-1 | (hole a) | a+1 ... b | <special s> | b+1 ... V'-1
 *                  each run between two events is a geometric series: its mass, the number of its
 *                  items above a logit, and the item where a running mass crosses a target are all
 *                  closed forms, so a walk costs O(events passed + items written out), not
 *                  O(vocabulary). Events below SORT_HORIZON_RANKS are sorted only if a walk gets
 *                  there (candidate-events.ts).
 *
 * A walk starts at the top and takes items while all hold: fewer than `limitCount` taken, logit
 * >= `limitLogit`, mass taken so far < `limitMass`. Masses are exp((logit - ref) / T): relative to
 * the top item, after temperature. The sampler builds top-k / min-p / top-p and the draw from walks.
 *
 * Doubles go in and out through fields, not arguments or return values: V8 boxes a double passed
 * to (or returned from) a function it did not inline, which cost garbage per token (measured with
 * the sampling heap profiler); a store into a double field is in place.
 */
export const SORT_HORIZON_RANKS = 2048;

export class CandidateSet {
  readonly #model: SimModel;
  readonly #horizon: number;
  #shape: PositionShape | null = null;
  readonly events = new CandidateEvents();
  #invT = 1;
  #ref = 0;
  /** Temperature for masses (set before setTemperature()); masses are relative to the top item. */
  temperature = 1;
  /** Limits of the next walk (see the class comment). */
  limitCount = 0;
  limitLogit = 0;
  limitMass = 0;
  /** Results of the last walk. */
  walkCount = 0;
  walkMass = 0;
  lastId = -1;
  lastLogit = 0;
  /** The top item (after finalize()). */
  topId = -1;
  topLogit = 0;

  /** @param sortHorizon ranks whose events are sorted up front (tests lower it to exercise laziness) */
  constructor(model: SimModel, sortHorizon = SORT_HORIZON_RANKS) {
    this.#model = model;
    this.#horizon = sortHorizon;
  }

  /** Starts a new position; then add events through `events`, then finalize(). */
  reset(shape: PositionShape): void {
    this.#shape = shape;
    this.events.reset();
  }

  /** Sorts the events above the horizon and finds the top item. */
  finalize(): void {
    const shape = this.#shape as PositionShape;
    const size = this.#model.streamSize;
    const ev = this.events;
    const horizon = Math.min(this.#horizon, size);
    ev.horizonLogit =
      horizon >= size ? Number.NEGATIVE_INFINITY : -shape.topGap - (horizon - 1) * shape.decay;
    ev.sortAbove(horizon);
    // Nothing below the horizon: everything is sorted, so a walk's geometric runs may go on to
    // the stream's end. Left at the horizon, a walk past it (a prompt token's rank, deep in a
    // 150k vocabulary) took one rank per iteration.
    if (!ev.hasUnsorted) {
      ev.horizonRank = size;
      ev.horizonLogit = Number.NEGATIVE_INFINITY;
    }
    let r = this.#firstRankFrom(0, 0);
    if (r >= ev.horizonRank && ev.hasUnsorted) {
      ev.sortRest(size);
      r = this.#firstRankFrom(0, 0);
    }
    const streamLogit = r >= size ? -Infinity : r === 0 ? 0 : -shape.topGap - (r - 1) * shape.decay;
    const o = ev.sortedSpecials > 0 ? (ev.order[0] as number) : -1;
    const spLogit = o >= 0 ? (ev.specialLogit[o] as number) : -Infinity;
    if (o >= 0 && spLogit >= streamLogit) {
      this.topId = ev.specialId[o] as number;
      this.topLogit = spLogit;
    } else {
      this.topId = this.#model.tokenAtRank(r, shape);
      this.topLogit = streamLogit;
    }
  }

  setTemperature(): void {
    this.#invT = 1 / this.temperature;
    this.#ref = this.topLogit;
  }

  /** Sets walkMass to the mass of every candidate, in closed form (no walk, no sort). */
  totalMass(): void {
    const shape = this.#shape as PositionShape;
    const size = this.#model.streamSize;
    const ev = this.events;
    const invT = this.#invT;
    const ref = this.#ref;
    const step = shape.decay * invT;
    let mass = Math.exp(-ref * invT);
    if (size > 1) {
      const a = Math.exp((-shape.topGap - ref) * invT);
      mass += (a * Math.expm1(-(size - 1) * step)) / Math.expm1(-step);
    }
    for (let i = 0; i < ev.numHoles; i++) {
      const r = ev.holes[i] as number;
      const l = r === 0 ? 0 : -shape.topGap - (r - 1) * shape.decay;
      mass -= Math.exp((l - ref) * invT);
    }
    for (let i = 0; i < ev.numSpecials; i++) {
      mass += Math.exp(((ev.specialLogit[i] as number) - ref) * invT);
    }
    this.walkMass = mass;
  }

  /**
   * Walks from the top within limitCount / limitLogit / limitMass. Writes the ids taken into
   * `emit` from `at` when given, and their logits (relative to stream rank 0, as topLogit) into
   * `emitLogits` from `at` when given. Sets walkCount, walkMass and lastId/lastLogit (the last
   * taken). One loop on purpose: its state is doubles, which helper calls would box (see above).
   */
  walk(emit: Int32Array | null, at: number, emitLogits: Float64Array | null = null): void {
    const cap = this.limitCount;
    const minLogit = this.limitLogit;
    const massTarget = this.limitMass;
    const model = this.#model;
    const shape = this.#shape as PositionShape;
    const streamSize = model.streamSize;
    const ev = this.events;
    const invT = this.#invT;
    const ref = this.#ref;
    const decay = shape.decay;
    let count = 0;
    let mass = 0;
    let r = 0;
    let hi = 0;
    let si = 0;
    while (count < cap && mass < massTarget) {
      r = this.#firstRankFrom(r, hi);
      if (r >= ev.horizonRank && ev.hasUnsorted) {
        ev.sortRest(streamSize); // rare: the walk got past the sorted events
        continue;
      }
      const holes = ev.holes;
      while (hi < ev.sortedHoles && (holes[hi] as number) < r) hi++;
      const streamLogit =
        r >= streamSize ? -Infinity : r === 0 ? 0 : -shape.topGap - (r - 1) * decay;
      const o = si < ev.sortedSpecials ? (ev.order[si] as number) : -1;
      const spLogit = o >= 0 ? (ev.specialLogit[o] as number) : -Infinity;
      if (o >= 0 && spLogit >= streamLogit) {
        if (spLogit < minLogit) break;
        const id = ev.specialId[o] as number;
        if (emit !== null) emit[at + count] = id;
        if (emitLogits !== null) emitLogits[at + count] = spLogit;
        count++;
        mass += Math.exp((spLogit - ref) * invT);
        this.lastId = id;
        this.lastLogit = spLogit;
        si++;
        continue;
      }
      if (r >= streamSize || streamLogit < minLogit) break;
      let n = 1;
      if (r > 0) {
        // A geometric run from rank r: bounded by the next hole (or the horizon), the next
        // special's logit, the cap, minLogit and the mass target; at least this item is taken.
        n = (hi < ev.sortedHoles ? (holes[hi] as number) : ev.horizonRank) - r;
        n = Math.min(n, cap - count);
        if (o >= 0) n = Math.min(n, Math.ceil((streamLogit - spLogit) / decay));
        if (minLogit > -Infinity) n = Math.min(n, Math.floor((streamLogit - minLogit) / decay) + 1);
        const a = Math.exp((streamLogit - ref) * invT);
        const step = decay * invT;
        if (massTarget < Infinity) {
          const x = 1 + ((massTarget - mass) * Math.expm1(-step)) / a;
          if (x > 0) n = Math.min(n, Math.ceil(Math.log(x) / -step));
        }
        if (!(n >= 1)) n = 1;
        mass += (a * Math.expm1(-n * step)) / Math.expm1(-step);
      } else {
        mass += Math.exp((streamLogit - ref) * invT);
      }
      if (emit !== null) this.#emitRun(r, n, emit, at + count);
      if (emitLogits !== null) this.#emitRunLogits(r, n, emitLogits, at + count);
      count += n;
      r += n;
      this.lastId = model.tokenAtRank(r - 1, shape);
      this.lastLogit = r === 1 ? 0 : -shape.topGap - (r - 2) * decay;
    }
    this.walkCount = count;
    this.walkMass = mass;
  }

  /** The first stream rank >= r that is not a (sorted) hole, scanning holes from index hi. */
  #firstRankFrom(r: number, hi: number): number {
    const ev = this.events;
    const holes = ev.holes;
    const nh = ev.sortedHoles;
    let rank = r;
    let h = hi;
    for (;;) {
      while (h < nh && (holes[h] as number) < rank) h++;
      if (h < nh && holes[h] === rank) rank++;
      else return rank;
    }
  }

  /**
   * Writes the logits of stream ranks [r, r + n) into out from `at`: the same expression as
   * lastLogit's, so a logit written here equals the one the draw saw, bit for bit.
   */
  #emitRunLogits(r: number, n: number, out: Float64Array, at: number): void {
    const shape = this.#shape as PositionShape;
    for (let i = 0; i < n; i++) {
      const q = r + i;
      out[at + i] = q === 0 ? 0 : -shape.topGap - (q - 1) * shape.decay;
    }
  }

  /** Writes the ids of stream ranks [r, r + n) (no holes inside) into out from `at`. */
  #emitRun(r: number, n: number, out: Int32Array, at: number): void {
    const shape = this.#shape as PositionShape;
    const size = this.#model.streamSize;
    const eos = this.#model.eosSorted;
    const mul = shape.permMul;
    let j = (mul * r + shape.permAdd) % size;
    for (let i = 0; i < n; i++) {
      let id = j;
      for (let e = 0; e < eos.length; e++) if (id >= (eos[e] as number)) id++;
      out[at + i] = id;
      j += mul;
      if (j >= size) j -= size;
    }
  }
}
