/**
 * `kv_transfer_params` of prefill/decode disaggregation, in the shape of vLLM's nixl connector:
 * the proxy sends a prefill instance `{"do_remote_decode": true}` (max_tokens 1), the prefill answer
 * carries a handle `{"do_remote_prefill": true, ...}`, and the proxy sends the decode instance the
 * same prompt with that handle (vLLM's tests/v1/kv_connector/nixl_integration/toy_proxy_server.py).
 * The handle names how many prompt tokens' KV the prefill instance keeps, until when, and a digest
 * of the prompt they belong to, so a decode instance never imports KV for another prompt.
 */
import { fail } from './fields.js';

/** What a decode instance reads from a prefill instance's handle. */
export interface KvImportHandle {
  numTokens: number;
  /** Unix ms after which the prefill instance has let the blocks go. */
  expiresAtMs: number;
  promptDigest: number;
}

const FIELD = 'kv_transfer_params';

/**
 * What a prefill leg hands a vLLM engine (vLLM's toy proxy,
 * tests/v1/kv_connector/nixl_integration/toy_proxy_server.py): keep the prompt's KV for a decode
 * engine and answer the handle naming it on the final output.
 */
export const NIXL_PREFILL_LEG: Readonly<Record<string, unknown>> = {
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
};

/** The request asks for a handle (a prefill instance with --role prefill always gives one). */
export function wantsRemoteDecode(params: Readonly<Record<string, unknown>> | null): boolean {
  return params?.do_remote_decode === true;
}

/** The handle a prefill instance answers with. */
export function kvHandle(
  requestId: string,
  prompt: Int32Array,
  cacheSalt: string | null,
  expiresAtMs: number,
): Record<string, unknown> {
  return {
    do_remote_decode: false,
    do_remote_prefill: true,
    remote_request_id: requestId,
    remote_num_tokens: prompt.length,
    remote_prompt_digest: promptDigest(prompt, cacheSalt),
    expires_at_ms: expiresAtMs,
  };
}

/**
 * The handle of a decode request, or null when it has none (`do_remote_prefill` not true). A
 * handle with a malformed field is a 400 naming it.
 */
export function readKvImport(
  params: Readonly<Record<string, unknown>> | null,
): KvImportHandle | null {
  if (params === null || params.do_remote_prefill !== true) return null;
  const int = (key: string, min: number): number => {
    const given = params[key];
    // msgpack carries integers past 2^32 (a unix-ms expiry) as uint64, which msgpackr reads as bigint.
    const v = typeof given === 'bigint' ? Number(given) : given;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
      fail(`${FIELD}.${key}`, `must be an integer >= ${min}`);
    }
    return v as number;
  };
  return {
    numTokens: int('remote_num_tokens', 1),
    expiresAtMs: int('expires_at_ms', 0),
    promptDigest: int('remote_prompt_digest', 0),
  };
}

/** FNV-1a over the prompt's token ids and the cache salt: which KV a handle is of. */
export function promptDigest(prompt: Int32Array, cacheSalt: string | null): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < prompt.length; i++) h = Math.imul(h ^ (prompt[i] as number), 0x01000193);
  if (cacheSalt !== null) {
    for (let i = 0; i < cacheSalt.length; i++)
      h = Math.imul(h ^ cacheSalt.charCodeAt(i), 0x01000193);
  }
  return h >>> 0;
}
