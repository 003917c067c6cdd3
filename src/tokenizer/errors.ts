import { createError } from '../errors.js';

/**
 * Codes of the tokenizer layer, made by the one factory in src/errors.ts and documented in
 * docs/errors.md. A tokenizer directory that cannot be loaded is a configuration error
 * (RS_ERR_CONFIG_INVALID naming `--tokenizer`); these are the per-request ones.
 */

/** The chat template failed to render these messages (its own raise_exception, or a bad value). */
export const RS_ERR_TOKENIZER_TEMPLATE = createError(
  'RS_ERR_TOKENIZER_TEMPLATE',
  'the chat template cannot render this conversation: %s',
  400,
  { param: 'messages' },
);
