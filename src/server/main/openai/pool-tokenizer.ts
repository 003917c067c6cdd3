/** The OpenAI routes' PromptTokenizer over the served tokenizer's pool (src/tokenizer/pool.ts). */
import type { TokenizerPool } from '../../../tokenizer/pool.js';
import type { PromptTokenizer } from './prompt-tokenizer.js';

export function poolPromptTokenizer(pool: TokenizerPool): PromptTokenizer {
  return {
    encode: (text, addSpecialTokens) => pool.encode(text, { addSpecialTokens }),
    encodeChat: async (messages, o) =>
      (
        await pool.renderChatAndEncode(messages, {
          tools: o.tools,
          addGenerationPrompt: o.addGenerationPrompt,
          continueFinalMessage: o.continueFinalMessage,
          chatTemplateKwargs: o.chatTemplateKwargs,
          addSpecialTokens: o.addSpecialTokens,
        })
      ).ids,
    decode: (ids) => pool.decode(ids),
  };
}
