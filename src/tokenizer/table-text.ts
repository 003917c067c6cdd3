// Text from a token byte table alone (token-bytes.ts): ids to text, one token's text, its
// byte-level spelling, the size of the plain-text vocabulary. What a byte-level BPE tokenizer does
// without its merge tables, so the full Tokenizer (on a tokenizer thread) and the API server's main
// thread (tokenizer-view.ts, which holds only the shared table) answer the same way.
import { BYTE_TO_CHAR } from './byte-level.js';
import type { TokenBytesTable } from './token-bytes.js';

const textDecoder = new TextDecoder('utf-8');

/** Ids outside the table decode to nothing; a part of a character left alone to U+FFFD. */
export function decodeWithTable(
  table: TokenBytesTable,
  ids: ArrayLike<number>,
  skipSpecialTokens: boolean,
): string {
  let length = 0;
  for (let i = 0; i < ids.length; i++) length += table.tokenLength(ids[i]!);
  const out = new Uint8Array(length);
  let at = 0;
  for (let i = 0; i < ids.length; i++) at += table.write(ids[i]!, out, at, skipSpecialTokens);
  return textDecoder.decode(out.subarray(0, at));
}

/** One token decoded alone: part of a character decodes to U+FFFD; special tokens give their text. */
export function tokenTextOf(table: TokenBytesTable, id: number): string {
  return textDecoder.decode(table.bytesOf(id));
}

/** A byte-level vocabulary's spelling of a token (`Ġworld`); an added token's is its text. */
export function byteLevelSpelling(table: TokenBytesTable, id: number): string | null {
  if (!table.has(id)) return null;
  if (table.isAdded(id)) return tokenTextOf(table, id);
  let spelling = '';
  for (const b of table.bytesOf(id)) spelling += BYTE_TO_CHAR[b];
  return spelling;
}

/** Ids below this are all ordinary text tokens: present, neither added nor special. */
export function textVocabSizeOf(table: TokenBytesTable): number {
  let id = 0;
  while (id < table.size && table.has(id) && !table.isAdded(id) && !table.isSpecial(id)) id++;
  return id;
}
