/**
 * Prefill/decode on the API server: what a request's ADD record says about KV transfer, and the
 * handle a prefill answer carries. A prefill instance (--role prefill, or a request with
 * `do_remote_decode`) has the engine pin the prompt's KV and answers `kv_transfer_params` naming it;
 * a request carrying a prefill instance's handle imports that KV unless the handle expired or is of
 * another prompt, in which case the prompt is recomputed here (vLLM's kv_load_failure_policy
 * "recompute"): the answer is the same, its routing rows just start earlier.
 */
import type { RingserveConfig } from '../config.js';
import type { GenerateRequest } from '../protocol/generate-request.js';
import {
  kvHandle,
  promptDigest,
  readKvImport,
  wantsRemoteDecode,
} from '../protocol/kv-transfer-params.js';

export interface KvTransferFields {
  pinKv: boolean;
  importKvTokens: number;
}

const NONE: KvTransferFields = { pinKv: false, importKvTokens: 0 };

/**
 * The ADD fields of a request's KV transfer. For a pinning request it also sets the request's
 * `kvTransferParams` to the handle, which is what its answer carries.
 */
export function kvTransferFields(
  request: GenerateRequest,
  requestId: string,
  config: RingserveConfig,
): KvTransferFields {
  const params = request.kvTransferParams;
  if (config.role === 'prefill' || wantsRemoteDecode(params)) {
    const expiresAtMs = Date.now() + config.kvTransferTimeoutS * 1000;
    const prompt = request.promptTokenIds;
    request.kvTransferParams = kvHandle(requestId, prompt, request.cacheSalt, expiresAtMs);
    return { pinKv: true, importKvTokens: 0 };
  }
  const handle = readKvImport(params);
  if (handle === null) return NONE;
  const usable =
    handle.expiresAtMs > Date.now() &&
    handle.promptDigest === promptDigest(request.promptTokenIds, request.cacheSalt);
  return usable ? { pinKv: false, importKvTokens: handle.numTokens } : NONE;
}
