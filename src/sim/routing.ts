import { combine, mix32 } from './hash.js';
import type { ModelPreset } from './presets.js';

/**
 * Simulated MoE routing: for a forwarded (token, position), per routing layer, `topk` distinct
 * experts out of `numExperts`, a deterministic function of (model seed + weight version, token,
 * position, layer). One hash per layer picks a start s and a stride d coprime to E; the experts
 * are perm[(s + i*d) mod E] for i < topk, distinct because i -> s + i*d is injective mod E for
 * i < E, and perm (a shuffle of the experts fixed per weight version) is a bijection. That costs
 * one hash and topk table reads per layer, no rejection loop.
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

  constructor(preset: ModelPreset) {
    this.layers = preset.routingLayers;
    this.topk = preset.expertsPerToken;
    this.numExperts = preset.numExperts;
    this.rowWidth = this.layers * this.topk;
    this.#strides = coprimeStrides(this.numExperts);
    this.#perm = new Uint16Array(this.numExperts);
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
  }

  /** Writes the row of (token, position) into out[at .. at + rowWidth). */
  writeRow(token: number, position: number, out: Uint8Array | Uint16Array, at: number): void {
    const e = this.numExperts;
    const topk = this.topk;
    const perm = this.#perm;
    const strides = this.#strides;
    const rowKey = combine(combine(this.#key, token), position);
    let o = at;
    for (let layer = 0; layer < this.layers; layer++) {
      const h = mix32((rowKey + Math.imul(layer + 1, 0x9e3779b9)) | 0);
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
