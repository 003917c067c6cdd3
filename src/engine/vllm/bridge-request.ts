/**
 * From a ring request to what a vLLM engine is sent: the EngineCoreRequest fields and the
 * SamplingParams map, with the duties vLLM leaves to its frontend done here (docs/vllm-protocol.md,
 * "Requests"): max_tokens always set, the EOS ids of the model card as `_eos_token_id`, `stop_token_ids` and
 * `_all_stop_token_ids` (vLLM's SamplingParams.update_from_generation_config), the prompt checked
 * against the engine's max_model_len, and `routed_experts_prompt_start` kept below the prompt length
 * (vLLM dies otherwise; rows before the client's start are dropped on the way back). Every value
 * is checked here, because an ADD that fails to decode silently kills vLLM's input thread. `n` and
 * stop strings never reach the engine: the API server fans out and matches them.
 */
import type { ModelCard } from '../../wire/model-card.js';
import { RejectReason } from '../../wire/reject.js';
import {
  MAX_TOP_LOGPROBS,
  maskableSampling,
  samplingParamsWellFormed,
} from '../../wire/sampling-check.js';
import type { EngineRequest, SamplingParams } from '../../wire/types.js';
import type { VllmAddRequest, VllmLoraRequest } from './requests.js';
import type { ResolvedSamplingParams } from './sampling-params.js';

/** The ADD the codec encodes (requests.ts), for a checked ring request. */
export interface BridgeAdd extends VllmAddRequest {
  promptTokenIds: Int32Array;
  params: ResolvedSamplingParams;
}

const INT32_MAX = 0x7fffffff;

/**
 * RejectReason.None when the request may be sent to an engine of `maxModelLen` and this card.
 * `masks`: the engine runs with `--enable-return-sampling-mask`, under which vLLM refuses greedy
 * sampling and a request without top_k (its API server checks that; ours does too, and answers
 * 400 naming the field, so this is the last guard before an ADD that would kill the input thread).
 */
export function checkForEngine(
  req: EngineRequest,
  card: ModelCard,
  maxModelLen: number,
  masks: boolean,
): number {
  const prompt = req.promptTokenIds;
  if (!(prompt instanceof Int32Array) || prompt.length === 0) return RejectReason.PromptEmpty;
  const p = req.params;
  if (!paramsInRange(p, card.vocabSize)) return RejectReason.BadParams;
  if (masks && !maskableSampling(p)) return RejectReason.BadParams;
  if (!masks && p.returnSamplingMask) return RejectReason.BadParams;
  if (!Number.isInteger(req.priority) || !Number.isFinite(req.arrivalTimeMs))
    return RejectReason.BadParams;
  if (prompt.length + p.maxTokens > maxModelLen) return RejectReason.PromptTooLong;
  for (let i = 0; i < prompt.length; i++) {
    const t = prompt[i]!;
    if (t < 0 || t >= card.vocabSize) return RejectReason.TokenOutOfRange;
  }
  return RejectReason.None;
}

/**
 * The ADD for a checked ring request (requests.ts encodes it, checking every field again), with
 * the LoRA adapter it runs with, if any, and the DP wave the frontend is in.
 */
export function toVllmAdd(
  req: EngineRequest,
  requestId: string,
  card: ModelCard,
  lora: VllmLoraRequest | null = null,
  currentWave = 0,
): BridgeAdd {
  return {
    lora,
    requestId,
    promptTokenIds: req.promptTokenIds,
    params: {
      ...vllmSamplingParams(req.params, req.promptTokenIds.length, card),
      // P/D: the API server's handle (or a prefill's request for one), unchanged.
      kvTransferParams: req.kvParams ?? null,
    },
    arrivalTime: req.arrivalTimeMs / 1000,
    cacheSalt: req.cacheSalt,
    priority: req.priority,
    clientIndex: 0,
    dataParallelRank: req.dataParallelRank ?? null,
    currentWave,
  };
}

export function vllmSamplingParams(
  p: SamplingParams,
  promptLength: number,
  card: ModelCard,
): ResolvedSamplingParams {
  const [eos, ...otherEos] = card.eosTokenIds;
  const stops = Array.from(p.stopTokenIds);
  const all = new Set<number>(stops);
  if (eos !== undefined) all.add(eos);
  for (const id of otherEos) all.add(id);
  if (!p.ignoreEos) for (const id of otherEos) if (!stops.includes(id)) stops.push(id);
  return {
    maxTokens: p.maxTokens,
    temperature: p.temperature,
    topP: p.topP,
    topK: p.topK,
    minP: p.minP,
    presencePenalty: p.presencePenalty,
    frequencyPenalty: p.frequencyPenalty,
    repetitionPenalty: p.repetitionPenalty,
    seed: p.seed,
    minTokens: p.minTokens,
    ignoreEos: p.ignoreEos,
    eosTokenId: p.ignoreEos || eos === undefined ? null : eos,
    stopTokenIds: stops,
    allStopTokenIds: [...all],
    // k: the sampled token's logprob and its k best candidates (LogprobsLists columns 0 .. k).
    logprobs: p.logprobs ? p.topLogprobs : null,
    // k >= 0: every prompt token's logprob after the first, with its k best candidates.
    promptLogprobs: p.promptLogprobs >= 0 ? p.promptLogprobs : null,
    routedExpertsPromptStart: Math.min(p.routedExpertsPromptStart, promptLength - 1),
    kvTransferParams: null,
  };
}

/** Well formed, and inside the ranges vLLM's SamplingParams accepts (it kills its input thread otherwise). */
function paramsInRange(p: SamplingParams, vocabSize: number): boolean {
  if (!samplingParamsWellFormed(p)) return false;
  for (let i = 0; i < p.stopTokenIds.length; i++) {
    const id = p.stopTokenIds[i]!;
    if (id < 0 || id >= vocabSize) return false;
  }
  return (
    Number.isInteger(p.promptLogprobs) &&
    p.promptLogprobs >= -1 &&
    p.promptLogprobs <= MAX_TOP_LOGPROBS &&
    p.temperature <= 2 &&
    p.topK <= INT32_MAX &&
    p.presencePenalty >= -2 &&
    p.presencePenalty <= 2 &&
    p.frequencyPenalty >= -2 &&
    p.frequencyPenalty <= 2
  );
}
