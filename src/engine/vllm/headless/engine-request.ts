import { MAX_TOP_LOGPROBS } from '../../../wire/sampling-check.js';
import type { EngineRequest } from '../../../wire/types.js';
import type { DecodedAddRequest } from '../requests.js';

/** What vLLM's engine flags switch on for every request (they are engine-wide in vLLM). */
export interface EngineWide {
  /** --enable-return-routed-experts */
  routedExperts: boolean;
  /** --enable-return-sampling-mask */
  samplingMasks: boolean;
}

/**
 * A decoded ADD as the EngineRequest an EngineCore runs, on (server 0, `slot`). vLLM's top_k -1
 * and 0 both mean off (0 in ringserve); `logprobs: k` asks for the sampled token's logprob and k
 * top candidates, `prompt_logprobs: k` for every prompt token's after the first with k candidates
 * (-1, the whole vocabulary in vLLM, is capped at MAX_TOP_LOGPROBS for both); routing rows and
 * sampling masks are engine-wide in vLLM, so they come from the engine's flags. `kv`: what the
 * NIXL connector asks of the simulator (keep the prompt's blocks; import this many tokens).
 */
export function toEngineRequest(
  req: DecodedAddRequest,
  slot: number,
  wide: EngineWide,
  kv: { pinKv: boolean; importKvTokens: number } = NO_KV,
): EngineRequest {
  const p = req.params;
  const k = p.logprobs === null ? 0 : p.logprobs < 0 ? MAX_TOP_LOGPROBS : p.logprobs;
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
      topLogprobs: Math.min(k, MAX_TOP_LOGPROBS),
      promptLogprobs: promptLogprobsOf(p.promptLogprobs),
      returnSamplingMask: wide.samplingMasks,
      returnRoutedExperts: wide.routedExperts,
      routedExpertsPromptStart: p.routedExpertsPromptStart,
    },
    priority: req.priority,
    cacheSalt: req.cacheSalt,
    arrivalTimeMs: req.arrivalTime * 1000,
    loraId: req.lora?.id ?? 0,
    // P/D through the NIXL connector (nixl-connector.ts): the simulator's prefill pin and import.
    pinKv: kv.pinKv,
    importKvTokens: kv.importKvTokens,
  };
}

const NO_KV = { pinKv: false, importKvTokens: 0 };

/** The prompt_logprobs k an engine computes: -1 none, else at most MAX_TOP_LOGPROBS. */
export function promptLogprobsOf(k: number | null): number {
  if (k === null) return -1;
  return k < 0 ? MAX_TOP_LOGPROBS : Math.min(k, MAX_TOP_LOGPROBS);
}
