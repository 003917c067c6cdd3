// The tokenizer layer's public API: what the server, the cluster roots and the OpenAI routes use.
export type {
  ChatContentPart,
  ChatMessage,
  ChatTemplateOptions,
} from './chat-template.js';
export { RS_ERR_TOKENIZER_TEMPLATE } from './errors.js';
export { loadTokenizer, type TokenizerFiles, tokenizerFromFiles } from './load.js';
export {
  type RenderedPrompt,
  TokenizerPool,
  type TokenizerPoolOptions,
} from './pool.js';
export { TOKENIZER_PRESETS, tokenizerForModel } from './presets.js';
export { openTokenizer, type TokenizerSource } from './source.js';
export { type SharedTokenBytes, TokenBytesTable, TokenFlag } from './token-bytes.js';
export { type DecodeOptions, type EncodeOptions, Tokenizer } from './tokenizer.js';
export { type TokenizerDescription, TokenizerView } from './tokenizer-view.js';
