/**
 * UTF-8 as the OpenAI answers need it when text is built from token bytes, not from JS strings: the
 * length of one well-formed sequence (or of the maximal ill-formed subpart that a decoder replaces
 * with one U+FFFD, as WHATWG's decoder and Python's `errors="replace"` do), where a byte run stops
 * ending in the middle of a character (a stream holds that tail back until the next token), and
 * how many characters a run holds (`text_offset` counts code points, as Python's len() does).
 */

/**
 * At `bytes[at]` (with `at < end`): the length of a well-formed sequence as a positive number, or
 * of the ill-formed subpart to replace as a negative one. A sequence cut short by `end` counts as
 * ill-formed: a caller that may see more bytes later asks completeLength() first.
 */
export function sequenceAt(bytes: Uint8Array, at: number, end: number): number {
  const b = bytes[at]!;
  if (b < 0x80) return 1;
  let need: number;
  let lo = 0x80;
  let hi = 0xbf;
  if (b >= 0xc2 && b <= 0xdf) need = 1;
  else if (b >= 0xe0 && b <= 0xef) {
    need = 2;
    if (b === 0xe0) lo = 0xa0;
    else if (b === 0xed) hi = 0x9f;
  } else if (b >= 0xf0 && b <= 0xf4) {
    need = 3;
    if (b === 0xf0) lo = 0x90;
    else if (b === 0xf4) hi = 0x8f;
  } else return -1;
  for (let k = 1; k <= need; k++) {
    if (at + k >= end) return -k;
    const c = bytes[at + k]!;
    if (c < lo || c > hi) return -k;
    lo = 0x80;
    hi = 0xbf;
  }
  return need + 1;
}

/**
 * The end of the longest prefix of `bytes[from..to)` that does not stop inside a character that
 * more bytes could still complete: `to`, or the start of such an unfinished last character.
 */
export function completeLength(bytes: Uint8Array, from: number, to: number): number {
  // A character is at most 4 bytes: only the last 3 can start an unfinished one.
  for (let start = to - 1; start >= from && start >= to - 3; start--) {
    const b = bytes[start]!;
    if (b < 0x80) return to;
    if (b < 0xc0) continue;
    const n = sequenceAt(bytes, start, to);
    // A valid lead cut short by `to` exactly (not ill-formed before it): hold it back.
    return n < 0 && b >= 0xc2 && b <= 0xf4 && start - n === to ? start : to;
  }
  return to;
}

/** Characters (code points, U+FFFD replacements counted once each) in `bytes[from..to)`. */
export function countChars(bytes: Uint8Array, from: number, to: number): number {
  let chars = 0;
  let at = from;
  while (at < to) {
    const n = sequenceAt(bytes, at, to);
    chars++;
    at += n > 0 ? n : -n;
  }
  return chars;
}
