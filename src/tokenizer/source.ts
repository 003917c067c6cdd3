import { loadTokenizer } from './load.js';
import { tokenizerForModel } from './presets.js';
import type { Tokenizer } from './tokenizer.js';

/** Which tokenizer a process serves: `--tokenizer DIR` when given, else the model's own. */
export interface TokenizerSource {
  /** `--model`: a preset, or a model directory holding its tokenizer files. */
  preset: string;
  /** A local Hugging Face tokenizer directory; null or '' for the model's. */
  dir?: string | null;
}

/** Loads the source's tokenizer (the model's once per thread). */
export function openTokenizer(source: TokenizerSource): Promise<Tokenizer> {
  return source.dir ? loadTokenizer(source.dir) : tokenizerForModel(source.preset);
}
