/**
 * The arguments of the control commands an RL trainer's admin calls become (control-channel.ts):
 * written by an API server as the command's JSON text, read by the engine core. They are what
 * prime-rl's inference server takes (docs/contract.md, "Control plane"): its `/init_broadcaster`
 * body, and vLLM's `LoadLoRAAdapterRequest`.
 */

/**
 * prime-rl's `/init_broadcaster` body: where the trainer's weight broadcaster (NCCL's TCPStore,
 * or NIXL's ModelExpress session) listens and which ranks this engine's workers take. prime-rl
 * reads each key with `.get()`, so a missing one is null; it passes them positionally to its
 * workers' `init_broadcaster(host, port, rank_offset, inference_world_size, timeout,
 * quantize_in_weight_transfer, session_id)`.
 */
export interface BroadcasterArgs {
  host: string | null;
  port: number | null;
  rankOffset: number | null;
  inferenceWorldSize: number | null;
  /** Seconds the rendezvous may take (prime-rl's default 1,200). */
  timeout: number | null;
  quantizeInWeightTransfer: boolean;
  /** NIXL's session; prime-rl defaults it to "default". */
  sessionId: string;
}

/** A LoRA adapter to load: vLLM's LoadLoRAAdapterRequest (prime-rl reloads one name in place). */
export interface LoraArgs {
  name: string;
  path: string;
  inplace: boolean;
}

/** The most LoRA adapters loaded at once (their names and paths travel in the engine note). */
export const MAX_LORA_ADAPTERS = 32;

/** The positional arguments prime-rl's workers take, in their order. */
export function broadcasterArgList(a: BroadcasterArgs): unknown[] {
  return [
    a.host,
    a.port,
    a.rankOffset,
    a.inferenceWorldSize,
    a.timeout,
    a.quantizeInWeightTransfer,
    a.sessionId,
  ];
}

export function readBroadcasterArgs(text: string): BroadcasterArgs {
  const v = JSON.parse(text) as Partial<BroadcasterArgs>;
  return {
    host: typeof v.host === 'string' ? v.host : null,
    port: typeof v.port === 'number' ? v.port : null,
    rankOffset: typeof v.rankOffset === 'number' ? v.rankOffset : null,
    inferenceWorldSize: typeof v.inferenceWorldSize === 'number' ? v.inferenceWorldSize : null,
    timeout: typeof v.timeout === 'number' ? v.timeout : null,
    quantizeInWeightTransfer: v.quantizeInWeightTransfer === true,
    sessionId: typeof v.sessionId === 'string' ? v.sessionId : 'default',
  };
}

export function readLoraArgs(text: string): LoraArgs {
  const v = JSON.parse(text) as Partial<LoraArgs>;
  return {
    name: typeof v.name === 'string' ? v.name : '',
    path: typeof v.path === 'string' ? v.path : '',
    inplace: v.inplace === true,
  };
}

/** One loaded adapter, as the engine note lists it for the API servers. */
export interface LoraAdapter {
  /** vLLM's lora_int_id: > 0, stable across in-place reloads of the same name. */
  id: number;
  name: string;
  path: string;
}
