/** The TypeScript client of ringserve's generate API: request, decode, check. */
export {
  type DecodedChoice,
  type DecodedMask,
  type DecodedRouting,
  type DecodedUsage,
  decodeGenerateBody,
  decodeGenerateResponse,
  decodePackedArray,
  type GenerateResult,
} from './decode.js';
export {
  type ClientHttpError,
  type GenerateOptions,
  GenerateStream,
  generate,
  generateStream,
} from './generate.js';
export { checkInvariants } from './invariants.js';
export { decodePromptLogprobs } from './prompt-logprobs.js';
export { type SseEvent, SseParser, StreamAccumulator, type StreamDelta } from './stream.js';
