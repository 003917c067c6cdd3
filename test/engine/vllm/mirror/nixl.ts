/**
 * vLLM's NixlConnector as an engine shows it on the wire, for the mirror engine (researched from
 * vLLM main mid/late 2026: vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py, the toy
 * proxy tests/v1/kv_connector/nixl_integration/toy_proxy_server.py, and the SMG / vLLM Rust client
 * ports; no release tag pinned). A request's kv_transfer_params arrive in
 * `SamplingParams.extra_args["kv_transfer_params"]`:
 *
 * - `do_remote_decode: true` (a prefill leg): the final output, when it finished LENGTH or STOP,
 *   carries kv_transfer_params naming the blocks the engine keeps (`request_finished`); any other
 *   finish carries nil.
 * - `do_remote_prefill: true` with remote_block_ids, remote_engine_id, remote_request_id,
 *   remote_host and remote_port all set (a decode leg): the prompt but its last token is loaded, so
 *   only position P - 1 on is forwarded (routed), and prefill_stats counts the loaded tokens as
 *   external; without all five the prompt is computed locally.
 */
import type { EngineCoreOutput } from './codec-outputs.js';
import type { SamplingParams } from './codec-sampling.js';

/** The mirror engine's connector: its engine id and where its side channel would be. */
export interface MirrorNixl {
  engineId: string;
  host: string;
  port: number;
  blockSize: number;
  /** Extra bytes of a `pad` string in every handle (to test a frontend's bound); 0: none. */
  pad: number;
}

const NEEDED = [
  'remote_block_ids',
  'remote_engine_id',
  'remote_request_id',
  'remote_host',
  'remote_port',
] as const;

function paramsOf(sp: SamplingParams | null | undefined): Record<string, unknown> | null {
  const kv = sp?.extra_args?.kv_transfer_params;
  return typeof kv === 'object' && kv !== null ? (kv as Record<string, unknown>) : null;
}

/** A decode leg whose prompt (but its last token) comes from a prefill engine. */
export function loadsRemote(sp: SamplingParams | null | undefined): boolean {
  const kv = paramsOf(sp);
  return kv?.do_remote_prefill === true && NEEDED.every((k) => kv[k] !== null && k in kv);
}

/** A prefill leg: the final output answers a handle. */
export function keepsForRemote(sp: SamplingParams | null | undefined): boolean {
  return paramsOf(sp)?.do_remote_decode === true;
}

/** What request_finished answers for a prefill leg that finished LENGTH or STOP. */
export function handleOf(
  nixl: MirrorNixl,
  requestId: string,
  promptLen: number,
): Record<string, unknown> {
  const blocks = Math.ceil(promptLen / nixl.blockSize);
  const handle: Record<string, unknown> = {
    do_remote_prefill: true,
    do_remote_decode: false,
    remote_block_ids: [Array.from({ length: blocks }, (_, i) => 100 + i)],
    remote_engine_id: nixl.engineId,
    remote_request_id: requestId,
    remote_host: nixl.host,
    remote_port: nixl.port,
    tp_size: 1,
  };
  if (nixl.pad > 0) handle.pad = 'x'.repeat(nixl.pad);
  return handle;
}

/** Sets the final output's kv_transfer_params as the connector would (nil unless a kept prefill). */
export function finishKv(
  nixl: MirrorNixl | null,
  out: EngineCoreOutput,
  sp: SamplingParams | null | undefined,
  promptLen: number,
): void {
  if (nixl === null || !keepsForRemote(sp)) return;
  const kept = out.finish_reason === 0 || out.finish_reason === 1;
  out.kv_transfer_params = kept ? handleOf(nixl, out.request_id, promptLen) : null;
}
