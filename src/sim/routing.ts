import { combine, mix32 } from '../wire/hash.js';
import { idBytesForExperts } from '../wire/model-card.js';
import type { ModelPreset } from './presets.js';

/**
 * Largest run table built (elements): numExperts * strides * topk. The presets need at most
 * 393,216 (tiny-wide); a card past this cap walks perm per expert instead, with the same output.
 */
const MAX_RUN_TABLE = 1 << 22;

/**
 * Simulated MoE routing: for a forwarded (token, position), per routing layer, `topk` distinct
 * experts out of `numExperts`, a deterministic function of (model seed + weight version, token,
 * position, layer). One hash per layer picks a start s and a stride d coprime to E; the experts
 * are perm[(s + i*d) mod E] for i < topk, distinct because i -> s + i*d is injective mod E for
 * i < E, and perm (a shuffle of the experts fixed per weight version) is a bijection. That costs
 * one hash and topk table reads per layer, no rejection loop.
 *
 * The topk experts of a layer depend on (s, stride) alone, so every run is tabulated once per
 * weight version (`#runs`, 64 KB for Qwen3's 128 experts): a layer is one hash and a copy of topk
 * ids, as whole 32-bit words when they fill words (two stores for Qwen3's 8 one-byte ids).
 * Measured with the bench's qwen3 rows: the per-expert walk spent ~51% of the engine process in
 * this loop (writeRow inlined into ModelRunner#forward) at ~88k tokens/s.
 */
export class ExpertRouter {
  readonly layers: number;
  readonly topk: number;
  readonly numExperts: number;
  /** Elements per row: layers * topk. */
  readonly rowWidth: number;
  readonly #strides: Int32Array;
  #perm: Uint16Array;
  #key = 0;
  /** runs[(s * strides + j) * topk + k] = perm[(s + k * strides[j]) % E]; null past the cap. */
  #runs: Uint8Array | Uint16Array | null = null;
  /** `#runs` as 32-bit words, when a layer's topk ids fill whole words. */
  #runWords: Uint32Array | null = null;
  readonly #wordsPerLayer: number;
  /** E - 1 and strides - 1 when they are powers of two (remainders as masks), else -1. */
  readonly #expertMask: number;
  readonly #strideMask: number;
  /** A word view of the last output array written to (rebuilt only when that array changes). */
  #outWords: Uint32Array<ArrayBufferLike> = new Uint32Array(0);
  #outWordsOf: Uint8Array | Uint16Array | null = null;

  constructor(preset: ModelPreset) {
    this.layers = preset.routingLayers;
    this.topk = preset.expertsPerToken;
    this.numExperts = preset.numExperts;
    this.rowWidth = this.layers * this.topk;
    this.#strides = coprimeStrides(this.numExperts);
    this.#perm = new Uint16Array(this.numExperts);
    const layerBytes = this.topk * idBytesForExperts(this.numExperts);
    this.#wordsPerLayer = layerBytes % 4 === 0 ? layerBytes / 4 : 0;
    this.#expertMask = powerOfTwoMask(this.numExperts);
    this.#strideMask = powerOfTwoMask(this.#strides.length);
  }

  /** Re-keys routing for a new weight version (`weightKey` from SimModel). */
  setWeightKey(weightKey: number): void {
    this.#key = mix32(weightKey ^ 0x3c6ef372);
    const perm = this.#perm;
    for (let i = 0; i < perm.length; i++) perm[i] = i;
    // Fisher-Yates driven by the key, so the expert shuffle is the same for the same version.
    let h = this.#key;
    for (let i = perm.length - 1; i > 0; i--) {
      h = combine(h, i);
      const j = (h >>> 0) % (i + 1);
      const t = perm[i] as number;
      perm[i] = perm[j] as number;
      perm[j] = t;
    }
    this.#tabulateRuns();
  }

  #tabulateRuns(): void {
    const e = this.numExperts;
    const topk = this.topk;
    const strides = this.#strides;
    const size = e * strides.length * topk;
    if (size > MAX_RUN_TABLE) return;
    const runs = idBytesForExperts(e) === 2 ? new Uint16Array(size) : new Uint8Array(size);
    let o = 0;
    for (let s = 0; s < e; s++) {
      for (let j = 0; j < strides.length; j++) {
        const d = strides[j] as number;
        let idx = s;
        for (let k = 0; k < topk; k++) {
          runs[o++] = this.#perm[idx] as number;
          idx += d;
          if (idx >= e) idx -= e;
        }
      }
    }
    this.#runs = runs;
    this.#runWords =
      this.#wordsPerLayer > 0 ? new Uint32Array(runs.buffer, 0, runs.byteLength >> 2) : null;
  }

  /** Writes the row of (token, position) into out[at .. at + rowWidth). */
  writeRow(token: number, position: number, out: Uint8Array | Uint16Array, at: number): void {
    const rowKey = combine(combine(this.#key, token), position);
    const runs = this.#runs;
    if (runs === null) this.#walkRow(rowKey, out, at);
    else if (this.#wordAligned(out, at, runs)) this.#copyRowWords(rowKey, out, at);
    else this.#copyRow(rowKey, runs, out, at);
  }

  /**
   * The run a layer hash picks: start (h mod E) and stride index ((h >>> 12) mod strides). Both
   * counts are powers of two for every preset (Qwen3: 128 and 64), where the remainder is a mask:
   * the same value without two integer divisions per layer.
   */
  #runOf(h: number): number {
    const start = this.#expertMask >= 0 ? h & this.#expertMask : (h >>> 0) % this.numExperts;
    const n = this.#strides.length;
    const stride = this.#strideMask >= 0 ? (h >>> 12) & this.#strideMask : (h >>> 12) % n;
    return start * n + stride;
  }

  /** The layer's hash: its start expert index and stride index. */
  #layerHash(rowKey: number, layer: number): number {
    return mix32((rowKey + Math.imul(layer + 1, 0x9e3779b9)) | 0);
  }

  #wordAligned(out: Uint8Array | Uint16Array, at: number, runs: Uint8Array | Uint16Array) {
    return (
      this.#runWords !== null &&
      out.BYTES_PER_ELEMENT === runs.BYTES_PER_ELEMENT &&
      ((out.byteOffset + at * out.BYTES_PER_ELEMENT) & 3) === 0
    );
  }

  #copyRowWords(rowKey: number, out: Uint8Array | Uint16Array, at: number): void {
    if (this.#outWordsOf !== out) {
      this.#outWords = new Uint32Array(out.buffer, 0, out.buffer.byteLength >> 2);
      this.#outWordsOf = out;
    }
    const words = this.#outWords;
    const src = this.#runWords as Uint32Array;
    const perLayer = this.#wordsPerLayer;
    let w = (out.byteOffset + at * out.BYTES_PER_ELEMENT) >> 2;
    for (let layer = 0; layer < this.layers; layer++) {
      const h = this.#layerHash(rowKey, layer);
      let r = this.#runOf(h) * perLayer;
      for (let k = 0; k < perLayer; k++) words[w++] = src[r++] as number;
    }
  }

  #copyRow(
    rowKey: number,
    runs: Uint8Array | Uint16Array,
    out: Uint8Array | Uint16Array,
    at: number,
  ) {
    const topk = this.topk;
    let o = at;
    for (let layer = 0; layer < this.layers; layer++) {
      const h = this.#layerHash(rowKey, layer);
      let r = this.#runOf(h) * topk;
      for (let k = 0; k < topk; k++) out[o++] = runs[r++] as number;
    }
  }

  /** Without a run table: each layer's experts walked from perm (the table's definition). */
  #walkRow(rowKey: number, out: Uint8Array | Uint16Array, at: number): void {
    const e = this.numExperts;
    const topk = this.topk;
    const perm = this.#perm;
    const strides = this.#strides;
    let o = at;
    for (let layer = 0; layer < this.layers; layer++) {
      const h = this.#layerHash(rowKey, layer);
      let idx = (h >>> 0) % e;
      const d = strides[(h >>> 12) % strides.length] as number;
      for (let k = 0; k < topk; k++) {
        out[o++] = perm[idx] as number;
        idx += d;
        if (idx >= e) idx -= e;
      }
    }
  }
}

function powerOfTwoMask(n: number): number {
  return (n & (n - 1)) === 0 ? n - 1 : -1;
}

/** All d in [1, n) with gcd(d, n) = 1 ([0] when n = 1). */
function coprimeStrides(n: number): Int32Array {
  const out: number[] = [];
  for (let d = 1; d < n; d++) if (gcd(d, n) === 1) out.push(d);
  return Int32Array.from(out.length > 0 ? out : [0]);
}

function gcd(a: number, b: number): number {
  let x = a;
  let y = b;
  while (y !== 0) [x, y] = [y, x % y];
  return x;
}
