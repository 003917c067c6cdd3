/**
 * Python's `json.loads` and `json.dumps(value, ensure_ascii=False)`, as far as vLLM's tool parsers
 * lean on them: the arguments a tool call returns are the Python re-serialization of what the
 * model wrote, so `{"a":1.50}` comes back as `{"a": 1.5}`. JS numbers cannot carry that (JSON.parse
 * loses 1 vs 1.0 and digits past 2^53), so values are parsed into PyValue, which keeps an integer's
 * digits and marks a float as a float, the way Python's own parse does.
 */

/** An integer as Python holds it: its decimal digits (any size), "-0" already folded to "0". */
export interface PyInt {
  readonly t: 'int';
  readonly text: string;
}

export interface PyFloat {
  readonly t: 'float';
  readonly value: number;
}

/** A value json.dumps refuses (a set, bytes, a complex number from ast.literal_eval). */
export interface PyUnserializable {
  readonly t: 'unserializable';
}

/**
 * A parsed value: str, bool, None, int, float, list (tuples too: dumps writes them as lists), dict.
 * A dict is a Map, whose re-set key keeps its first position as a Python dict does.
 */
export type PyValue =
  | null
  | boolean
  | string
  | PyInt
  | PyFloat
  | PyUnserializable
  | PyValue[]
  | Map<string, PyValue>;

export const UNSERIALIZABLE: PyUnserializable = { t: 'unserializable' };

export function pyInt(text: string): PyInt {
  return { t: 'int', text: text === '-0' ? '0' : text };
}

export function pyFloat(value: number): PyFloat {
  return { t: 'float', value };
}

/** Thrown inside the parsers and caught at their entry points; never escapes this folder. */
export class PySyntaxError extends Error {}

// Python's json module skips only these four (json.decoder.WHITESPACE).
function isJsonSpace(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
}

// Python refuses int() of more digits than this (sys.int_info.default_max_str_digits), and
// json.loads with it: such a tool call fails to parse in vLLM.
const MAX_INT_DIGITS = 4300;
// Python's recursion limit (1000 frames) ends deeper JSON with RecursionError; vLLM's parsers
// catch that as any other failure. A bound here also keeps this parser off the JS stack's edge.
const MAX_DEPTH = 900;

const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;

class JsonReader {
  pos = 0;
  constructor(readonly s: string) {}

  skipSpace(): void {
    const s = this.s;
    while (this.pos < s.length && isJsonSpace(s.charCodeAt(this.pos))) this.pos++;
  }

  value(depth: number): PyValue {
    if (depth > MAX_DEPTH) throw new PySyntaxError('too deep');
    const s = this.s;
    const c = s.charCodeAt(this.pos);
    if (c === 0x22) return this.string();
    if (c === 0x7b) return this.object(depth + 1);
    if (c === 0x5b) return this.array(depth + 1);
    if (s.startsWith('null', this.pos)) return this.word(4, null);
    if (s.startsWith('true', this.pos)) return this.word(4, true);
    if (s.startsWith('false', this.pos)) return this.word(5, false);
    // Python's decoder accepts these three spellings (allow_nan defaults on).
    if (s.startsWith('NaN', this.pos)) return this.word(3, pyFloat(Number.NaN));
    if (s.startsWith('Infinity', this.pos)) return this.word(8, pyFloat(Infinity));
    if (s.startsWith('-Infinity', this.pos)) return this.word(9, pyFloat(-Infinity));
    return this.number();
  }

  private word(len: number, v: PyValue): PyValue {
    this.pos += len;
    return v;
  }

  private number(): PyValue {
    NUMBER.lastIndex = this.pos;
    const m = NUMBER.exec(this.s);
    if (m === null) throw new PySyntaxError(`no value at ${this.pos}`);
    this.pos += m[0].length;
    if (m[1] === undefined && m[2] === undefined) {
      if (m[0].length > MAX_INT_DIGITS) throw new PySyntaxError('int too long');
      return pyInt(m[0]);
    }
    return pyFloat(Number(m[0]));
  }

  string(): string {
    const s = this.s;
    let i = this.pos + 1;
    let out = '';
    let runStart = i;
    for (;;) {
      if (i >= s.length) throw new PySyntaxError('unterminated string');
      const c = s.charCodeAt(i);
      if (c === 0x22) break;
      // strict=True (the default) refuses raw control characters inside strings.
      if (c < 0x20) throw new PySyntaxError('control character in string');
      if (c !== 0x5c) {
        i++;
        continue;
      }
      out += s.slice(runStart, i);
      const e = s.charCodeAt(i + 1);
      i += 2;
      switch (e) {
        case 0x22:
          out += '"';
          break;
        case 0x5c:
          out += '\\';
          break;
        case 0x2f:
          out += '/';
          break;
        case 0x62:
          out += '\b';
          break;
        case 0x66:
          out += '\f';
          break;
        case 0x6e:
          out += '\n';
          break;
        case 0x72:
          out += '\r';
          break;
        case 0x74:
          out += '\t';
          break;
        case 0x75: {
          const hex = s.slice(i, i + 4);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) throw new PySyntaxError('bad \\u escape');
          out += String.fromCharCode(Number.parseInt(hex, 16));
          i += 4;
          break;
        }
        default:
          throw new PySyntaxError('bad escape');
      }
      runStart = i;
    }
    this.pos = i + 1;
    return out + s.slice(runStart, i);
  }

  private array(depth: number): PyValue[] {
    const out: PyValue[] = [];
    this.pos++;
    this.skipSpace();
    if (this.s.charCodeAt(this.pos) === 0x5d) {
      this.pos++;
      return out;
    }
    for (;;) {
      out.push(this.value(depth));
      this.skipSpace();
      const c = this.s.charCodeAt(this.pos++);
      if (c === 0x5d) return out;
      if (c !== 0x2c) throw new PySyntaxError("expected ',' or ']'");
      this.skipSpace();
    }
  }

  private object(depth: number): Map<string, PyValue> {
    const out = new Map<string, PyValue>();
    this.pos++;
    this.skipSpace();
    if (this.s.charCodeAt(this.pos) === 0x7d) {
      this.pos++;
      return out;
    }
    for (;;) {
      if (this.s.charCodeAt(this.pos) !== 0x22) throw new PySyntaxError('expected a key');
      const key = this.string();
      this.skipSpace();
      if (this.s.charCodeAt(this.pos++) !== 0x3a) throw new PySyntaxError("expected ':'");
      this.skipSpace();
      out.set(key, this.value(depth));
      this.skipSpace();
      const c = this.s.charCodeAt(this.pos++);
      if (c === 0x7d) return out;
      if (c !== 0x2c) throw new PySyntaxError("expected ',' or '}'");
      this.skipSpace();
    }
  }
}

/** json.loads(text), or undefined where Python raises (any error: vLLM catches them all). */
export function loadsPython(text: string): PyValue | undefined {
  const r = new JsonReader(text);
  try {
    r.skipSpace();
    const v = r.value(0);
    r.skipSpace();
    return r.pos === text.length ? v : undefined;
  } catch (e) {
    if (e instanceof PySyntaxError) return undefined;
    throw e;
  }
}

/**
 * repr(float): the shortest digits that read back to the same double (what JS's toExponential()
 * also finds), laid out as CPython's float_repr_style "short" does: positional when the decimal
 * point falls within -4 < decpt <= 16 (with ".0" for whole values), else d.ddde±XX.
 */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (x === Infinity) return 'Infinity';
  if (x === -Infinity) return '-Infinity';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const sign = x < 0 ? '-' : '';
  const exp = Math.abs(x).toExponential();
  const ePos = exp.indexOf('e');
  const digits = exp.slice(0, ePos).replace('.', '');
  const e = Number(exp.slice(ePos + 1));
  const decpt = e + 1;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return `${sign}0.${'0'.repeat(-decpt)}${digits}`;
    if (decpt >= digits.length) return `${sign}${digits}${'0'.repeat(decpt - digits.length)}.0`;
    return `${sign}${digits.slice(0, decpt)}.${digits.slice(decpt)}`;
  }
  const mantissa = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  const absE = Math.abs(e);
  return `${sign}${mantissa}e${e < 0 ? '-' : '+'}${absE < 10 ? '0' : ''}${absE}`;
}

/** The body of a JSON string as json.dumps(ensure_ascii=False) writes it, without the quotes. */
export function escapePythonJsonString(s: string): string {
  let out = '';
  let runStart = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x20 && c !== 0x22 && c !== 0x5c) continue;
    out += s.slice(runStart, i);
    runStart = i + 1;
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += '\\\\';
    else if (c === 0x0a) out += '\\n';
    else if (c === 0x0d) out += '\\r';
    else if (c === 0x09) out += '\\t';
    else if (c === 0x08) out += '\\b';
    else if (c === 0x0c) out += '\\f';
    else out += `\\u00${c < 0x10 ? '0' : ''}${c.toString(16)}`;
  }
  return runStart === 0 ? s : out + s.slice(runStart);
}

function dumpInto(v: PyValue, parts: string[]): boolean {
  if (v === null) parts.push('null');
  else if (v === true) parts.push('true');
  else if (v === false) parts.push('false');
  else if (typeof v === 'string') parts.push(`"${escapePythonJsonString(v)}"`);
  else if (Array.isArray(v)) {
    parts.push('[');
    for (let i = 0; i < v.length; i++) {
      if (i > 0) parts.push(', ');
      if (!dumpInto(v[i] as PyValue, parts)) return false;
    }
    parts.push(']');
  } else if (v instanceof Map) {
    parts.push('{');
    let first = true;
    for (const [key, item] of v) {
      parts.push(first ? '"' : ', "', escapePythonJsonString(key), '": ');
      first = false;
      if (!dumpInto(item, parts)) return false;
    }
    parts.push('}');
  } else if (v.t === 'int') parts.push(v.text);
  else if (v.t === 'float') parts.push(pyFloatRepr(v.value));
  else return false;
  return true;
}

/** json.dumps(value, ensure_ascii=False), or undefined where Python raises TypeError. */
export function dumpsPython(v: PyValue): string | undefined {
  const parts: string[] = [];
  return dumpInto(v, parts) ? parts.join('') : undefined;
}
