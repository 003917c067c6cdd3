/**
 * Why the engine refused a request. A refused request is a request-scoped failure (vLLM's
 * distinction): it becomes one output row with FinishReason.Error and this code in `rejectReason`;
 * the engine carries on. The API server reports it with RS_ERR_ENGINE_REQUEST_FAILED and the
 * message below. Values are stable (they cross the ring); never reuse one.
 */
export enum RejectReason {
  None = 0,
  PromptEmpty = 1,
  PromptTooLong = 2,
  TokenOutOfRange = 3,
  BadParams = 4,
  KvCacheTooSmall = 5,
  DuplicateSlot = 6,
  BadRoute = 7,
  /** The engine process could not decode the request's ADD record. */
  MalformedRecord = 8,
  /** The engine behind the core (a vLLM engine) died or went silent with the request in flight. */
  EngineDead = 9,
  /** The engine behind the core ended the request with an error (vLLM's finish reason ERROR). */
  EngineFailed = 10,
  /** The engine behind the core sent routing rows of another shape than the model's card gives. */
  RoutingShape = 11,
  /** The request's LoRA adapter is not loaded (it was unloaded while the request was on its way). */
  LoraNotLoaded = 12,
  /** The engine answered kv_transfer_params larger than MAX_KV_PARAMS_BYTES (messages.ts). */
  KvParamsTooLarge = 13,
}

const MESSAGES: readonly string[] = [
  'no error',
  'the prompt is empty',
  'prompt length + max_tokens exceeds max_model_len',
  'a prompt token id is outside the vocabulary',
  'a sampling parameter is out of range',
  'the request cannot fit in the KV cache even alone (prompt + max_tokens > num_gpu_blocks * block_size)',
  'a request with this server and slot is already in flight; both are ended',
  'server or slot is not a non-negative 32-bit integer',
  'the request record could not be decoded',
  'the engine died or stopped answering while the request ran',
  'the engine failed the request (vLLM finish reason ERROR; retryable)',
  "the engine's routing rows have another shape than --model's config gives (the engine-core log names both)",
  "the request's LoRA adapter is not loaded (it was unloaded before the request ran)",
  "the engine's kv_transfer_params for the request are larger than 65536 bytes of msgpack",
];

/** The human-readable reason for a reject code (for the API server's error message). */
export function rejectReasonMessage(reason: number): string {
  return MESSAGES[reason] ?? `unknown engine reject reason ${reason}`;
}
