/**
 * An EngineCoreOutput's logprob matrices into step rows (docs/vllm-protocol.md, "Outputs"): the
 * top candidates of each new token (LogprobsLists columns 1 .. W-1) into the row's top area, and
 * prompt logprobs (LogprobsTensors) into its prompt area. W is the engine's: the step's widest
 * `logprobs` for sampled tokens, so wider than a request's own k when a batch-mate asked more;
 * for the prompt it is the request's own (vLLM's default model runner) or 1 (Model Runner V2
 * computes the prompt token's logprob alone). Each request gets min(W - 1, its k) columns, as
 * vLLM's own frontend keeps 1 + num_logprobs of each row (vllm/logprobs.py
 * append_logprobs_for_next_position). Copies between typed arrays; nothing is allocated.
 */
import { LOGPROB_FLOOR } from '../../wire/sampling-check.js';
import type { StepOutputs } from '../step-outputs.js';
import type { OutputView } from './output-view.js';

/** Floor of a logprob, as the simulator's (model-runner.ts) and the contract's "missing value". */
export { LOGPROB_FLOOR };

/** A logprob as the rows carry it: -inf (a token outside the kept set) and NaN floored. */
export function floored(lp: number): number {
  return lp < LOGPROB_FLOOR || Number.isNaN(lp) ? LOGPROB_FLOOR : lp;
}

/**
 * Columns 1 .. min(W - 1, k) of token t's LogprobsLists row into `row`'s top area (the best
 * candidates, best first). Nothing when the output has no logprobs or k is 0.
 */
export function stageTop(
  o: OutputView,
  t: number,
  k: number,
  rows: StepOutputs,
  row: number,
): void {
  const width = o.logprobWidth - 1;
  const n = Math.min(width, k);
  if (!o.hasLogprobs || n <= 0) return;
  const at = rows.reserveTop(n);
  const from = t * width;
  for (let c = 0; c < n; c++) {
    rows.topIds[at + c] = o.topIds[from + c]!;
    rows.topLogprobs[at + c] = floored(o.topLogprobs[from + c]!);
  }
  rows.topStart[row] = at;
  rows.topCount[row] = n;
  rows.topLength = at + n;
}

/**
 * The output's prompt logprob rows into `row`'s prompt area, positions `firstPos` on, 1 +
 * min(W - 1, k) entries each: entry 0 the prompt token with its rank, entries 1.. the best
 * candidates with ranks 1.. (position-major, as StepOutputs keeps them). Returns the positions
 * staged.
 */
export function stagePrompt(
  o: OutputView,
  k: number,
  firstPos: number,
  rows: StepOutputs,
  row: number,
): number {
  const positions = o.promptPositions;
  const srcWidth = o.promptWidth;
  const width = 1 + Math.min(srcWidth - 1, k);
  const n = positions * width;
  const at = rows.reservePrompt(n);
  const ids = rows.promptIds;
  const logprobs = rows.promptLogprobs;
  const ranks = rows.promptRanks;
  for (let p = 0; p < positions; p++) {
    const to = at + p * width;
    const from = p * srcWidth;
    ranks[to] = o.promptRanks[p]!;
    for (let e = 0; e < width; e++) {
      ids[to + e] = o.promptIds[from + e]!;
      logprobs[to + e] = floored(o.promptLogprobs[from + e]!);
      if (e > 0) ranks[to + e] = e;
    }
  }
  rows.promptStart[row] = at;
  rows.promptPositions[row] = positions;
  rows.promptFirstPos[row] = firstPos;
  rows.promptWidth[row] = width;
  rows.promptLength = at + n;
  return positions;
}
