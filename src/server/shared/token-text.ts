// The bytes a logprob's `token` shows. vLLM decodes each logprob's id alone without skipping
// special tokens (`<|im_end|>` shows as itself), while the completion's text leaves them out; the
// served tokenizer's byte table writes either way, the preset stand-ins only the text's way.
import type { TokenBytes } from '../../protocol/openai-logprobs.js';
import { TokenBytesTable } from '../../tokenizer/token-bytes.js';
import type { TokenByteSource } from './detokenizer.js';

export function tokenTextSource(tokens: TokenByteSource): TokenBytes {
  if (!(tokens instanceof TokenBytesTable)) return tokens;
  return {
    maxTokenBytes: tokens.maxTokenBytes,
    write: (id, out, offset) => tokens.writeText(id, out, offset, false),
  };
}
