import { MAX_SCRIPT_TOKENS } from '../wire/messages.js';
import { RejectReason } from '../wire/reject.js';
import { MAX_TOP_LOGPROBS, samplingParamsWellFormed } from '../wire/sampling-check.js';
import type { EngineRequest } from '../wire/types.js';
import type { ResolvedEngineConfig } from './engine-config.js';

const INT32_MAX = 0x7fffffff;

/**
 * The engine's own check of a request (the API server validates first; this is what keeps a bad
 * record from a buggy or stale producer from hurting the engine). O(prompt + script length), no
 * allocation.
 */
export function checkRequest(req: EngineRequest, cfg: ResolvedEngineConfig): RejectReason {
  if (!isIndex(req.server) || !isIndex(req.slot)) return RejectReason.BadRoute;
  const prompt = req.promptTokenIds;
  if (!(prompt instanceof Int32Array) || prompt.length === 0) return RejectReason.PromptEmpty;
  const p = req.params;
  if (!samplingParamsWellFormed(p)) return RejectReason.BadParams;
  // Prompt logprobs are bounded as top logprobs are (vLLM's max_logprobs): 1 + k entries a position.
  const k = p.promptLogprobs;
  if (!Number.isInteger(k) || k < -1 || k > MAX_TOP_LOGPROBS) return RejectReason.BadParams;
  if (!Number.isFinite(req.priority) || !Number.isFinite(req.arrivalTimeMs)) {
    return RejectReason.BadParams;
  }
  const total = prompt.length + p.maxTokens;
  if (total > cfg.maxModelLen) return RejectReason.PromptTooLong;
  const vocab = cfg.preset.vocabSize;
  for (let i = 0; i < prompt.length; i++) {
    const t = prompt[i] as number;
    if (t < 0 || t >= vocab) return RejectReason.TokenOutOfRange;
  }
  // A scripted answer's ids are emitted as sampled ones: each must be a vocabulary id.
  const script = req.script;
  if (script !== undefined && script !== null) {
    if (!(script instanceof Int32Array) || script.length > MAX_SCRIPT_TOKENS) {
      return RejectReason.BadParams;
    }
    for (let i = 0; i < script.length; i++) {
      const t = script[i] as number;
      if (t < 0 || t >= vocab) return RejectReason.TokenOutOfRange;
    }
  }
  // A request that cannot fit even alone would preempt itself forever (vLLM checks this at
  // startup against max_model_len; here num_gpu_blocks may be set low on purpose).
  if (Math.ceil(total / cfg.blockSize) > cfg.numGpuBlocks) return RejectReason.KvCacheTooSmall;
  return RejectReason.None;
}

function isIndex(v: number): boolean {
  return Number.isInteger(v) && v >= 0 && v <= INT32_MAX;
}
