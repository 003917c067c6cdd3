// Token bytes on the output side (TokenBytes, src/protocol/token-bytes.ts): what a thread's start
// data gives it to detokenize with (tokenBytesFor: the served tokenizer's shared table, else the
// byte-level stand-in), and incremental detokenization for stop strings.
//
// Stop strings are matched in bytes. A request with stop strings needs its text; the output worker
// appends each new token's UTF-8 bytes to a per-slot window and looks for a stop string ending in
// the new bytes. Matching UTF-8 bytes is matching text: UTF-8 is self-synchronising, so a valid
// stop string's bytes can only occur in valid text at a character boundary, and a character split
// over two tokens (byte-fallback tokens) simply completes the match one token later, as vLLM's
// detokenizer does when it holds back an incomplete character. Nothing is allocated per token:
// windows and stop bytes live in preallocated typed arrays.

import { STOP_BYTES_LIMIT } from '../../protocol/stop-strings.js';
import type { TokenBytes } from '../../protocol/token-bytes.js';
import { type SharedTokenBytes, TokenBytesTable } from '../../tokenizer/token-bytes.js';
import type { SlotMetaTable } from './slot-meta.js';

/**
 * What a thread is told to detokenize with (in the output worker's and the packers' start data):
 * the served tokenizer's byte table, shared, not copied; without one (benchmarks, the fuzzer,
 * tests that start the output side alone), the byte-level stand-in with these special ids.
 */
export interface TokenBytesData {
  tokenBytes?: SharedTokenBytes;
  specialTokenIds: readonly number[];
}

/** The TokenBytes a thread's start data names. */
export function tokenBytesFor(data: TokenBytesData): TokenBytes {
  return data.tokenBytes === undefined
    ? new ByteLevelStandIn(data.specialTokenIds)
    : new TokenBytesTable(data.tokenBytes);
}

/**
 * Token id -> 1 to 4 UTF-8 bytes by a fixed rule, for an output side started without a tokenizer.
 * Ids below 256 are single raw bytes (like byte-fallback tokens `<0xNN>`, so a character can be
 * split across tokens); above, id - 256 picks a character of 1, 2, 3 or 4 UTF-8 bytes by its
 * remainder mod 4, so every id has text, and one token may be a whole multi-byte character (which
 * the committed tiny tokenizer has none of). Special ids have no text: they write nothing, whether
 * skipped or not.
 */
export class ByteLevelStandIn implements TokenBytes {
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

/**
 * Per-slot stop-string state for the output worker: a window of the latest text bytes, long enough
 * for the slot's longest stop string, and the match test. Only slots with stop strings use it.
 */
export class StopStringMatcher {
  /** After push() found a stop string: how many of the new token's bytes reach its end. */
  matchEnd = 0;
  readonly #source: TokenBytes;
  readonly #meta: SlotMetaTable;
  readonly #windowBytes: number;
  readonly #window: Uint8Array;
  readonly #windowLen: Int32Array;
  readonly #longestStop: Int32Array;

  constructor(meta: SlotMetaTable, source: TokenBytes) {
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
    const added = this.#source.write(tokenId, this.#window, base + len, true);
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
