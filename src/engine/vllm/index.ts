/**
 * The vLLM v1 engine protocol codec (docs/vllm-protocol.md): what the bridge (the frontend) and
 * the headless simulator (the engine, headless/) both import. Transport (ZMQ sockets) lives with
 * each of them.
 */
export { guessLayout, type LayoutGuess, parseRelease } from './detect.js';
export {
  type DpGroupConfig,
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
  type RegistrationValues,
} from './handshake.js';
export {
  AUTO_VLLM_VERSION,
  describeLayouts,
  getVllmLayout,
  layoutForOutputFields,
  NEWEST_VLLM_LAYOUT,
  VLLM_LAYOUTS,
  VLLM_VERSION_NAMES,
  type VllmLayout,
} from './layouts.js';
export { bytesOf } from './ndarray.js';
export {
  ENGINE_CORE_DEAD,
  encodeUtilityReply,
  encodeWaveMessage,
  OutputRecord,
  OutputsEncoder,
  type PrefillStats,
  type SchedulerStatsFields,
  type UtilityReply,
  VllmFinishReason,
  type WaveFields,
} from './outputs.js';
export {
  type LayoutMode,
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
  decodeStartDpWave,
  decodeUtility,
  encodeAbort,
  encodeAdd,
  encodeStartDpWave,
  encodeUtility,
  REQUEST_TYPE_FRAMES,
  RequestType,
  type UtilityCall,
  type VllmAddRequest,
} from './requests.js';
export type { ResolvedSamplingParams, VllmSamplingParams } from './sampling-params.js';
