// glm-4.5-air's tokenizer. GLM-4.5's own tokenizer.json is on the Hugging Face hub only (no npm
// package ships it, and nothing is downloaded), so the preset gets a stand-in of GLM's shape,
// built at load time: Qwen3's byte-level BPE cut to GLM's 151329 text ids (a prefix of Qwen's
// merges, so it stays a complete BPE), GLM's 36 special and added tokens at GLM's ids (151329
// <|endoftext|> ... 151336 <|user|>, 151338 <|observation|>, ...; listed from GLM-4.5's
// tokenizer_config.json as remembered, not checked against it), a chat template in GLM-4.5's
// format written by the project, and GLM's EOS ids. Text ids are Qwen's, not GLM's: counts and
// ids of ordinary text differ from the real model's; special ids, the template and EOS match.
import type { TokenizerConfig, TokenizerFiles } from './load.js';

/** GLM-4.5's first special id: text tokens are the ids below. */
export const GLM_TEXT_VOCAB = 151329;

/** A GLM-shaped tokenizer.json from Qwen3's, and GLM's config (added tokens in added_tokens_decoder). */
export function glmTokenizerJson(
  qwen: TokenizerFiles['tokenizer'],
  glmConfig: TokenizerConfig,
): TokenizerFiles['tokenizer'] {
  const model = qwen.model;
  const vocab: Record<string, number> = {};
  for (const [token, id] of Object.entries(model.vocab as Record<string, number>)) {
    if (id < GLM_TEXT_VOCAB) vocab[token] = id;
  }
  // Qwen3's merges are [left, right] pairs; a merge stays when its parts and result are GLM text ids.
  const merges = ((model.merges ?? []) as [string, string][]).filter(
    ([a, b]) => vocab[a] !== undefined && vocab[b] !== undefined && vocab[a + b] !== undefined,
  );
  const decoder = (glmConfig.added_tokens_decoder ?? {}) as Record<string, { content: string }>;
  const addedTokens = Object.entries(decoder).map(([id, t]) => ({ ...t, id: Number(id) }));
  return { ...qwen, added_tokens: addedTokens, model: { ...model, vocab, merges } };
}
