/**
 * The ordinary text vocabulary of a Hugging Face tokenizer.json, as the presets' cards count it
 * (ModelCard.textVocabSize): the ids below its first added token. Added tokens that open the id
 * space (SentencePiece's <unk>, <s>, </s> at 0, 1, 2: Llama-2, Mixtral) come before the text, not
 * after it, so a run of them from id 0 is skipped; with no added token after the text the whole
 * vocabulary counts (undefined).
 *
 * Only the added_tokens array is parsed. A whole tokenizer.json (Qwen3's is 11 MB: ~150k
 * vocabulary entries and as many merges) would be parsed in every process that reads the card,
 * the API servers' main thread included, whose heap the tokenizer thread exists to keep small
 * (README, "Models and tokenizers"). The tokenizers library writes "added_tokens" right after "version",
 * "truncation" and "padding" (tokenizers/src/tokenizer/serialization.rs), so its first occurrence
 * is the top-level key; anything else found there falls back to parsing the whole file.
 */
export function textVocabSizeOf(tokenizerJson: string): number | undefined {
  const ids = addedTokenIds(tokenizerJson);
  ids.sort((a, b) => a - b);
  let next = 0;
  for (const id of ids) {
    if (id === next) next++;
    else if (id > next) return id;
  }
  return undefined;
}

interface AddedToken {
  id: number;
}

function addedTokenIds(text: string): number[] {
  const slice = addedTokensSlice(text);
  if (slice !== null) {
    try {
      const tokens = JSON.parse(slice) as unknown;
      if (isAddedTokenList(tokens)) return tokens.map((t) => t.id);
    } catch {
      // Not the array it looked like: parse the whole file below.
    }
  }
  const whole = JSON.parse(text) as { added_tokens?: unknown };
  return isAddedTokenList(whole.added_tokens) ? whole.added_tokens.map((t) => t.id) : [];
}

function isAddedTokenList(v: unknown): v is AddedToken[] {
  return (
    Array.isArray(v) &&
    v.every((t) => typeof t === 'object' && t !== null && Number.isSafeInteger(t.id) && t.id >= 0)
  );
}

const KEY = '"added_tokens"';

/** The text of the array after the first `"added_tokens":`, or null when it is not one. */
function addedTokensSlice(text: string): string | null {
  const key = text.indexOf(KEY);
  if (key < 0) return null;
  let i = skipSpace(text, key + KEY.length);
  if (text[i] !== ':') return null;
  i = skipSpace(text, i + 1);
  if (text[i] !== '[') return null;
  const start = i;
  let depth = 0;
  let inString = false;
  for (; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '[' || c === '{') depth++;
    else if (c === ']' || c === '}') {
      depth--;
      if (depth === 0) return text.slice(start, i + 1);
    }
  }
  return null;
}

function skipSpace(text: string, from: number): number {
  let i = from;
  while (i < text.length && /\s/.test(text[i] as string)) i++;
  return i;
}
