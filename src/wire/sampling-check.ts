import type { SamplingParams } from './types.js';

/**
 * The most top logprobs a request may ask per position: vLLM's default --max-logprobs (20, its
 * ModelConfig.max_logprobs), which also bounds the OpenAI routes (`logprobs`, `top_logprobs`).
 */
/**
 * The lowest logprob anything reports (the contract's "missing value"; vLLM clamps -inf to it):
 * the simulator, the vLLM bridge and the answers' writers floor with this one constant.
 */
export const LOGPROB_FLOOR = -9999;

export const MAX_TOP_LOGPROBS = 20;

/**
 * Whether sampling parameters read off a ring are well formed: the ranges every engine needs
 * (the API server checked them already; a record from a buggy or foreign writer may not hold).
 * Engines with tighter limits (vLLM's, src/engine/vllm/bridge-request.ts) check those on top.
 */
export function samplingParamsWellFormed(p: SamplingParams): boolean {
  return (
    p !== null &&
    typeof p === 'object' &&
    Number.isFinite(p.temperature) &&
    p.temperature >= 0 &&
    p.topP > 0 &&
    p.topP <= 1 &&
    Number.isInteger(p.topK) &&
    p.topK >= 0 &&
    p.minP >= 0 &&
    p.minP <= 1 &&
    (p.seed === null || Number.isSafeInteger(p.seed)) &&
    Number.isInteger(p.maxTokens) &&
    p.maxTokens >= 1 &&
    Number.isInteger(p.minTokens) &&
    p.minTokens >= 0 &&
    p.minTokens <= p.maxTokens &&
    p.stopTokenIds instanceof Int32Array &&
    Number.isFinite(p.presencePenalty) &&
    Number.isFinite(p.frequencyPenalty) &&
    Number.isFinite(p.repetitionPenalty) &&
    p.repetitionPenalty > 0 &&
    Number.isInteger(p.topLogprobs) &&
    p.topLogprobs >= 0 &&
    p.topLogprobs <= MAX_TOP_LOGPROBS &&
    Number.isInteger(p.routedExpertsPromptStart) &&
    p.routedExpertsPromptStart >= 0
  );
}

/** Below this temperature vLLM samples greedily (_SAMPLING_EPS in vllm/v1/sample). */
export const GREEDY_TEMPERATURE = 1e-5;

/**
 * What vLLM's sampling-mask capture requires of every request while `--enable-return-sampling-mask`
 * is on (vLLM's docs, "Sampling Mask": temperature > 0 and top_k > 0; while it is on, vLLM
 * refuses other requests). Returns the request field at fault, or null.
 */
export function maskSamplingProblem(
  p: Pick<SamplingParams, 'temperature' | 'topK'>,
): 'temperature' | 'top_k' | null {
  if (!(p.temperature >= GREEDY_TEMPERATURE)) return 'temperature';
  if (!(p.topK > 0)) return 'top_k';
  return null;
}

export function maskableSampling(p: Pick<SamplingParams, 'temperature' | 'topK'>): boolean {
  return maskSamplingProblem(p) === null;
}
