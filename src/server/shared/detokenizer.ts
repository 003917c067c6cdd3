// Incremental detokenization for stop strings, in bytes. A request with stop strings needs its
// text; the output worker appends each new token's UTF-8 bytes to a per-slot window and looks for
// a stop string ending in the new bytes. Matching UTF-8 bytes is matching text: UTF-8 is
// self-synchronising, so a valid stop string's bytes can only occur in valid text at a character
// boundary, and a character split over two tokens (byte-fallback tokens) simply completes the
// match one token later, as vLLM's detokenizer does when it holds back an incomplete character.
// Nothing is allocated per token: windows and stop bytes live in preallocated typed arrays.
import { STOP_BYTES_LIMIT } from '../../protocol/stop-strings.js';
import type { SlotMetaTable } from './slot-meta.js';

/** The bytes of each token id: a real vocabulary, or the byte-level stand-in. */
export interface TokenByteSource {
  /** The most bytes write() can produce for one token. */
  readonly maxTokenBytes: number;
  /** Writes the UTF-8 bytes of `tokenId` at `out[offset..]`; returns how many (0 for special tokens). */
  write(tokenId: number, out: Uint8Array, offset: number): number;
}

/**
 * Token id -> 1 to 4 UTF-8 bytes by a fixed rule, for presets without a vocabulary. Ids below 256
 * are single raw bytes (like byte-fallback tokens `<0xNN>`, so a character can be split across
 * tokens); above, id - 256 picks a character of 1, 2, 3 or 4 UTF-8 bytes by its remainder mod 4.
 */
export class ByteLevelStandIn implements TokenByteSource {
  readonly maxTokenBytes = 4;
  readonly #special: Set<number>;

  constructor(specialTokenIds: readonly number[] = []) {
    this.#special = new Set(specialTokenIds);
  }

  write(tokenId: number, out: Uint8Array, offset: number): number {
    if (tokenId < 0 || this.#special.has(tokenId)) return 0;
    if (tokenId < 256) {
      out[offset] = tokenId;
      return 1;
    }
    const k = tokenId - 256;
    const n = k >>> 2;
    switch (k & 3) {
      case 0:
        return writeCodePoint(0x20 + (n % 95), out, offset);
      case 1:
        return writeCodePoint(0xa0 + (n % (0x800 - 0xa0)), out, offset);
      case 2: {
        // U+0800..U+FFFF without the surrogate block D800..DFFF.
        const cp = 0x800 + (n % (0x10000 - 0x800 - 0x800));
        return writeCodePoint(cp < 0xd800 ? cp : cp + 0x800, out, offset);
      }
      default:
        return writeCodePoint(0x10000 + (n % 0x100000), out, offset);
    }
  }
}

export function writeCodePoint(cp: number, out: Uint8Array, o: number): number {
  if (cp < 0x80) {
    out[o] = cp;
    return 1;
  }
  if (cp < 0x800) {
    out[o] = 0xc0 | (cp >> 6);
    out[o + 1] = 0x80 | (cp & 63);
    return 2;
  }
  if (cp < 0x10000) {
    out[o] = 0xe0 | (cp >> 12);
    out[o + 1] = 0x80 | ((cp >> 6) & 63);
    out[o + 2] = 0x80 | (cp & 63);
    return 3;
  }
  out[o] = 0xf0 | (cp >> 18);
  out[o + 1] = 0x80 | ((cp >> 12) & 63);
  out[o + 2] = 0x80 | ((cp >> 6) & 63);
  out[o + 3] = 0x80 | (cp & 63);
  return 4;
}

/** A vocabulary as one byte table: token i is bytes[starts[i] .. starts[i + 1]). */
export class VocabTable implements TokenByteSource {
  readonly maxTokenBytes: number;
  readonly #starts: Int32Array;
  readonly #bytes: Uint8Array;

  /** `tokens[i]` is token i's text; special tokens (skipped, as skip_special_tokens does) are "". */
  constructor(tokens: readonly (string | Uint8Array)[]) {
    const encoded = tokens.map((t) => (typeof t === 'string' ? Buffer.from(t, 'utf8') : t));
    this.#starts = new Int32Array(encoded.length + 1);
    let total = 0;
    let longest = 0;
    encoded.forEach((b, i) => {
      this.#starts[i] = total;
      total += b.length;
      longest = Math.max(longest, b.length);
    });
    this.#starts[encoded.length] = total;
    this.#bytes = new Uint8Array(total);
    for (let i = 0; i < encoded.length; i++) this.#bytes.set(encoded[i]!, this.#starts[i]!);
    this.maxTokenBytes = Math.max(1, longest);
  }

  get size(): number {
    return this.#starts.length - 1;
  }

  write(tokenId: number, out: Uint8Array, offset: number): number {
    if (tokenId < 0 || tokenId >= this.size) return 0;
    const from = this.#starts[tokenId]!;
    const to = this.#starts[tokenId + 1]!;
    out.set(this.#bytes.subarray(from, to), offset);
    return to - from;
  }
}

/**
 * Per-slot stop-string state for the output worker: a window of the latest text bytes, long enough
 * for the slot's longest stop string, and the match test. Only slots with stop strings use it.
 */
export class StopStringMatcher {
  /** After push() found a stop string: how many of the new token's bytes reach its end. */
  matchEnd = 0;
  readonly #source: TokenByteSource;
  readonly #meta: SlotMetaTable;
  readonly #windowBytes: number;
  readonly #window: Uint8Array;
  readonly #windowLen: Int32Array;
  readonly #longestStop: Int32Array;

  constructor(meta: SlotMetaTable, source: TokenByteSource) {
    this.#source = source;
    this.#meta = meta;
    // Room for the longest possible stop string's lookback plus one token's bytes, with slack so
    // the window is compacted only every few tokens.
    this.#windowBytes = STOP_BYTES_LIMIT + source.maxTokenBytes + 256;
    this.#window = new Uint8Array(meta.slots * this.#windowBytes);
    this.#windowLen = new Int32Array(meta.slots);
    this.#longestStop = new Int32Array(meta.slots);
  }

  /** Starts a request on `slot` (its stop strings are in the slot meta). */
  begin(slot: number): void {
    this.#windowLen[slot] = 0;
    let longest = 0;
    const count = this.#meta.stopCount(slot);
    for (let i = 0; i < count; i++) longest = Math.max(longest, this.#meta.stopLength(slot, i));
    this.#longestStop[slot] = longest;
  }

  /**
   * Appends a token's bytes; when `check` is set, returns the index of the first stop string (in
   * request order) that ends within those new bytes, else -1.
   */
  push(slot: number, tokenId: number, check: boolean): number {
    const base = slot * this.#windowBytes;
    let len = this.#windowLen[slot]!;
    const keep = this.#longestStop[slot]! - 1;
    if (len + this.#source.maxTokenBytes > this.#windowBytes) {
      this.#window.copyWithin(base, base + len - keep, base + len);
      len = keep;
    }
    const added = this.#source.write(tokenId, this.#window, base + len);
    const newLen = len + added;
    this.#windowLen[slot] = newLen;
    if (!check || added === 0) return -1;
    return this.#findStop(slot, base, len, newLen);
  }

  #findStop(slot: number, base: number, oldLen: number, newLen: number): number {
    const meta = this.#meta;
    const stopBytes = meta.stopBytes();
    const win = this.#window;
    let stopAt = meta.stopBytesOffset(slot);
    const count = meta.stopCount(slot);
    for (let i = 0; i < count; i++) {
      const n = meta.stopLength(slot, i);
      for (let end = oldLen + 1; end <= newLen; end++) {
        if (end < n) continue;
        let k = 0;
        const from = base + end - n;
        while (k < n && win[from + k] === stopBytes[stopAt + k]) k++;
        if (k === n) {
          this.matchEnd = end - oldLen;
          return i;
        }
      }
      stopAt += n;
    }
    return -1;
  }
}

/** Presets with a vocabulary the output worker knows: name -> token texts (or raw bytes). */
const VOCABULARIES: Readonly<Record<string, () => readonly (string | Uint8Array)[]>> = {
  tiny: tinyVocabulary,
};

/** The byte source for a preset: its vocabulary if one is known, else the byte-level stand-in. */
export function tokenByteSource(
  presetName: string,
  specialTokenIds: readonly number[],
): TokenByteSource {
  const vocab = VOCABULARIES[presetName];
  if (vocab === undefined) return new ByteLevelStandIn(specialTokenIds);
  const tokens = [...vocab()];
  for (const id of specialTokenIds) if (id >= 0 && id < tokens.length) tokens[id] = '';
  return new VocabTable(tokens);
}

const TINY_WORDS = (
  'the of and to in is that it for as with was on be by at this are from or an have not but ' +
  'what all were when we there can more which their if will one about so out up them time ' +
  'some would other into has its than then only first new also after two may any these way ' +
  'answer question step think therefore because number sum total equal result final box ' +
  'true false yes no let solve find value check each next here now why how where who write ' +
  'code function return print list end start begin done error test pass fail input output'
).split(' ');
const TINY_PUNCTUATION = [
  '.',
  ',',
  ':',
  ';',
  '!',
  '?',
  '\n',
  '\n\n',
  '(',
  ')',
  '=',
  '+',
  '-',
  '*',
  '/',
  '"',
  "'",
  '$',
  '\\boxed{',
  '}',
];

/**
 * The `tiny` preset's 1000-token vocabulary: 256 raw byte tokens (byte fallback, so 128..255 are
 * UTF-8 fragments), punctuation, digits, words with and without a leading space and capitalised,
 * two-letter pieces to fill, and the special tokens last (998 and 999, the preset's EOS ids).
 */
export function tinyVocabulary(): readonly (string | Uint8Array)[] {
  const tokens: (string | Uint8Array)[] = [];
  for (let b = 0; b < 256; b++) tokens.push(Uint8Array.of(b));
  const pieces: string[] = [...TINY_PUNCTUATION];
  for (let d = 0; d < 10; d++) pieces.push(String(d), ` ${d}`);
  for (const w of TINY_WORDS) {
    const cap = w[0]!.toUpperCase() + w.slice(1);
    pieces.push(` ${w}`, w, ` ${cap}`, cap);
  }
  for (let a = 0; a < 26; a++) {
    for (let b = 0; b < 26; b++) pieces.push(String.fromCharCode(97 + a, 97 + b));
  }
  for (let i = 0; tokens.length < 998; i++) tokens.push(pieces[i]!);
  tokens.push('<|endoftext|>', '<|im_end|>');
  return tokens;
}
