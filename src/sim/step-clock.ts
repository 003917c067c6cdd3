import type { StepTiming } from '../wire/types.js';
import type { StepTimeModel } from './presets.js';

/**
 * The modelled duration of one engine step, per preset (the figures and their derivation are on
 * each preset in presets.ts; glm-4.5-air is calibrated to ~5.5k generated tok/s at 130 concurrent
 * ~12k-token requests, 23.6 ms per decode step). The engine process sleeps for it; this module only
 * computes it.
 */
export class StepClock {
  readonly #model: StepTimeModel;
  readonly #scale: number;

  /**
   * @param speedup divides every step's duration (2 = twice as fast as the modelled hardware).
   * @param maxSpeed every step takes 0 ms: the engine runs as fast as the CPU allows.
   */
  constructor(model: StepTimeModel, speedup: number, maxSpeed: boolean) {
    this.#model = model;
    this.#scale = maxSpeed ? 0 : 1 / speedup;
  }

  /** Sets timing.ms from its token counts (a field, not a return value: no boxed double per step). */
  time(timing: StepTiming): void {
    if (timing.decodeSeqs === 0 && timing.prefillTokens === 0) {
      timing.ms = 0;
      return;
    }
    const m = this.#model;
    timing.ms =
      (m.baseMs +
        m.perDecodeSeqMs * timing.decodeSeqs +
        m.perPrefillTokenMs * timing.prefillTokens +
        m.perContextTokenMs * timing.totalContext) *
      this.#scale;
  }

  /**
   * @param decodeSeqs requests forwarded for one token (a decode) this step
   * @param prefillTokens tokens forwarded as prefill (prompt chunks, recompute)
   * @param totalContext sum of the forwarded requests' context lengths
   */
  stepMs(decodeSeqs: number, prefillTokens: number, totalContext: number): number {
    if (decodeSeqs === 0 && prefillTokens === 0) return 0;
    const m = this.#model;
    const ms =
      m.baseMs +
      m.perDecodeSeqMs * decodeSeqs +
      m.perPrefillTokenMs * prefillTokens +
      m.perContextTokenMs * totalContext;
    return ms * this.#scale;
  }
}
