import { escapePythonJsonString, pyFloatRepr } from './python-json.js';

/**
 * One hermes tool call region (`{"name": ..., "arguments": ...}`, the text after `<tool_call>`)
 * read as it arrives, so that a stream can send the call's name and then its arguments in
 * fragments. The fragments, joined, are the arguments as parseHermesRegion gives them at the end
 * (`json.dumps(args, ensure_ascii=False)`, python-json.ts), because each token of the arguments
 * value is written in that form once it is complete and can no longer change:
 * - punctuation as json.dumps writes it (`{`, `[`, `", "`, `": "`, `]`, `}`), whitespace dropped;
 * - a string's characters as they are decoded (raw runs as they are, an escape once all of it
 *   arrived, in json.dumps's spelling: `\/` is `/`, `\u00e9` is `é`, `\u001f` stays escaped), but
 *   never a trailing high surrogate alone (the next unit may pair with it);
 * - a number once the character after it shows where it ends (`1.50` is `1.5` only then);
 * - `true`, `false`, `null`, `NaN`, `Infinity`, `-Infinity` once the word is whole.
 * The rest of the region is read as Python's json.loads reads it (the same grammar as
 * python-json.ts), to learn the name and to stop writing where the text stops being JSON; whether
 * the region finally is a call is still decided by parseHermesRegion on the whole text.
 *
 * Not exact, by nature (docs/chat-parsing.md, Streaming): a repeated key (json.dumps keeps the
 * first place and the last value; the fragments have gone out with the first value, so each
 * occurrence is written as it comes), and a repeated top-level `"arguments"` (the first one is
 * written, Python keeps the last).
 *
 * Per character it only moves an index: text goes out as slices of the fed chunks.
 */

// Where the reader is.
const START = 0; // before the region's `{`
const KEY_OR_CLOSE = 1; // after `{`
const KEY = 2; // after `,` in an object
const COLON = 3; // after a key
const VALUE = 4; // after `:`, or `,` in an array
const VALUE_OR_CLOSE = 5; // after `[`
const AFTER = 6; // after a value: `,` or the container's close
const STRING = 7;
const NUMBER = 8;
const WORD = 9;
const END = 10; // after the region's `}`: only whitespace may follow
const FAIL = 11;

const OBJECT = 0;
const ARRAY = 1;

// The top-level member being read.
const OTHER = 0;
const ARGS = 1;
const NAME = 2;

// What a string's decoded text is for.
const SKIP = 0; // nothing (validated only)
const EMIT = 1; // part of the arguments: written canonically
const CAPTURE = 2; // a top-level key or the "name" value: kept in #buf

// As python-json.ts: Python's recursion limit stops deeper JSON.
const MAX_DEPTH = 900;
const MAX_INT_DIGITS = 4300;
const NUMBER_TOKEN = /^-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$/;

function isJsonSpace(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
}

function isNumberChar(c: number): boolean {
  // 0-9 - + . e E
  return (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x2b || c === 0x2e || (c | 0x20) === 0x65;
}

function hexValue(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const l = c | 0x20;
  return l >= 0x61 && l <= 0x66 ? l - 0x57 : -1;
}

/** The character a one-letter escape stands for, or null where json.loads refuses it. */
function simpleEscape(c: number): string | null {
  switch (c) {
    case 0x22:
      return '"';
    case 0x5c:
      return '\\';
    case 0x2f:
      return '/';
    case 0x62:
      return '\b';
    case 0x66:
      return '\f';
    case 0x6e:
      return '\n';
    case 0x72:
      return '\r';
    case 0x74:
      return '\t';
    default:
      return null;
  }
}

function wordAt(c: number): string | null {
  switch (c) {
    case 0x74:
      return 'true';
    case 0x66:
      return 'false';
    case 0x6e:
      return 'null';
    case 0x4e:
      return 'NaN';
    case 0x49:
      return 'Infinity';
    default:
      return null;
  }
}

export class HermesCallReader {
  /** The region's top-level "name" once its string value is complete (the latest one if repeated;
   *  null again when a later one is not a string). */
  name: string | null = null;
  /** The first top-level "arguments" value has begun (its first character was valid). */
  argsStarted = false;

  #state = START;
  #stack: number[] = [];
  /** Inside the arguments value: tokens are written to #out. */
  #emitting = false;
  #member = OTHER;
  #topKey = '';
  // The string being read.
  #strRole = SKIP;
  #isKey = false;
  #buf = '';
  /** 0: not in an escape; 1: after `\`; 2..5: after `\u` and that many digits minus 2. */
  #esc = 0;
  #hex = 0;
  // The number or word being read.
  #num = '';
  #word = '';
  #wordPos = 0;
  /** Canonical arguments text written and not yet taken. */
  #out = '';
  #closed = false;

  /** The text is no JSON object (as json.loads reads it) whatever follows. */
  get failed(): boolean {
    return this.#state === FAIL;
  }

  /** The text so far is one whole JSON object (and whitespace), as json.loads would take it. */
  get complete(): boolean {
    return this.#state === END;
  }

  /** The name is known and the arguments have begun: the call can be announced. */
  get ready(): boolean {
    return this.name !== null && this.argsStarted && this.#state !== FAIL;
  }

  /** The next text of the region (none of it part of `</tool_call>`). */
  feed(s: string): void {
    const n = s.length;
    let i = 0;
    while (i < n) {
      switch (this.#state) {
        case FAIL:
          return;
        case STRING:
          i = this.#string(s, i);
          break;
        case NUMBER:
          i = this.#number(s, i);
          break;
        case WORD:
          i = this.#wordChars(s, i);
          break;
        default: {
          const c = s.charCodeAt(i);
          i = isJsonSpace(c) ? i + 1 : this.#structural(c, i);
        }
      }
    }
  }

  /** The region ended: take() gives everything written from now on. */
  finish(): void {
    this.#closed = true;
  }

  /** The canonical arguments text written since the last take (a high surrogate at its end stays
   *  until the next unit, or the end of the region, shows what follows it). */
  take(): string {
    const s = this.#out;
    if (s === '') return '';
    const last = s.charCodeAt(s.length - 1);
    if (!this.#closed && last >= 0xd800 && last <= 0xdbff) {
      this.#out = s.slice(-1);
      return s.slice(0, -1);
    }
    this.#out = '';
    return s;
  }

  #fail(): number {
    this.#state = FAIL;
    return Number.MAX_SAFE_INTEGER;
  }

  /** Punctuation and the first character of a value; returns where to go on. */
  #structural(c: number, i: number): number {
    switch (this.#state) {
      case START:
        if (c !== 0x7b) return this.#fail();
        this.#stack.push(OBJECT);
        this.#state = KEY_OR_CLOSE;
        return i + 1;
      case KEY_OR_CLOSE:
        if (c === 0x7d) return this.#close(c, i);
        if (c !== 0x22) return this.#fail();
        return this.#startString(true, i);
      case KEY:
        if (c !== 0x22) return this.#fail();
        return this.#startString(true, i);
      case COLON:
        if (c !== 0x3a) return this.#fail();
        if (this.#emitting) this.#out += ': ';
        this.#state = VALUE;
        return i + 1;
      case VALUE_OR_CLOSE:
        if (c === 0x5d) return this.#close(c, i);
        return this.#startValue(c, i);
      case VALUE:
        return this.#startValue(c, i);
      case AFTER: {
        const top = this.#stack[this.#stack.length - 1];
        if (c === 0x2c) {
          if (this.#emitting) this.#out += ', ';
          this.#state = top === OBJECT ? KEY : VALUE;
          return i + 1;
        }
        if ((c === 0x7d && top === OBJECT) || (c === 0x5d && top === ARRAY)) {
          return this.#close(c, i);
        }
        return this.#fail();
      }
      default:
        return this.#fail();
    }
  }

  #close(c: number, i: number): number {
    if (this.#emitting) this.#out += c === 0x7d ? '}' : ']';
    this.#stack.pop();
    if (this.#stack.length === 0) this.#state = END;
    else this.#valueDone();
    return i + 1;
  }

  #startValue(c: number, i: number): number {
    const depth = this.#stack.length;
    if (depth > MAX_DEPTH) return this.#fail();
    if (depth === 1) this.#beginMember();
    if (c === 0x22) return this.#startString(false, i);
    if (c === 0x7b || c === 0x5b) {
      if (this.#emitting) this.#out += c === 0x7b ? '{' : '[';
      this.#stack.push(c === 0x7b ? OBJECT : ARRAY);
      this.#state = c === 0x7b ? KEY_OR_CLOSE : VALUE_OR_CLOSE;
      return i + 1;
    }
    if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      this.#state = NUMBER;
      this.#num = '';
      return i;
    }
    const word = wordAt(c);
    if (word === null) return this.#fail();
    this.#state = WORD;
    this.#word = word;
    this.#wordPos = 0;
    return i;
  }

  /** A value of the top-level object begins: which member is it? */
  #beginMember(): void {
    if (this.#topKey === 'arguments' && !this.argsStarted) {
      this.#member = ARGS;
      this.argsStarted = true;
      this.#emitting = true;
    } else if (this.#topKey === 'name') {
      this.#member = NAME;
      this.name = null;
    } else {
      this.#member = OTHER;
    }
  }

  #valueDone(): void {
    if (this.#stack.length === 1) {
      if (this.#member === ARGS) this.#emitting = false;
      this.#member = OTHER;
    }
    this.#state = AFTER;
  }

  #startString(isKey: boolean, i: number): number {
    this.#isKey = isKey;
    if (this.#emitting) {
      this.#strRole = EMIT;
      this.#out += '"';
    } else if (this.#stack.length === 1 && (isKey || this.#member === NAME)) {
      this.#strRole = CAPTURE;
      this.#buf = '';
    } else {
      this.#strRole = SKIP;
    }
    this.#esc = 0;
    this.#state = STRING;
    return i + 1;
  }

  /** Inside a string from `i`; returns where the string's reading stopped. */
  #string(s: string, i: number): number {
    const n = s.length;
    // Start of the raw run not yet written; -1 inside an escape.
    let run = this.#esc === 0 ? i : -1;
    while (i < n) {
      const c = s.charCodeAt(i);
      if (this.#esc === 0) {
        if (c === 0x22) {
          this.#raw(s, run, i);
          this.#endString();
          return i + 1;
        }
        if (c === 0x5c) {
          this.#raw(s, run, i);
          run = -1;
          this.#esc = 1;
        } else if (c < 0x20) {
          // strict=True (the default) refuses raw control characters.
          return this.#fail();
        }
        i++;
        continue;
      }
      i++;
      if (this.#esc === 1) {
        if (c === 0x75) {
          this.#esc = 2;
          this.#hex = 0;
          continue;
        }
        const d = simpleEscape(c);
        if (d === null) return this.#fail();
        this.#decoded(d);
      } else {
        const h = hexValue(c);
        if (h < 0) return this.#fail();
        this.#hex = this.#hex * 16 + h;
        if (++this.#esc < 6) continue;
        this.#decoded(String.fromCharCode(this.#hex));
      }
      this.#esc = 0;
      run = i;
    }
    if (run >= 0) this.#raw(s, run, n);
    return n;
  }

  #raw(s: string, from: number, to: number): void {
    if (from >= to) return;
    if (this.#strRole === EMIT) this.#out += s.slice(from, to);
    else if (this.#strRole === CAPTURE) this.#buf += s.slice(from, to);
  }

  #decoded(d: string): void {
    if (this.#strRole === EMIT) this.#out += escapePythonJsonString(d);
    else if (this.#strRole === CAPTURE) this.#buf += d;
  }

  #endString(): void {
    if (this.#strRole === EMIT) this.#out += '"';
    const captured = this.#strRole === CAPTURE ? this.#buf : '';
    this.#buf = '';
    if (this.#isKey) {
      if (this.#stack.length === 1) this.#topKey = captured;
      this.#state = COLON;
      return;
    }
    if (this.#strRole === CAPTURE) this.name = captured;
    this.#valueDone();
  }

  /** Inside a number from `i`: it ends at the first character that cannot continue it. */
  #number(s: string, i: number): number {
    const n = s.length;
    let j = i;
    while (j < n && isNumberChar(s.charCodeAt(j))) j++;
    if (j === n) {
      this.#num += s.slice(i, n);
      return n;
    }
    const token = this.#num + s.slice(i, j);
    this.#num = '';
    if (token === '-' && s.charCodeAt(j) === 0x49) {
      this.#state = WORD;
      this.#word = '-Infinity';
      this.#wordPos = 1;
      return j;
    }
    const m = NUMBER_TOKEN.exec(token);
    if (m === null) return this.#fail();
    const isInt = m[1] === undefined && m[2] === undefined;
    if (isInt && token.length > MAX_INT_DIGITS) return this.#fail();
    if (this.#emitting) {
      if (!isInt) this.#out += pyFloatRepr(Number(token));
      else this.#out += token === '-0' ? '0' : token;
    }
    this.#valueDone();
    return j;
  }

  #wordChars(s: string, i: number): number {
    const n = s.length;
    const word = this.#word;
    while (i < n && this.#wordPos < word.length) {
      if (s.charCodeAt(i) !== word.charCodeAt(this.#wordPos)) return this.#fail();
      i++;
      this.#wordPos++;
    }
    if (this.#wordPos === word.length) {
      if (this.#emitting) this.#out += word;
      this.#valueDone();
    }
    return i;
  }
}
