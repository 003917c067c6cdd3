import type { EngineRequest } from '../../wire/types.js';
import type { DecodedAddRequest } from './requests.js';

/**
 * A decoded ADD as the EngineRequest an EngineCore runs, on (server 0, `slot`). vLLM's top_k -1
 * and 0 both mean off (0 in ringserve); `logprobs` of any width asks for the sampled token's
 * logprob (an engine that draws no top candidates answers W = 1); routing rows are engine-wide
 * in vLLM, so `routedExperts` comes from the engine's flag, not from the request.
 */
export function toEngineRequest(
  req: DecodedAddRequest,
  slot: number,
  routedExperts: boolean,
): EngineRequest {
  const p = req.params;
  return {
    server: 0,
    slot,
    promptTokenIds: req.promptTokenIds,
    params: {
      temperature: p.temperature,
      topP: p.topP,
      topK: Math.max(0, p.topK),
      minP: p.minP,
      seed: p.seed,
      maxTokens: p.maxTokens,
      minTokens: p.minTokens,
      stopTokenIds: Int32Array.from(p.stopTokenIds),
      ignoreEos: p.ignoreEos,
      presencePenalty: p.presencePenalty,
      frequencyPenalty: p.frequencyPenalty,
      repetitionPenalty: p.repetitionPenalty,
      logprobs: p.logprobs !== null,
      // The output encoder (outputs.ts) answers column 0 only (W = 1), so no top candidates
      // are drawn for it yet.
      topLogprobs: 0,
      returnSamplingMask: p.returnSamplingMask,
      returnRoutedExperts: routedExperts,
      routedExpertsPromptStart: p.routedExpertsPromptStart,
    },
    priority: req.priority,
    cacheSalt: req.cacheSalt,
    arrivalTimeMs: req.arrivalTime * 1000,
  };
}
