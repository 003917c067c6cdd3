import { RS_ERR_SERVER_INTERNAL } from '../errors.js';
import { combine, mix32, UINT32_TO_UNIT } from '../wire/hash.js';
import type { ModelPreset } from './presets.js';

/**
 * The simulated model: the next-token distribution at a position, as a deterministic function of
 * (model seed, weight version, context hash, position), in O(1) whatever the vocabulary.
 *
 * Shape. All non-EOS text tokens (ids below the card's textVocabSize: never a special token nor
 * one the tokenizer cannot decode) form a ranked "stream": rank r has logit (relative to rank 0)
 *   L(0) = 0,   L(r) = -topGap - (r - 1) * decay   for r >= 1,
 * i.e. a head token, then a geometric tail with ratio exp(-decay), so masses, counts and quantiles
 * of any stretch of ranks have closed forms (the sampler uses them; see candidates.ts). Which token
 * sits at rank r is an affine permutation of the non-EOS ids, r -> (mul * r + add) mod streamSize,
 * invertible in O(1). The primary EOS id carries its own logit (shaped by the length profile); the
 * other EOS ids get no mass (the simulated model ends responses with the primary one only).
 *
 * Peakedness varies per position (SHAPE_CLASSES): under top_p 0.97 / top_k 512 most positions keep
 * 1-3 tokens and a few percent keep hundreds, as measured for RL rollouts of reasoning models.
 */
export class PositionShape {
  /** Logit gap between rank 0 and rank 1. */
  topGap = 0;
  /** Logit drop per rank from rank 1 on (> 0). */
  decay = 1;
  permMul = 1;
  permMulInv = 1;
  permAdd = 0;
}

interface ShapeClass {
  /** Cumulative probability of this class and the ones before it. */
  cumulative: number;
  gapLo: number;
  gapHi: number;
  /** decay is log-uniform in [decayLo, decayHi]. */
  decayLo: number;
  decayHi: number;
}

/** Tuned with `node dist/bench/engine.js --shape` (kept-set sizes printed there). */
const SHAPE_CLASSES: readonly ShapeClass[] = [
  // Confident: the top token takes > 97% (keeps 1 token under top_p 0.97).
  { cumulative: 0.64, gapLo: 4.5, gapHi: 10, decayLo: 0.5, decayHi: 2 },
  // A few plausible tokens (2-4 kept).
  { cumulative: 0.88, gapLo: 0.3, gapHi: 3.5, decayLo: 0.8, decayHi: 3 },
  // Spread (tens kept).
  { cumulative: 0.96, gapLo: 0, gapHi: 1.5, decayLo: 0.03, decayHi: 0.5 },
  // Flat (hundreds kept, top_k 512 binds).
  { cumulative: 1, gapLo: 0, gapHi: 0.5, decayLo: 0.003, decayHi: 0.02 },
];

/** EOS logit relative to rank 0 before the target length: ~1e-8 per token, rarely sampled. */
export const EOS_LOGIT_BEFORE_TARGET = -18;
/** EOS logit from the target length on: EOS takes all but ~1e-6 of the mass. */
export const EOS_LOGIT_AT_TARGET = 14;

const NUM_MULTIPLIERS = 64;

export class SimModel {
  readonly vocabSize: number;
  /** Number of non-EOS tokens (the ranked stream). */
  readonly streamSize: number;
  /** EOS ids ascending. */
  readonly eosSorted: Int32Array;
  /** The EOS id the model emits. */
  readonly primaryEos: number;
  readonly #modelSeed: number;
  #weightKey = 0;
  #weightVersion = 0;
  readonly #mul = new Int32Array(NUM_MULTIPLIERS);
  readonly #mulInv = new Int32Array(NUM_MULTIPLIERS);

  constructor(preset: ModelPreset, modelSeed: number, weightVersion: number) {
    this.vocabSize = preset.vocabSize;
    this.eosSorted = Int32Array.from(preset.eosTokenIds).sort();
    this.primaryEos = preset.eosTokenIds[0] ?? 0;
    // The stream: the tokenizer's text tokens (textVocabSize) less the EOS ids among them.
    const text = preset.textVocabSize ?? this.vocabSize;
    this.streamSize = text - this.eosSorted.filter((id) => id < text).length;
    this.#modelSeed = modelSeed | 0;
    fillMultipliers(this.streamSize, this.#mul, this.#mulInv);
    this.setWeightVersion(weightVersion);
  }

  get weightVersion(): number {
    return this.#weightVersion;
  }

  /** A 32-bit key of (model seed, weight version), for everything weight-dependent. */
  get weightKey(): number {
    return this.#weightKey;
  }

  setWeightVersion(version: number): void {
    this.#weightVersion = version;
    this.#weightKey = combine(mix32(this.#modelSeed ^ 0x2545f491), version);
  }

  /** Fills `out` with the distribution's shape after `ctxHash` (context) at `position`. */
  shapeAt(ctxHash: number, position: number, out: PositionShape): void {
    const h = combine(combine(this.#weightKey, ctxHash), position);
    // Uniforms written out, not via unitFloat(): a double returned from a call V8 does not
    // inline is boxed (measured: ~13 bytes of garbage per position).
    const u = (h >>> 0) * UINT32_TO_UNIT;
    let c = SHAPE_CLASSES[SHAPE_CLASSES.length - 1] as ShapeClass;
    for (let i = 0; i < SHAPE_CLASSES.length; i++) {
      const k = SHAPE_CLASSES[i] as ShapeClass;
      if (u < k.cumulative) {
        c = k;
        break;
      }
    }
    const ug = (mix32(h ^ 0x68e31da4) >>> 0) * UINT32_TO_UNIT;
    const ud = (mix32(h ^ 0xb5297a4d) >>> 0) * UINT32_TO_UNIT;
    out.topGap = c.gapLo + (c.gapHi - c.gapLo) * ug;
    out.decay = c.decayLo * Math.exp(Math.log(c.decayHi / c.decayLo) * ud);
    const hp = mix32(h ^ 0x1b56c4e9);
    const m = hp & (NUM_MULTIPLIERS - 1);
    out.permMul = this.#mul[m] as number;
    out.permMulInv = this.#mulInv[m] as number;
    out.permAdd = (hp >>> 6) % this.streamSize;
  }

  /** Relative logit of stream rank r (rank 0 is 0). Hot paths inline this formula (boxing). */
  logitAtRank(rank: number, s: PositionShape): number {
    return rank === 0 ? 0 : -s.topGap - (rank - 1) * s.decay;
  }

  /** Token id at stream rank r. */
  tokenAtRank(rank: number, s: PositionShape): number {
    let id = (s.permMul * rank + s.permAdd) % this.streamSize;
    const eos = this.eosSorted;
    for (let i = 0; i < eos.length; i++) if (id >= (eos[i] as number)) id++;
    return id;
  }

  /** Stream rank of a token id, or -1 for an EOS id or a special one (not in the stream). */
  rankOfToken(id: number, s: PositionShape): number {
    const eos = this.eosSorted;
    let below = 0;
    for (let i = 0; i < eos.length; i++) {
      const e = eos[i] as number;
      if (e === id) return -1;
      if (e < id) below++;
    }
    const j = id - below;
    const n = this.streamSize;
    if (j >= n) return -1;
    return (((j - s.permAdd + n) % n) * s.permMulInv) % n;
  }

  /** EOS logit for the output token about to be sampled (0-based index `outputIndex`). */
  eosLogit(outputIndex: number, target: number, ignoreEos: boolean): number {
    // ignore_eos asks for max_tokens of ordinary text (benchmarks do this), so the length
    // profile is not applied and EOS stays at its background level.
    if (ignoreEos) return EOS_LOGIT_BEFORE_TARGET;
    return outputIndex + 1 >= target ? EOS_LOGIT_AT_TARGET : EOS_LOGIT_BEFORE_TARGET;
  }

  isEos(id: number): boolean {
    const eos = this.eosSorted;
    for (let i = 0; i < eos.length; i++) if (eos[i] === id) return true;
    return false;
  }
}

/** Multipliers coprime to n (so r -> mul * r + add is a bijection mod n), with their inverses. */
function fillMultipliers(n: number, mul: Int32Array, inv: Int32Array): void {
  let k = 0;
  for (let i = 1; k < mul.length; i++) {
    // Spread candidates over [n/8, 7n/8) by the golden ratio, so adjacent ranks land far apart.
    const candidate = Math.floor(n / 8 + ((i * 0.6180339887498949) % 1) * ((3 * n) / 4));
    const a = Math.max(1, candidate);
    const aInv = modInverse(a, n);
    if (aInv < 0) continue;
    mul[k] = a;
    inv[k] = aInv;
    k++;
    if (i > 100_000) throw new RS_ERR_SERVER_INTERNAL(`no multipliers coprime to ${n}`);
  }
}

/** a^-1 mod n by the extended Euclidean algorithm, or -1 when gcd(a, n) != 1. */
function modInverse(a: number, n: number): number {
  let [oldR, r] = [a % n, n];
  let [oldS, s] = [1, 0];
  while (r !== 0) {
    const q = Math.floor(oldR / r);
    [oldR, r] = [r, oldR - q * r];
    [oldS, s] = [s, oldS - q * s];
  }
  if (oldR !== 1) return n === 1 ? 0 : -1;
  return ((oldS % n) + n) % n;
}
