import { LOGPROB_FLOOR } from '../../../wire/sampling-check.js';
import type { StepOutputs } from '../../step-outputs.js';

/**
 * One request's prompt logprobs, held until its first output with tokens. vLLM sends them all
 * there: its model runner fills a LogprobsTensors of the whole prompt chunk by chunk and hands it
 * over when the prefill completes, and its scheduler sends no output for a partial prefill
 * ("Invariant: EngineCore returns no partial prefill outputs", vllm/v1/core/sched/scheduler.py;
 * docs/vllm-protocol.md, "Outputs"). The simulator's rows carry them per prefill chunk (the
 * StepOutputs prompt area), so they wait here. Made only for a request that asked; the buffers
 * grow by doubling and are dropped once sent.
 */
export class HeldPrompt {
  /** Entries per position: 1 + the request's prompt_logprobs k. */
  readonly width: number;
  ids = new Int32Array(0);
  logprobs = new Float32Array(0);
  ranks = new Int32Array(0);
  /** Positions held, from position 1. */
  positions = 0;
  /** Sent with the first output with tokens: anything later is not vLLM's to send. */
  sent = false;

  constructor(k: number) {
    this.width = 1 + k;
  }

  /**
   * Adds row i's prompt positions that follow the ones held (a position held already, as a
   * recomputed prefill sends it again, is skipped). Entries past the row's own width are the
   * floor, ranks counted on, so every position has this request's width.
   */
  hold(out: StepOutputs, i: number): void {
    const count = out.promptPositions[i]!;
    if (count === 0 || this.sent) return;
    const first = out.promptFirstPos[i]!;
    const skip = Math.max(0, this.positions + 1 - first);
    if (skip >= count) return;
    const rowWidth = out.promptWidth[i]!;
    const width = this.width;
    const add = count - skip;
    this.#reserve((this.positions + add) * width);
    let from = out.promptStart[i]! + skip * rowWidth;
    let to = this.positions * width;
    for (let p = 0; p < add; p++) {
      for (let e = 0; e < width; e++) {
        const inRow = e < rowWidth;
        this.ids[to + e] = inRow ? out.promptIds[from + e]! : 0;
        this.logprobs[to + e] = inRow ? out.promptLogprobs[from + e]! : LOGPROB_FLOOR;
        this.ranks[to + e] = inRow ? out.promptRanks[from + e]! : e;
      }
      from += rowWidth;
      to += width;
    }
    this.positions += add;
  }

  /** Marks them sent and lets the buffers go (the record points at them until it is encoded). */
  release(): void {
    this.sent = true;
    this.ids = new Int32Array(0);
    this.logprobs = new Float32Array(0);
    this.ranks = new Int32Array(0);
  }

  #reserve(n: number): void {
    if (this.ids.length >= n) return;
    const size = Math.max(n, this.ids.length * 2, 64);
    const ids = new Int32Array(size);
    ids.set(this.ids);
    this.ids = ids;
    const logprobs = new Float32Array(size);
    logprobs.set(this.logprobs);
    this.logprobs = logprobs;
    const ranks = new Int32Array(size);
    ranks.set(this.ranks);
    this.ranks = ranks;
  }
}
