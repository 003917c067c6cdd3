/**
 * The generate route's JSON body with its prompt read straight into an Int32Array. JSON.parse
 * needs the body as a string and builds a JS array of the prompt's ids (~30-40 ns an id on the
 * development machine: 0.5-0.7 ms for a 16k-token RL prompt, on the main thread) that the route
 * then copies into an Int32Array; this reads the top-level `token_ids` array's digits from the
 * body's bytes into the Int32Array itself (~15 ns an id), and hands every other top-level value to
 * JSON.parse as it stands (UTF-8 is safe to scan bytewise: no byte of a multi-byte character is
 * ASCII).
 *
 * It reads only what it is sure of: an object whose keys have no escapes, and a `token_ids` array of
 * plain non-negative integers of at most nine digits. Anything else (another shape, an escape in a
 * key, a sign, a fraction, an exponent, a syntax error anywhere) returns undefined, and the caller
 * parses the text the ordinary way, so errors and edge cases stay JSON.parse's and the route's.
 * What it returns is what JSON.parse returns, but for `token_ids` (an Int32Array of the same ids).
 * It does not check keys for prototype poisoning: the caller does, before.
 */

import { int32Copy } from '../wire/int32-slab.js';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const ZERO = 0x30;
const NINE = 0x39;
const utf8 = new TextDecoder();
/** Nine digits never overflow an int32; a longer id is no token id, and goes the ordinary way. */
const MAX_DIGITS = 9;

/**
 * A reused buffer for the ids as they are read (grown, never shrunk); the result is a copy, carved
 * from a slab when short (int32-slab.ts).
 */
let scratch = new Int32Array(4096);
/** How many ids the last readIds() put into `scratch`. */
let idCount = 0;

/** The body with `token_ids` as an Int32Array, or undefined: parse `text` the ordinary way. */
export function parseWithTokenIds(text: Uint8Array): Record<string, unknown> | undefined {
  let i = skipWs(text, 0);
  if (text[i]! !== OPEN_BRACE) return undefined;
  const out: Record<string, unknown> = {};
  i = skipWs(text, i + 1);
  if (text[i]! === CLOSE_BRACE) return skipWs(text, i + 1) === text.length ? out : undefined;
  for (;;) {
    if (text[i]! !== QUOTE) return undefined;
    const keyEnd = plainStringEnd(text, i + 1);
    if (keyEnd < 0) return undefined;
    const key = utf8.decode(text.subarray(i + 1, keyEnd));
    // Assigning it would set the object's prototype; the ordinary parser refuses it.
    if (key === '__proto__') return undefined;
    i = skipWs(text, keyEnd + 1);
    if (text[i]! !== COLON) return undefined;
    i = skipWs(text, i + 1);
    if (key === 'token_ids' && text[i]! === OPEN_BRACKET) {
      const end = readIds(text, i + 1);
      if (end < 0) return undefined;
      out[key] = int32Copy(scratch, 0, idCount);
      i = end;
    } else {
      const end = valueEnd(text, i);
      if (end < 0) return undefined;
      try {
        out[key] = JSON.parse(utf8.decode(text.subarray(i, end)));
      } catch {
        return undefined;
      }
      i = end;
    }
    i = skipWs(text, i);
    const c = text[i]!;
    if (c === CLOSE_BRACE) return skipWs(text, i + 1) === text.length ? out : undefined;
    if (c !== COMMA) return undefined;
    i = skipWs(text, i + 1);
  }
}

/**
 * Reads `1, 22, 333]` from `at` into `scratch`; returns the index past `]`, or -1 when the array
 * is not one of plain non-negative integers.
 */
function readIds(text: Uint8Array, at: number): number {
  let i = skipWs(text, at);
  let n = 0;
  if (text[i]! === CLOSE_BRACKET) {
    idCount = 0;
    return i + 1;
  }
  for (;;) {
    let c = text[i]!;
    if (c < ZERO || c > NINE) return -1;
    const start = i;
    let value = 0;
    do {
      value = value * 10 + (c - ZERO);
      c = text[++i]!;
    } while (c >= ZERO && c <= NINE);
    const digits = i - start;
    // JSON has no leading zeros ("01"); a longer number is not an int32 token id.
    if (digits > MAX_DIGITS || (digits > 1 && text[start]! === ZERO)) return -1;
    if (n === scratch.length) {
      const grown = new Int32Array(scratch.length * 2);
      grown.set(scratch);
      scratch = grown;
    }
    scratch[n++] = value;
    i = skipWs(text, i);
    c = text[i]!;
    if (c === CLOSE_BRACKET) {
      idCount = n;
      return i + 1;
    }
    if (c !== COMMA) return -1;
    i = skipWs(text, i + 1);
  }
}

/**
 * The end of the JSON value starting at `at` (a string, an object or array with everything nested
 * in it, or a bare literal or number), or -1 when the text ends first. Its validity is left to
 * JSON.parse.
 */
function valueEnd(text: Uint8Array, at: number): number {
  const first = text[at]!;
  if (first === QUOTE) {
    const end = stringEnd(text, at + 1);
    return end < 0 ? -1 : end + 1;
  }
  if (first === OPEN_BRACE || first === OPEN_BRACKET) {
    let depth = 0;
    for (let i = at; i < text.length; i++) {
      const c = text[i]!;
      if (c === QUOTE) {
        i = stringEnd(text, i + 1);
        if (i < 0) return -1;
      } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
        depth++;
      } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
        if (--depth === 0) return i + 1;
      }
    }
    return -1;
  }
  let i = at;
  for (; i < text.length; i++) {
    const c = text[i]!;
    if (c === COMMA || c === CLOSE_BRACE || c === CLOSE_BRACKET || isWs(c)) break;
  }
  return i > at ? i : -1;
}

/** The index of the quote that closes the string whose content starts at `at`, or -1. */
function stringEnd(text: Uint8Array, at: number): number {
  for (let i = at; i < text.length; i++) {
    const c = text[i]!;
    if (c === BACKSLASH) i++;
    else if (c === QUOTE) return i;
  }
  return -1;
}

/** Like stringEnd, for a key: -1 also when it holds an escape or a control character. */
function plainStringEnd(text: Uint8Array, at: number): number {
  for (let i = at; i < text.length; i++) {
    const c = text[i]!;
    if (c === QUOTE) return i;
    if (c === BACKSLASH || c < 0x20) return -1;
  }
  return -1;
}

function skipWs(text: Uint8Array, at: number): number {
  let i = at;
  while (i < text.length && isWs(text[i]!)) i++;
  return i;
}

/** JSON's four whitespace characters. */
function isWs(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}
