/**
 * Prefill/decode on the API server: what a request's ADD record says about KV transfer, and the
 * handle a prefill answer carries. A prefill instance (--role prefill, or a request with
 * `do_remote_decode`) has the engine pin the prompt's KV and answers `kv_transfer_params` naming it;
 * a request carrying a prefill instance's handle imports that KV unless the handle expired or is of
 * another prompt, in which case the prompt is recomputed here (vLLM's kv_load_failure_policy
 * "recompute"): the answer is the same, its routing rows just start earlier.
 *
 * Behind `--engine vllm` the engine's KV connector does all of that: the ADD carries the request's
 * kv_transfer_params as bytes for the engine (a prefill leg: vLLM's toy proxy's map), unchanged,
 * and the answer's are the ones the engine sent on the final output (null when it sent none).
 */
import type { RingserveConfig } from '../../config.js';
import type { GenerateRequest } from '../../protocol/generate-request.js';
import {
  kvHandle,
  NIXL_PREFILL_LEG,
  promptDigest,
  readKvImport,
  wantsRemoteDecode,
} from '../../protocol/kv-transfer-params.js';
import { encodeKvParams } from './engine-kv-params.js';

export interface KvTransferFields {
  pinKv: boolean;
  importKvTokens: number;
  /** kv_transfer_params for an engine that takes them (`--engine vllm`), as msgpack; or null. */
  kvParams: Uint8Array | null;
}

const NONE: KvTransferFields = { pinKv: false, importKvTokens: 0, kvParams: null };

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
  if (config.engine === 'vllm') return engineKvFields(request, config);
  if (config.role === 'prefill' || wantsRemoteDecode(params)) {
    const expiresAtMs = Date.now() + config.kvTransferTimeoutS * 1000;
    const prompt = request.promptTokenIds;
    request.kvTransferParams = kvHandle(requestId, prompt, request.cacheSalt, expiresAtMs);
    return { pinKv: true, importKvTokens: 0, kvParams: null };
  }
  const handle = readKvImport(params);
  if (handle === null) return NONE;
  const usable =
    handle.expiresAtMs > Date.now() &&
    handle.promptDigest === promptDigest(request.promptTokenIds, request.cacheSalt);
  return usable ? { pinKv: false, importKvTokens: handle.numTokens, kvParams: null } : NONE;
}

/**
 * A bridged instance: the engine gets the client's kv_transfer_params as they are, or a prefill
 * leg's (the client's keys over vLLM's toy proxy's map), and the answer carries the engine's own
 * (the output path sets them when they come; until then none).
 */
function engineKvFields(request: GenerateRequest, config: RingserveConfig): KvTransferFields {
  const params = request.kvTransferParams;
  request.kvTransferParams = null;
  const prefill = config.role === 'prefill' || wantsRemoteDecode(params);
  if (!prefill && params === null) return NONE;
  const value = prefill ? { ...NIXL_PREFILL_LEG, ...params, do_remote_decode: true } : params!;
  return { pinKv: false, importKvTokens: 0, kvParams: encodeKvParams(value) };
}
