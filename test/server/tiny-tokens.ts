// The token bytes the server's tests detokenize with: the committed tiny tokenizer
// (tokenizers/tiny, what the `tiny` preset serves), as an API server detokenizes with its served
// tokenizer's table. Its ids 0..255 are the 256 single bytes (id = byte value, so a character of
// several bytes is several tokens), 256..996 merges of up to 64 bytes, and 997..999 the special
// tokens `<|im_start|>`, `<|endoftext|>` and `<|im_end|>` (999 and 998 are its EOS ids).
import { tokenizerForModel } from '../../src/tokenizer/presets.js';

export const tiny = await tokenizerForModel('tiny');
/** Its byte table: the TokenBytes the output side is given. */
export const TINY_BYTES = tiny.bytes;
export const [TINY_IM_END, TINY_ENDOFTEXT] = tiny.eosTokenIds as [number, number];

/** The ids of `text` (no special tokens added). */
export function tinyIds(text: string): number[] {
  return Array.from(tiny.encode(text, { addSpecialTokens: false }));
}

/** The id of the one token whose text is `text` (throws when it is not one token). */
export function tinyId(text: string): number {
  const ids = tinyIds(text);
  if (ids.length !== 1) throw new Error(`"${text}" is ${ids.length} tiny tokens, not one`);
  return ids[0]!;
}

/** One token per character of an ASCII text: each character's single-byte token. */
export function tinyChars(text: string): number[] {
  return [...text].map(tinyId);
}
