/**
 * One engine step of one request, as vLLM's scheduler would report it (VE §4-5): tokens from the
 * formulas, then the stop checks in vLLM's order (vllm/v1/core/sched/utils.py `check_stop`:
 * length first, then min_tokens, EOS unless ignore_eos, stop_token_ids), then the per-era extras.
 */
import type { PromptLogprobs } from './codec-arrays.js';
import type { EngineCoreOutput } from './codec-outputs.js';
import { FinishReason } from './codec-outputs.js';
import type { EngineCoreRequest } from './codec-requests.js';
import { SAMPLING_DEFAULTS } from './codec-sampling.js';
import { type Era, eraAtLeast } from './eras.js';
import {
  logprobRow,
  maskRowAt,
  promptLogprobRow,
  promptRankAt,
  promptSum,
  rankAt,
  routedPositions,
  routingIds,
  tokenAt,
} from './formula.js';
import { finishKv, loadsRemote, type MirrorNixl } from './nixl.js';

/** The engine-wide settings a step depends on. */
export interface StepShape {
  era: Era;
  vocab: number;
  maxModelLen: number;
  layers: number;
  topk: number;
  numExperts: number;
  returnRoutedExperts: boolean;
  returnSamplingMask: boolean;
  tokensPerStep: number;
  /**
   * Prompt logprobs: 0 sends every position in the first output with tokens, as vLLM (its model
   * runner hands the whole LogprobsTensors over when the prefill completes, and its scheduler
   * sends no partial-prefill output); n > 0 sends them n positions a step, in outputs without
   * tokens, before the first token (as vLLM's v1 scheduler did before that invariant).
   */
  promptLogprobsChunk: number;
  /** The K the engine computes for prompt logprobs whatever was asked (Model Runner V2: 0). */
  promptLogprobsTopK: number | null;
  /** torch dtype of the ids and ranks: 'int32' (vLLM's default model runner) or 'int64'. */
  promptLogprobsDtype: string;
  /** A NixlConnector (nixl.ts): P/D legs of kv_transfer_params; null: they are ignored. */
  nixl: MirrorNixl | null;
}

/** A request the engine runs. */
export class LiveRequest {
  readonly prompt: readonly number[];
  readonly sum: number;
  /** Tokens sent so far (C in the routing formula). */
  emitted = 0;
  /** Prompt logprob positions sent so far. */
  promptSent = 0;

  constructor(
    readonly request: EngineCoreRequest,
    readonly arrivedAt: number,
  ) {
    this.prompt = request.prompt_token_ids ?? [];
    this.sum = promptSum(this.prompt);
  }

  get clientIndex(): number {
    return this.request.client_index ?? 0;
  }

  /** The logprobs K asked for, or null. -1 (full vocabulary) is read as 0 here. */
  get logprobs(): number | null {
    const k = this.request.sampling_params?.logprobs;
    return k === null || k === undefined ? null : Math.max(0, k);
  }

  /** The prompt_logprobs K asked for, or null. -1 (full vocabulary) is read as 0 here. */
  get promptLogprobs(): number | null {
    const k = this.request.sampling_params?.prompt_logprobs;
    return k === null || k === undefined ? null : Math.max(0, k);
  }
}

interface Generated {
  tokens: number[];
  finish: number | null;
  stopReason: number | null;
}

function generate(shape: StepShape, live: LiveRequest, maxTokens: number): Generated {
  const p = live.request.sampling_params ?? {};
  const k = live.emitted === 0 ? 1 : shape.tokensPerStep;
  const tokens: number[] = [];
  for (let j = 0; j < k; j++) {
    const i = live.emitted + j;
    const t = tokenAt(live.sum, i, shape.vocab);
    tokens.push(t);
    const n = i + 1;
    if (live.prompt.length + n >= shape.maxModelLen || n >= maxTokens) {
      return { tokens, finish: FinishReason.LENGTH, stopReason: null };
    }
    if (n < (p.min_tokens ?? 0)) continue;
    if (!(p.ignore_eos ?? false) && t === p._eos_token_id) {
      return { tokens, finish: FinishReason.STOP, stopReason: null };
    }
    if (p.stop_token_ids?.includes(t)) return { tokens, finish: FinishReason.STOP, stopReason: t };
  }
  return { tokens, finish: null, stopReason: null };
}

function firstOutputExtras(
  out: EngineCoreOutput,
  live: LiveRequest,
  now: number,
  loaded: number,
): void {
  const p = live.prompt.length;
  out.prefill_stats = {
    num_prompt_tokens: p,
    num_computed_tokens: p - loaded,
    num_cached_tokens: loaded,
    num_local_cached_tokens: 0,
    num_external_cached_tokens: loaded,
    num_cache_creation_tokens: p - loaded,
  };
  out.events = [
    { type: 1, timestamp: live.arrivedAt },
    { type: 2, timestamp: now },
  ];
}

/** Prompt positions from live.promptSent + 1 on, `n` of them, as one LogprobsTensors. */
function promptRows(shape: StepShape, live: LiveRequest, n: number): PromptLogprobs {
  const k = shape.promptLogprobsTopK ?? live.promptLogprobs ?? 0;
  const first = live.promptSent + 1;
  const positions = Array.from({ length: n }, (_, r) => first + r);
  const rows = positions.map((p) => promptLogprobRow(live.prompt[p]!, p, k, shape.vocab));
  live.promptSent += n;
  return {
    tokenIds: rows.map((r) => r.ids),
    logprobs: rows.map((r) => r.logprobs),
    ranks: positions.map(promptRankAt),
    idsDtype: shape.promptLogprobsDtype,
    ranksDtype: shape.promptLogprobsDtype,
  };
}

/**
 * The output of `live` for this step, and whether it finished. `logprobsWidth` is the K+1 the step
 * uses for every request that asked logprobs (vLLM makes it the step's largest, VE §5).
 */
export function stepRequest(
  shape: StepShape,
  live: LiveRequest,
  now: number,
  logprobsWidth: number,
): { output: EngineCoreOutput; finished: boolean } {
  const id = live.request.request_id;
  const maxTokens = live.request.sampling_params?.max_tokens;
  if (maxTokens === null) {
    // vllm/v1/request.py:107-110 (VE §4): a request without max_tokens finishes with ERROR.
    return { output: { request_id: id, new_token_ids: [], finish_reason: 3 }, finished: true };
  }
  const before = live.emitted;
  const promptLeft = live.prompt.length - 1 - live.promptSent;
  const asked = live.promptLogprobs !== null && before === 0;
  const chunk = shape.promptLogprobsChunk;
  if (asked && chunk > 0 && promptLeft > chunk) {
    const prompt = promptRows(shape, live, chunk);
    return {
      output: { request_id: id, new_token_ids: [], new_prompt_logprobs_tensors: prompt },
      finished: false,
    };
  }
  const g = generate(shape, live, maxTokens ?? SAMPLING_DEFAULTS.max_tokens);
  live.emitted += g.tokens.length;
  const out: EngineCoreOutput = { request_id: id, new_token_ids: g.tokens };
  if (asked) out.new_prompt_logprobs_tensors = promptRows(shape, live, Math.max(0, promptLeft));
  if (live.logprobs !== null) {
    const rows = g.tokens.map((t, j) => logprobRow(t, before + j, logprobsWidth - 1, shape.vocab));
    out.new_logprobs = {
      tokenIds: rows.map((r) => r.ids),
      logprobs: rows.map((r) => r.logprobs),
      ranks: g.tokens.map((_, j) => rankAt(before + j)),
    };
  }
  // A decode leg loaded all of the prompt but its last token: only P - 1 on is forwarded.
  const sp = live.request.sampling_params;
  const loaded = shape.nixl !== null && loadsRemote(sp) ? live.prompt.length - 1 : 0;
  if (shape.returnRoutedExperts) {
    const start = Math.max(sp?.routed_experts_prompt_start ?? 0, loaded);
    const positions = routedPositions(live.prompt.length, start, before, g.tokens.length);
    out.routed_experts = {
      rows: positions.length,
      layers: shape.layers,
      topk: shape.topk,
      wide: shape.numExperts > 256,
      ids: routingIds(positions, shape.layers, shape.topk, shape.numExperts),
    };
  }
  if (shape.returnSamplingMask && eraAtLeast(shape.era, '0.28')) {
    out.new_sampling_mask = { rows: g.tokens.map((t, j) => maskRowAt(t, before + j, shape.vocab)) };
  }
  if (before === 0) firstOutputExtras(out, live, now, loaded);
  out.finish_reason = g.finish;
  out.stop_reason = g.stopReason;
  finishKv(shape.nixl, out, sp, live.prompt.length);
  return { output: out, finished: g.finish !== null };
}
