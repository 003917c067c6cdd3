/**
 * POST /tokenize and POST /detokenize, as vLLM serves them: a prompt, or chat messages through the
 * model's chat template, to `{count, max_model_len, tokens, token_strs}`; token ids back to
 * `{prompt}` (special tokens kept, as vLLM's tokenizer.decode keeps them). Texts are encoded on the
 * tokenizer thread (TokenizerPool), never on this event loop.
 */
import type { FastifyInstance } from 'fastify';
import type { RingserveConfig } from '../../../../config.js';
import {
  parseDetokenizeRequest,
  parseTokenizeRequest,
} from '../../../../protocol/tokenize-request.js';
import type { TokenizerPool } from '../../../../tokenizer/pool.js';
import type { ServedModels } from '../../served-models.js';

export interface TokenizeDeps {
  config: RingserveConfig;
  tokenizers: TokenizerPool;
  /** What `model` may name (the base model, a loaded LoRA adapter). */
  models: ServedModels;
}

export function registerTokenizeRoutes(app: FastifyInstance, deps: TokenizeDeps): void {
  const { config, tokenizers } = deps;
  // The tokenizer is the base model's, an adapter's too (vLLM's LoRA adapters keep the vocabulary).
  const checkModel = (model: string | null): void => {
    deps.models.loraId(model);
  };

  app.post('/tokenize', async (request) => {
    const req = parseTokenizeRequest(request.body);
    checkModel(req.model);
    const ids =
      req.kind === 'prompt'
        ? await tokenizers.encode(req.prompt, { addSpecialTokens: req.addSpecialTokens })
        : (
            await tokenizers.renderChatAndEncode(req.messages, {
              tools: req.tools,
              addGenerationPrompt: req.addGenerationPrompt,
              continueFinalMessage: req.continueFinalMessage,
              chatTemplateKwargs: req.chatTemplateKwargs,
              addSpecialTokens: req.addSpecialTokens,
            })
          ).ids;
    const strs = req.returnTokenStrs ? await tokenizers.tokenStrs(ids) : null;
    return {
      count: ids.length,
      max_model_len: config.maxModelLen,
      tokens: Array.from(ids),
      token_strs: strs === null ? null : strs.map((s) => s ?? ''),
    };
  });

  app.post('/detokenize', async (request) => {
    const req = parseDetokenizeRequest(request.body, tokenizers.view.vocabSize);
    checkModel(req.model);
    return { prompt: await tokenizers.decode(req.tokens, { skipSpecialTokens: false }) };
  });
}
