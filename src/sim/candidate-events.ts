import { sortIndicesByKeyDescending, sortInt32Ascending } from './sort.js';

/**
 * The events of one position's candidate stream (see candidates.ts): "specials", tokens with an
 * explicit logit (EOS, penalised tokens), and "holes", stream ranks to skip (a special's own rank,
 * a suppressed stop id). Walks need both in order, specials by descending logit and holes by
 * ascending rank, but they almost never get past the first few hundred ranks, while a penalised
 * sequence can have thousands of events. So only the events above a horizon are sorted up front:
 *
 *   specials: order[0 .. sortedSpecials)  sorted, every logit >= horizonLogit
 *             order[sortedSpecials .. n)   unsorted, every logit <  horizonLogit
 *   holes:    holes[0 .. sortedHoles)      sorted, every rank <  horizonRank
 *             holes[sortedHoles .. n)      unsorted, every rank >= horizonRank
 *
 * with horizonLogit = the stream's logit at horizonRank. A walk that reaches horizonRank calls
 * sortRest() and continues; that is rare and costs one full sort.
 */
export class CandidateEvents {
  specialId: Int32Array = new Int32Array(16);
  specialLogit: Float64Array = new Float64Array(16);
  /** Indices into specialId/specialLogit, in walk order up to sortedSpecials. */
  order: Int32Array = new Int32Array(16);
  numSpecials = 0;
  sortedSpecials = 0;
  /** Distinct stream ranks. */
  holes: Int32Array = new Int32Array(16);
  numHoles = 0;
  sortedHoles = 0;
  /** Ranks below this have their holes sorted; the stream size once everything is sorted. */
  horizonRank = 0;
  /** Specials at or above this logit are sorted; -Infinity once everything is sorted. */
  horizonLogit = Number.NEGATIVE_INFINITY;
  /** Input of addSpecial() (a double through a field, not an argument: see candidates.ts). */
  specialLogitIn = 0;

  reset(): void {
    this.numSpecials = 0;
    this.numHoles = 0;
  }

  /** A token with logit `specialLogitIn` (relative to stream rank 0). */
  addSpecial(id: number): void {
    const n = this.numSpecials;
    if (n === this.specialId.length) {
      this.specialId = grownInt32(this.specialId, n * 2);
      this.specialLogit = grownFloat64(this.specialLogit, n * 2);
      this.order = new Int32Array(n * 2);
    }
    this.specialId[n] = id;
    this.specialLogit[n] = this.specialLogitIn;
    this.numSpecials = n + 1;
  }

  /** A stream rank to skip; the caller keeps holes distinct. */
  addHole(rank: number): void {
    if (this.numHoles === this.holes.length) this.holes = grownInt32(this.holes, this.numHoles * 2);
    this.holes[this.numHoles++] = rank;
  }

  get hasUnsorted(): boolean {
    return this.sortedSpecials < this.numSpecials || this.sortedHoles < this.numHoles;
  }

  /**
   * Partitions the events at the horizon (rank `rank`, whose stream logit is in horizonLogit,
   * set by the caller first) and sorts the part above it.
   */
  sortAbove(rank: number): void {
    this.horizonRank = rank;
    const cut = this.horizonLogit;
    const order = this.order;
    const logits = this.specialLogit;
    let lo = 0;
    for (let i = 0; i < this.numSpecials; i++) {
      if ((logits[i] as number) >= cut) order[lo++] = i;
    }
    let hi = lo;
    for (let i = 0; i < this.numSpecials; i++) {
      if ((logits[i] as number) < cut) order[hi++] = i;
    }
    this.sortedSpecials = lo;
    sortIndicesByKeyDescending(order, logits, this.specialId, lo);
    const holes = this.holes;
    let front = 0;
    for (let i = 0; i < this.numHoles; i++) {
      const h = holes[i] as number;
      if (h < rank) {
        holes[i] = holes[front] as number;
        holes[front++] = h;
      }
    }
    this.sortedHoles = front;
    sortInt32Ascending(holes, front);
  }

  /** Sorts everything (the walk reached the horizon). */
  sortRest(streamSize: number): void {
    const ns = this.numSpecials;
    for (let i = 0; i < ns; i++) this.order[i] = i;
    sortIndicesByKeyDescending(this.order, this.specialLogit, this.specialId, ns);
    sortInt32Ascending(this.holes, this.numHoles);
    this.sortedSpecials = ns;
    this.sortedHoles = this.numHoles;
    this.horizonRank = streamSize;
    this.horizonLogit = Number.NEGATIVE_INFINITY;
  }
}

function grownInt32(a: Int32Array, n: number): Int32Array {
  const b = new Int32Array(n);
  b.set(a);
  return b;
}

function grownFloat64(a: Float64Array, n: number): Float64Array {
  const b = new Float64Array(n);
  b.set(a);
  return b;
}
