/**
 * The vLLM v1 engine protocol codec (VLLM-ENGINE.md): what the bridge (the frontend) and the
 * headless simulator (the engine) both import. Transport (ZMQ sockets) lives with each of them.
 */
export {
  decodeHandshake,
  decodeInit,
  decodeRegistration,
  encodeHandshake,
  encodeInit,
  encodeRegistration,
  engineIdentity,
  type HandshakeMessage,
  type HandshakeStatus,
  type InitMessage,
  type Registration,
} from './handshake.js';
export {
  DEFAULT_VLLM_LAYOUT,
  getVllmLayout,
  SAMPLING_MASK_ARG,
  SAMPLING_MASKS_KEY,
  VLLM_LAYOUTS,
  VLLM_VERSION_NAMES,
  type VllmLayout,
} from './layouts.js';
export { bytesOf } from './ndarray.js';
export {
  ENGINE_CORE_DEAD,
  encodeUtilityReply,
  OutputRecord,
  OutputsEncoder,
  type PrefillStats,
  type SchedulerStatsFields,
  type UtilityReply,
  VllmFinishReason,
} from './outputs.js';
export {
  OutputsReader,
  type OutputsSink,
  OutputView,
  readOutputs,
  SchedulerStatsView,
} from './outputs-reader.js';
export {
  type DecodedAddRequest,
  decodeAbort,
  decodeAdd,
  decodeUtility,
  encodeAbort,
  encodeAdd,
  encodeUtility,
  REQUEST_TYPE_FRAMES,
  RequestType,
  type UtilityCall,
  type VllmAddRequest,
} from './requests.js';
export type { ResolvedSamplingParams, VllmSamplingParams } from './sampling-params.js';
