import {
  PySyntaxError,
  type PyValue,
  pyFloat,
  pyFloatRepr,
  pyInt,
  UNSERIALIZABLE,
} from './python-json.js';

/**
 * The part of Python's `ast.literal_eval` that vLLM's glm45 tool parser reaches: it tries a
 * non-string argument value as JSON, then as a Python literal, else keeps the text. So `True`,
 * `'single quoted'`, `(1, 2)`, `0x1F` or `1_000` become values here. Covered: str (', ", triple,
 * r/u prefixes, adjacent literals joined), int (decimal, 0x/0o/0b, underscores), float, one sign,
 * True/False/None, list, tuple, dict. Sets, bytes, complex numbers and `set()` parse but json.dumps
 * refuses them (UNSERIALIZABLE). Not covered (read as "not a literal", so the text is kept where
 * Python would evaluate): \N{...} escapes, comments, line continuations.
 */

// Python's tokenizer stops at 200 nested brackets with a SyntaxError.
const MAX_NESTING = 200;

const NUMBER =
  /(?:0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+|(?:[0-9](?:_?[0-9])*)?\.?(?:[0-9](?:_?[0-9])*)?(?:[eE][-+]?[0-9](?:_?[0-9])*)?)([jJ])?/y;
const DECIMAL_INT = /^(?:[1-9](?:_?[0-9])*|0(?:_?0)*)$/;
const STRING_PREFIX = /(?:[rRuUbBfF]|[bB][rR]|[rR][bB])?(?='|")/y;

type Key = string | undefined;

class LiteralReader {
  pos = 0;
  constructor(readonly s: string) {}

  /** Whitespace between tokens; a line break only inside brackets, as Python's eval mode. */
  space(nesting: number): void {
    const s = this.s;
    while (this.pos < s.length) {
      const c = s.charCodeAt(this.pos);
      if (c === 0x20 || c === 0x09 || c === 0x0c) this.pos++;
      else if ((c === 0x0a || c === 0x0d) && nesting > 0) this.pos++;
      else break;
    }
  }

  expr(nesting: number): PyValue {
    this.space(nesting);
    const c = this.s.charCodeAt(this.pos);
    let v: PyValue;
    if (c === 0x2d || c === 0x2b) {
      this.pos++;
      this.space(nesting);
      v = this.number(c === 0x2d);
      if (v === null) throw new PySyntaxError('sign before a non-number');
    } else {
      v = this.atom(nesting);
    }
    this.space(nesting);
    const op = this.s.charCodeAt(this.pos);
    // int/float +/- imaginary is the one binary operation literal_eval allows: a complex number.
    if ((op === 0x2b || op === 0x2d) && isNumber(v)) {
      this.pos++;
      this.space(nesting);
      const im = this.number(false);
      if (im !== UNSERIALIZABLE) throw new PySyntaxError('operator');
      return UNSERIALIZABLE;
    }
    return v;
  }

  private atom(nesting: number): PyValue {
    const s = this.s;
    const c = s.charCodeAt(this.pos);
    if (c === 0x28 || c === 0x5b || c === 0x7b) {
      if (nesting >= MAX_NESTING) throw new PySyntaxError('too many nested parentheses');
      this.pos++;
      if (c === 0x28) return this.tuple(nesting + 1);
      if (c === 0x5b) return this.sequence(0x5d, nesting + 1);
      return this.braces(nesting + 1);
    }
    STRING_PREFIX.lastIndex = this.pos;
    if (STRING_PREFIX.test(s)) return this.strings(nesting);
    for (const [word, v] of WORDS) {
      if (s.startsWith(word, this.pos) && !isNameChar(s.charCodeAt(this.pos + word.length))) {
        this.pos += word.length;
        if (word !== 'set') return v;
        this.space(nesting);
        if (!s.startsWith('()', this.pos)) throw new PySyntaxError('call');
        this.pos += 2;
        return UNSERIALIZABLE;
      }
    }
    const n = this.number(false);
    if (n === null) throw new PySyntaxError(`not a literal at ${this.pos}`);
    return n;
  }

  /** A number literal, or null where none starts here. */
  number(negative: boolean): PyValue {
    NUMBER.lastIndex = this.pos;
    const m = NUMBER.exec(this.s);
    if (m === null) return null;
    const text = m[0];
    // The pattern also matches a bare ".", an exponent alone or nothing: no digit, no number.
    if (!/^\.?[0-9]/.test(text)) return null;
    if (isNameChar(this.s.charCodeAt(this.pos + text.length))) throw new PySyntaxError('number');
    this.pos += text.length;
    if (m[1] !== undefined) return UNSERIALIZABLE;
    const plain = text.replace(/_/g, '');
    const sign = negative ? '-' : '';
    if (/^0[xXoObB]/.test(plain)) return pyInt(sign + BigInt(plain).toString());
    if (/[.eE]/.test(plain)) {
      const f = Number(plain);
      return pyFloat(negative ? -f : f);
    }
    if (!DECIMAL_INT.test(text)) throw new PySyntaxError('leading zeros');
    return pyInt(sign + BigInt(plain).toString());
  }

  private tuple(nesting: number): PyValue {
    this.space(nesting);
    if (this.s.charCodeAt(this.pos) === 0x29) {
      this.pos++;
      return [];
    }
    const first = this.expr(nesting);
    this.space(nesting);
    if (this.s.charCodeAt(this.pos) === 0x29) {
      this.pos++;
      return first;
    }
    if (this.s.charCodeAt(this.pos) !== 0x2c) throw new PySyntaxError("expected ','");
    this.pos++;
    const rest = this.sequence(0x29, nesting);
    rest.unshift(first);
    return rest;
  }

  /** Items up to `close`, comma separated, a trailing comma allowed. */
  private sequence(close: number, nesting: number): PyValue[] {
    const out: PyValue[] = [];
    for (;;) {
      this.space(nesting);
      if (this.s.charCodeAt(this.pos) === close) {
        this.pos++;
        return out;
      }
      out.push(this.expr(nesting));
      this.space(nesting);
      const c = this.s.charCodeAt(this.pos);
      if (c === 0x2c) this.pos++;
      else if (c !== close) throw new PySyntaxError('expected a separator');
    }
  }

  /** A dict, or a set (which json.dumps refuses). */
  private braces(nesting: number): PyValue {
    const out = new Map<string, PyValue>();
    let unserializable = false;
    let isSet = false;
    for (let n = 0; ; n++) {
      this.space(nesting);
      if (this.s.charCodeAt(this.pos) === 0x7d) {
        this.pos++;
        return unserializable || isSet ? UNSERIALIZABLE : out;
      }
      const k = this.expr(nesting);
      this.space(nesting);
      if (this.s.charCodeAt(this.pos) === 0x3a && !isSet) {
        this.pos++;
        const v = this.expr(nesting);
        const key = dictKey(k);
        if (key === undefined) unserializable = true;
        else out.set(key, v);
      } else if (n === 0 || isSet) {
        isSet = true;
      } else {
        throw new PySyntaxError("expected ':'");
      }
      this.space(nesting);
      const c = this.s.charCodeAt(this.pos);
      if (c === 0x2c) this.pos++;
      else if (c !== 0x7d) throw new PySyntaxError('expected a separator');
    }
  }

  /** One or more adjacent string literals, joined (mixing bytes and str is an error). */
  private strings(nesting: number): PyValue {
    let out = '';
    let kind: 'str' | 'bytes' | undefined;
    for (;;) {
      STRING_PREFIX.lastIndex = this.pos;
      const m = STRING_PREFIX.exec(this.s);
      if (m === null) break;
      const prefix = m[0].toLowerCase();
      if (prefix === 'f') throw new PySyntaxError('f-string');
      const k = prefix.includes('b') ? 'bytes' : 'str';
      if (kind !== undefined && kind !== k) throw new PySyntaxError('bytes and str');
      kind = k;
      this.pos += m[0].length;
      out += this.stringBody(prefix.includes('r'), k === 'bytes');
      this.space(nesting);
    }
    return kind === 'bytes' ? UNSERIALIZABLE : out;
  }

  private stringBody(raw: boolean, bytes: boolean): string {
    const s = this.s;
    const q = s[this.pos] as string;
    const triple = s.startsWith(q.repeat(3), this.pos);
    const close = triple ? q.repeat(3) : q;
    let i = this.pos + close.length;
    let out = '';
    for (;;) {
      if (i >= s.length) throw new PySyntaxError('unterminated string');
      if (s.startsWith(close, i)) break;
      const c = s[i] as string;
      if (!triple && (c === '\n' || c === '\r')) throw new PySyntaxError('newline in string');
      if (c !== '\\') {
        out += c;
        i++;
        continue;
      }
      const esc = readEscape(s, i + 1, raw, bytes);
      out += esc.text;
      i = esc.end;
    }
    this.pos = i + close.length;
    return out;
  }
}

const SIMPLE_ESCAPES: Readonly<Record<string, string>> = {
  '\n': '',
  '\\': '\\',
  "'": "'",
  '"': '"',
  a: '\x07',
  b: '\b',
  f: '\f',
  n: '\n',
  r: '\r',
  t: '\t',
  v: '\v',
};

/** The escape after the backslash at `at - 1`: its text and where the string goes on. */
function readEscape(
  s: string,
  at: number,
  raw: boolean,
  bytes: boolean,
): { text: string; end: number } {
  const e = s[at];
  if (e === undefined) throw new PySyntaxError('unterminated string');
  // A raw string keeps the backslash, which still shields the next character from ending it.
  if (raw) return { text: `\\${e}`, end: at + 1 };
  const simple = SIMPLE_ESCAPES[e];
  if (simple !== undefined) return { text: simple, end: at + 1 };
  const oct = /^[0-7]{1,3}/.exec(s.slice(at, at + 3));
  if (oct !== null) {
    return { text: String.fromCodePoint(Number.parseInt(oct[0], 8)), end: at + oct[0].length };
  }
  const width = e === 'x' ? 2 : !bytes && e === 'u' ? 4 : !bytes && e === 'U' ? 8 : 0;
  if (width > 0) {
    const hex = s.slice(at + 1, at + 1 + width);
    if (hex.length !== width || !/^[0-9a-fA-F]+$/.test(hex)) throw new PySyntaxError('escape');
    const cp = Number.parseInt(hex, 16);
    if (cp > 0x10ffff) throw new PySyntaxError('escape');
    return { text: String.fromCodePoint(cp), end: at + 1 + width };
  }
  if (e === 'N' && !bytes) throw new PySyntaxError('\\N{} is not supported here');
  // An unknown escape keeps its backslash (Python warns and goes on).
  return { text: `\\${e}`, end: at + 1 };
}

const WORDS: readonly (readonly [string, PyValue])[] = [
  ['True', true],
  ['False', false],
  ['None', null],
  ['set', null],
];

function isNameChar(c: number): boolean {
  return (
    (c >= 0x30 && c <= 0x39) ||
    (c >= 0x41 && c <= 0x5a) ||
    (c >= 0x61 && c <= 0x7a) ||
    c === 0x5f ||
    c > 0x7f
  );
}

function isNumber(v: PyValue): boolean {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Map)
    ? v.t === 'int' || v.t === 'float'
    : false;
}

/** A dict key as json.dumps writes it, or undefined where it refuses the key (a tuple...). */
function dictKey(k: PyValue): Key {
  if (typeof k === 'string') return k;
  if (k === true) return 'true';
  if (k === false) return 'false';
  if (k === null) return 'null';
  if (Array.isArray(k) || k instanceof Map) return undefined;
  if (k.t === 'int') return k.text;
  if (k.t === 'float') return pyFloatRepr(k.value);
  return undefined;
}

/** ast.literal_eval(text), or undefined where Python raises ValueError or SyntaxError. */
export function literalEvalPython(text: string): PyValue | undefined {
  const r = new LiteralReader(text);
  try {
    // literal_eval strips leading spaces and tabs itself; the caller already stripped the rest.
    const v = r.expr(0);
    r.space(0);
    return r.pos === text.length ? v : undefined;
  } catch (e) {
    if (e instanceof PySyntaxError) return undefined;
    throw e;
  }
}
