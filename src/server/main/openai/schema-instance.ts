/**
 * A small, valid instance of a JSON schema, for the simulator's tool-call arguments: an RL
 * environment's own argument parsing and validation must accept what the simulator answers with.
 * It covers the subset tools are described with (OpenAI function `parameters`, pydantic and zod
 * output): type (and type arrays), properties + required + additionalProperties, enum, const,
 * numeric bounds (draft 4 boolean and draft 6+ numeric exclusives), multipleOf, string lengths,
 * pattern (a subset of regular expressions, see below), format (date, date-time, time, email,
 * uri, hostname, ipv4, ipv6, uuid, duration), items / prefixItems / additionalItems,
 * minItems / maxItems, uniqueItems, contains, min/maxProperties, anyOf, oneOf (a sample that
 * matches more than one branch is redrawn a few times), allOf (merged), not (redrawn a few
 * times), and $ref to any JSON pointer in the same document (#/$defs/..., #/definitions/...).
 *
 * Not honoured: if/then/else, dependentRequired / dependentSchemas / dependencies,
 * propertyNames, patternProperties beyond picking the schema of a required key,
 * unevaluatedProperties/Items, minContains/maxContains, $ref to other documents or $anchor/$id,
 * and patterns using lookaround, backreferences, word boundaries or Unicode property escapes
 * (the string then falls back to words and may not match). A schema that cannot be satisfied
 * gets a best effort instead of an exception: the tool definitions are the client's.
 *
 * Values stay short (a few words, 1-3 items, numbers near zero) so an answer is a few dozen
 * tokens. Deterministic given `rand`.
 */

type Schema = Record<string, unknown>;
type Rand = () => number;

interface Ctx {
  root: unknown;
  rand: Rand;
  /** Schema nodes visited so far, sampling and matching together (see WORK_LIMIT). */
  work: number;
  /** sample() calls under way: branches re-enter it at the same depth, `{anyOf: [{$ref: "#"}]}` forever. */
  stack: number;
}

/** Beyond this depth, objects keep only required properties and arrays their minimum length. */
const SHALLOW_DEPTH = 4;
/** Beyond this depth, a (recursive) schema gets null rather than a deeper tree. */
const MAX_DEPTH = 16;
/** Nested sample() calls, depth and branch choices together, before a null. */
const MAX_STACK = 64;
/**
 * Past this many schema nodes visited, sampling gives null and matching says yes: recursive
 * schemas that branch (two required self-references, oneOf of self-references) would otherwise
 * take exponential time.
 */
const WORK_LIMIT = 20_000;
/** Draws for oneOf, not and patterns before keeping a sample that may not fit. */
const REDRAWS = 6;

const WORDS = (
  'alpha amber apple arrow autumn basket beach berry blue bridge canyon cedar cloud copper coral ' +
  'delta desert ember falcon field forest garden glacier granite harbor hazel island ivory ' +
  'jasper lake lemon maple meadow mint north ocean olive orchid pearl pepper pine river ' +
  'robin sage sand silver slate spring stone summer sunset thunder timber valley violet willow'
).split(' ');

/** A valid instance of `schema`; a missing, empty or unconstraining schema gives `{}`. */
export function sampleSchemaInstance(schema: unknown, rand: () => number): unknown {
  if (!isObject(schema) || !constrains(schema)) return {};
  const ctx: Ctx = { root: schema, rand, work: 0, stack: 0 };
  let value: unknown;
  for (let i = 0; i < REDRAWS; i++) {
    value = sample(ctx, schema, 0);
    if (matches(ctx, schema, value, 0)) return value;
  }
  return value;
}

function sample(ctx: Ctx, raw: unknown, depth: number): unknown {
  if (raw === false) return null; // nothing is valid
  if (!isObject(raw)) return words(ctx.rand, 1, 2);
  if (depth > MAX_DEPTH || ctx.stack >= MAX_STACK || ++ctx.work > WORK_LIMIT) return null;
  ctx.stack++;
  try {
    return sampleNode(ctx, normalize(ctx, raw), depth);
  } finally {
    ctx.stack--;
  }
}

function sampleNode(ctx: Ctx, s: Schema, depth: number): unknown {
  if (Array.isArray(s.anyOf) && s.anyOf.length > 0) {
    const { anyOf, ...rest } = s;
    return sample(ctx, merge(rest, normalize(ctx, pickBranch(ctx, anyOf))), depth);
  }
  if (Array.isArray(s.oneOf) && s.oneOf.length > 0) {
    const { oneOf, ...rest } = s;
    let value: unknown;
    for (let i = 0; i < REDRAWS; i++) {
      value = sample(ctx, merge(rest, normalize(ctx, pickBranch(ctx, oneOf))), depth);
      if (oneOf.filter((b) => matches(ctx, b, value, 0)).length === 1) return value;
    }
    return value;
  }
  if (s.not !== undefined) {
    const { not, ...rest } = s;
    let value: unknown;
    for (let i = 0; i < REDRAWS; i++) {
      value = sample(ctx, rest, depth);
      if (!matches(ctx, not, value, 0)) return value;
    }
    return value;
  }
  if ('const' in s) return structuredClone(s.const);
  if (Array.isArray(s.enum) && s.enum.length > 0) {
    const { enum: values, ...rest } = s;
    const fitting = values.filter((v) => matches(ctx, rest, v, 0));
    return structuredClone(pick(ctx.rand, fitting.length > 0 ? fitting : values));
  }
  switch (pickType(ctx.rand, s, depth)) {
    case 'null':
      return null;
    case 'boolean':
      return ctx.rand() < 0.5;
    case 'integer':
      return sampleInteger(ctx.rand, s);
    case 'number':
      return sampleNumber(ctx.rand, s);
    case 'string':
      return sampleString(ctx.rand, s);
    case 'array':
      return sampleArray(ctx, s, depth);
    case 'object':
      return sampleObject(ctx, s, depth);
    default:
      return words(ctx.rand, 1, 2);
  }
}

// ---------------------------------------------------------------------------------------------
// $ref, allOf and branches

/** `raw` with its $ref and allOf folded in (as far as merge() can), so one schema remains. */
function normalize(ctx: Ctx, raw: Schema, depth = 0): Schema {
  // An allOf that refers back to itself: cut off like a cycle of bare $refs.
  if (depth > MAX_DEPTH) return {};
  let s = raw;
  // A chain of $refs or nested allOfs is short in real schemas; a cycle of bare $refs is cut off.
  for (let i = 0; i < 32; i++) {
    if (typeof s.$ref === 'string') {
      const { $ref, ...rest } = s;
      const target = resolveRef(ctx.root, $ref);
      s = isObject(target) ? merge(target, rest) : rest;
    } else if (Array.isArray(s.allOf)) {
      const { allOf, ...rest } = s;
      s = rest;
      for (const member of allOf) {
        if (member === false) return { not: {} };
        if (isObject(member)) s = merge(s, normalize(ctx, member, depth + 1));
      }
    } else {
      break;
    }
  }
  return s;
}

/** A JSON pointer within the same document: "#", "#/$defs/Name", "#/definitions/a~1b". */
function resolveRef(root: unknown, ref: string): unknown {
  if (!ref.startsWith('#')) return undefined;
  let node = root;
  const path = ref.slice(1);
  if (path === '') return node;
  if (!path.startsWith('/')) return undefined;
  for (const part of path.slice(1).split('/')) {
    const key = decodeURIComponent(part).replace(/~1/g, '/').replace(/~0/g, '~');
    if (Array.isArray(node)) node = node[Number(key)];
    else if (isObject(node) && Object.hasOwn(node, key)) node = node[key];
    else return undefined;
  }
  return node;
}

/**
 * Both schemas at once, for the simple cases allOf and a branch beside its siblings make:
 * properties merged by name, required united, types intersected, bounds tightened, enums
 * intersected; any other keyword present in both keeps b's value.
 */
function merge(a: Schema, b: Schema): Schema {
  const out: Schema = { ...a };
  for (const [key, bv] of Object.entries(b)) {
    const av = out[key];
    if (av === undefined) {
      out[key] = bv;
      continue;
    }
    switch (key) {
      case 'properties':
        if (isObject(av) && isObject(bv)) {
          const props: Schema = { ...av };
          for (const [name, ps] of Object.entries(bv)) {
            const prev = props[name];
            props[name] = prev === undefined ? ps : { allOf: [prev, ps] };
          }
          out[key] = props;
        }
        break;
      case 'required':
        out[key] = [...new Set([...asStrings(av), ...asStrings(bv)])];
        break;
      case 'type': {
        const at = typeList(av);
        const bt = typeList(bv);
        const both = at.filter((t) => bt.includes(t));
        if (at.includes('number') && bt.includes('integer')) both.push('integer');
        if (bt.includes('number') && at.includes('integer')) both.push('integer');
        out[key] = [...new Set(both)];
        break;
      }
      case 'minimum':
      case 'exclusiveMinimum':
      case 'minLength':
      case 'minItems':
      case 'minProperties':
        out[key] = typeof av === 'number' && typeof bv === 'number' ? Math.max(av, bv) : bv;
        break;
      case 'maximum':
      case 'exclusiveMaximum':
      case 'maxLength':
      case 'maxItems':
      case 'maxProperties':
        out[key] = typeof av === 'number' && typeof bv === 'number' ? Math.min(av, bv) : bv;
        break;
      case 'enum':
        if (Array.isArray(av) && Array.isArray(bv)) {
          const keys = new Set(bv.map(canonical));
          out[key] = av.filter((v) => keys.has(canonical(v)));
        }
        break;
      case 'additionalProperties':
        out[key] = av === false || bv === false ? false : isObject(bv) ? bv : av;
        break;
      case 'items':
        out[key] = isObject(av) && isObject(bv) ? { allOf: [av, bv] } : bv;
        break;
      case 'anyOf':
      case 'oneOf':
        // Two sets of branches, both to hold: one set of their pairs (the sample is checked
        // against the real schema afterwards, which tells oneOf's exclusivity apart).
        if (Array.isArray(av) && Array.isArray(bv)) {
          out[key] = av.flatMap((x) => bv.map((y) => ({ allOf: [x, y] }))).slice(0, 64);
        }
        break;
      case 'not':
        out[key] = { anyOf: [av, bv] };
        break;
      default:
        out[key] = bv;
    }
  }
  return out;
}

/** A branch, null-only branches (pydantic's Optional) drawn less often than the others. */
function pickBranch(ctx: Ctx, branches: readonly unknown[]): Schema {
  const weights = branches.map((b): number => {
    if (b === false) return 0;
    if (!isObject(b)) return 1;
    const t = typeList(normalize(ctx, b).type);
    return t.length === 1 && t[0] === 'null' ? 0.25 : 1;
  });
  const total = weights.reduce((x, y) => x + y, 0);
  if (total === 0) return { not: {} };
  let r = ctx.rand() * total;
  for (let i = 0; i < branches.length; i++) {
    r -= weights[i]!;
    const b = branches[i];
    if (r < 0 && weights[i]! > 0) return isObject(b) ? b : {};
  }
  const last = branches.findLast((_, i) => weights[i]! > 0);
  return isObject(last) ? last : {};
}

// ---------------------------------------------------------------------------------------------
// Types

const TYPES = ['null', 'boolean', 'integer', 'number', 'string', 'array', 'object'];

function typeList(t: unknown): string[] {
  if (typeof t === 'string') return TYPES.includes(t) ? [t] : [];
  if (Array.isArray(t)) return t.filter((x): x is string => typeof x === 'string');
  return [];
}

/** The declared type (one of a list, null less often), else the one the keywords imply. */
function pickType(rand: Rand, s: Schema, depth: number): string {
  if (s.type !== undefined) {
    const types = typeList(s.type).filter((t) => TYPES.includes(t));
    if (types.length === 0) return 'null'; // an empty intersection: nothing fits
    const nonNull = types.filter((t) => t !== 'null');
    if (nonNull.length === 0) return 'null';
    if (nonNull.length < types.length && rand() < 0.2) return 'null';
    return pick(rand, nonNull);
  }
  if (
    s.properties !== undefined ||
    s.required !== undefined ||
    s.additionalProperties !== undefined ||
    s.minProperties !== undefined
  ) {
    return 'object';
  }
  if (s.items !== undefined || s.prefixItems !== undefined || s.minItems !== undefined) {
    return 'array';
  }
  if (
    s.minLength !== undefined ||
    s.maxLength !== undefined ||
    s.pattern !== undefined ||
    s.format !== undefined
  ) {
    return 'string';
  }
  if (s.multipleOf !== undefined && Number.isInteger(s.multipleOf)) return 'integer';
  for (const k of ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf']) {
    if (typeof s[k] === 'number') return 'number';
  }
  return depth === 0 ? 'object' : 'string';
}

/** Whether a root schema says anything about its instance (beyond annotations). */
function constrains(s: Schema): boolean {
  const annotations = new Set(['title', 'description', '$schema', '$id', 'examples', 'default']);
  return Object.keys(s).some((k) => !annotations.has(k) && k !== '$defs' && k !== 'definitions');
}

// ---------------------------------------------------------------------------------------------
// Numbers

interface Bounds {
  lo: number;
  hi: number;
  loOpen: boolean;
  hiOpen: boolean;
}

function bounds(s: Schema): Bounds {
  let lo = Number.NEGATIVE_INFINITY;
  let hi = Number.POSITIVE_INFINITY;
  let loOpen = false;
  let hiOpen = false;
  if (typeof s.minimum === 'number') {
    lo = s.minimum;
    loOpen = s.exclusiveMinimum === true; // draft 4
  }
  if (typeof s.maximum === 'number') {
    hi = s.maximum;
    hiOpen = s.exclusiveMaximum === true;
  }
  if (typeof s.exclusiveMinimum === 'number' && s.exclusiveMinimum >= lo) {
    lo = s.exclusiveMinimum;
    loOpen = true;
  }
  if (typeof s.exclusiveMaximum === 'number' && s.exclusiveMaximum <= hi) {
    hi = s.exclusiveMaximum;
    hiOpen = true;
  }
  return { lo, hi, loOpen, hiOpen };
}

/** Where to draw from: the allowed range cut to about ±1000, so numbers stay short. */
function window(lo: number, hi: number): [number, number] {
  const wLo = Math.max(lo, -1000);
  const wHi = Math.min(hi, 1000);
  if (wLo <= wHi) return [wLo, wHi];
  return lo > 1000 ? [lo, Math.min(hi, lo + 1000)] : [Math.max(lo, hi - 1000), hi];
}

function sampleInteger(rand: Rand, s: Schema): number {
  const b = bounds(s);
  let lo = b.loOpen ? Math.floor(b.lo) + 1 : Math.ceil(b.lo);
  let hi = b.hiOpen ? Math.ceil(b.hi) - 1 : Math.floor(b.hi);
  if (lo === Number.NEGATIVE_INFINITY && hi === Number.POSITIVE_INFINITY) [lo, hi] = [0, 100];
  else if (hi === Number.POSITIVE_INFINITY) hi = lo + 100;
  else if (lo === Number.NEGATIVE_INFINITY) lo = hi >= 0 ? 0 : hi - 100;
  if (lo > hi) return lo; // unsatisfiable bounds
  const m = s.multipleOf;
  if (typeof m === 'number' && m > 0) {
    const step = Number.isInteger(m) ? m : lcmWithOne(m);
    const [kLo, kHi] = window(Math.ceil(lo / step), Math.floor(hi / step));
    if (kLo > kHi) return Math.ceil(lo / step) * step; // no multiple in range: best effort
    return randInt(rand, kLo, kHi) * step;
  }
  const [wLo, wHi] = window(lo, hi);
  return randInt(rand, wLo, wHi);
}

/** The least integer multiple of a fractional multipleOf (an integer type needs one). */
function lcmWithOne(m: number): number {
  for (let k = 1; k <= 1000; k++) if (Number.isInteger(m * k)) return m * k;
  return Math.ceil(m);
}

function sampleNumber(rand: Rand, s: Schema): number {
  const b = bounds(s);
  let { lo, hi } = b;
  if (lo === Number.NEGATIVE_INFINITY && hi === Number.POSITIVE_INFINITY) [lo, hi] = [0, 100];
  else if (hi === Number.POSITIVE_INFINITY) hi = lo + 100;
  else if (lo === Number.NEGATIVE_INFINITY) lo = hi >= 0 ? 0 : hi - 100;
  const inRange = (v: number) =>
    (b.loOpen ? v > b.lo : v >= b.lo) && (b.hiOpen ? v < b.hi : v <= b.hi);
  const m = s.multipleOf;
  if (typeof m === 'number' && m > 0) {
    const [kLo, kHi] = window(Math.ceil(lo / m), Math.floor(hi / m));
    // ajv (as most validators) checks value / m for an integer in floating point: keep to the
    // multiples that pass that, and to the range. A decimal m such as 0.1 may have few.
    for (let i = 0; i < 16 && kLo <= kHi; i++) {
      const v = Number((randInt(rand, kLo, kHi) * m).toPrecision(12));
      if (inRange(v) && Number.isInteger(v / m)) return v;
    }
    return Number((Math.max(kLo, Math.min(kHi, 0)) * m).toPrecision(12));
  }
  if (lo > hi) return lo;
  const [wLo, wHi] = window(lo, hi);
  if (wLo === wHi) return wLo;
  // Strictly inside when the ends are open; whole numbers now and then, else two decimals.
  const raw = wLo + (0.02 + 0.96 * rand()) * (wHi - wLo);
  const whole = Math.round(raw);
  const cents = Math.round(raw * 100) / 100;
  if (rand() < 0.3 && inRange(whole)) return whole;
  return inRange(cents) ? cents : raw;
}

// ---------------------------------------------------------------------------------------------
// Strings

function sampleString(rand: Rand, s: Schema): string {
  const minLen = typeof s.minLength === 'number' ? clampCount(s.minLength) : 0;
  const maxLen =
    typeof s.maxLength === 'number' ? Math.floor(s.maxLength) : Number.POSITIVE_INFINITY;
  const fits = (v: string) => {
    const n = [...v].length;
    return n >= minLen && n <= maxLen;
  };
  if (typeof s.format === 'string') {
    const v = sampleFormat(rand, s.format);
    if (v !== null && fits(v)) return v;
  }
  if (typeof s.pattern === 'string') {
    let re: RegExp | null = null;
    let node: Node | null = null;
    try {
      re = new RegExp(s.pattern, 'u');
      node = new PatternParser(s.pattern).parse();
    } catch {
      // Unsupported syntax (or not a valid pattern): words below, which may not match.
    }
    if (re !== null && node !== null) {
      for (let i = 0; i < REDRAWS; i++) {
        const v = generate(rand, node);
        if (re.test(v) && fits(v)) return v;
      }
    }
  }
  return sized(rand, minLen, maxLen);
}

/** A few words within the length bounds, never ending in a space. */
function sized(rand: Rand, minLen: number, maxLen: number): string {
  const n = randInt(rand, 1, 3);
  let v = pick(rand, WORDS);
  // Whole words while they fit; a cut word only where the bounds leave no other way.
  for (let i = 1; i < n || v.length < minLen; i++) {
    const w = pick(rand, WORDS);
    if (v.length + 1 + w.length > maxLen && v.length >= minLen) break;
    v += ` ${w}`;
  }
  if (v.length > maxLen) v = v.slice(0, Math.max(0, maxLen));
  // Tool-call parsers strip argument values (GLM's does): no space at the end.
  return v.endsWith(' ') ? `${v.slice(0, -1)}x` : v;
}

function words(rand: Rand, min: number, max: number): string {
  const n = randInt(rand, min, max);
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(pick(rand, WORDS));
  return out.join(' ');
}

function pad2(n: number): string {
  return String(n).padStart(2, '0');
}

/** A valid example of a format, or null for formats not known here (they get words). */
function sampleFormat(rand: Rand, format: string): string | null {
  const date = () =>
    `${randInt(rand, 2020, 2026)}-${pad2(randInt(rand, 1, 12))}-${pad2(randInt(rand, 1, 28))}`;
  const time = () =>
    `${pad2(randInt(rand, 0, 23))}:${pad2(randInt(rand, 0, 59))}:${pad2(randInt(rand, 0, 59))}Z`;
  const hex = (n: number) => {
    let out = '';
    for (let i = 0; i < n; i++) out += randInt(rand, 0, 15).toString(16);
    return out;
  };
  switch (format) {
    case 'date':
      return date();
    case 'time':
      return time();
    case 'date-time':
      return `${date()}T${time()}`;
    case 'duration':
      return `P${randInt(rand, 1, 30)}D`;
    case 'email':
    case 'idn-email':
      return `${pick(rand, WORDS)}@example.com`;
    case 'hostname':
    case 'idn-hostname':
      return `${pick(rand, WORDS)}.example.com`;
    case 'uri':
    case 'url':
    case 'iri':
    case 'uri-reference':
    case 'iri-reference':
      return `https://example.com/${pick(rand, WORDS)}`;
    case 'ipv4':
      return `192.0.2.${randInt(rand, 1, 254)}`;
    case 'ipv6':
      return `2001:db8::${hex(4)}`;
    case 'uuid':
      return `${hex(8)}-${hex(4)}-4${hex(3)}-${pick(rand, ['8', '9', 'a', 'b'])}${hex(3)}-${hex(12)}`;
    default:
      return null;
  }
}

// Patterns: a parser for the plain part of ECMAScript regular expressions (literals, escapes,
// classes, groups, alternation, quantifiers, anchors) and a generator of a matching string. The
// result is checked against the real RegExp, so anything mis-read only costs a fallback.

type Node =
  | { kind: 'alt'; options: Node[] }
  | { kind: 'seq'; items: Node[] }
  | { kind: 'repeat'; node: Node; min: number; max: number }
  | { kind: 'chars'; ranges: [number, number][]; negated: boolean }
  | { kind: 'empty' };

const DIGIT: [number, number][] = [[0x30, 0x39]];
const WORD: [number, number][] = [
  [0x61, 0x7a],
  [0x41, 0x5a],
  [0x30, 0x39],
  [0x5f, 0x5f],
];
const SPACE: [number, number][] = [
  [0x20, 0x20],
  [0x09, 0x0d],
];

class PatternParser {
  private i = 0;
  constructor(private readonly src: string) {}

  parse(): Node {
    const node = this.alternation();
    if (this.i < this.src.length) throw new Error('unbalanced pattern');
    return node;
  }

  private alternation(): Node {
    const options = [this.sequence()];
    while (this.src[this.i] === '|') {
      this.i++;
      options.push(this.sequence());
    }
    return options.length === 1 ? options[0]! : { kind: 'alt', options };
  }

  private sequence(): Node {
    const items: Node[] = [];
    while (this.i < this.src.length && this.src[this.i] !== '|' && this.src[this.i] !== ')') {
      items.push(this.quantified(this.atom()));
    }
    return { kind: 'seq', items };
  }

  private atom(): Node {
    const c = this.src[this.i++]!;
    switch (c) {
      case '^':
      case '$':
        return { kind: 'empty' };
      case '.':
        return { kind: 'chars', ranges: WORD, negated: false };
      case '(': {
        if (this.src[this.i] === '?') {
          if (this.src[this.i + 1] !== ':') throw new Error('lookaround or named group');
          this.i += 2;
        }
        const inner = this.alternation();
        if (this.src[this.i++] !== ')') throw new Error('unclosed group');
        return inner;
      }
      case '[':
        return this.charClass();
      case '\\':
        return this.escape(false);
      case '*':
      case '+':
      case '?':
      case '{':
      case ')':
        throw new Error(`unexpected ${c}`);
      default: {
        const cp = this.src.codePointAt(this.i - 1)!;
        if (cp > 0xffff) this.i++; // the surrogate pair's second half
        return { kind: 'chars', ranges: [[cp, cp]], negated: false };
      }
    }
  }

  /** After a backslash: a class escape, or one literal character. */
  private escape(inClass: boolean): Node {
    const c = this.src[this.i++];
    if (c === undefined) throw new Error('trailing backslash');
    const lit = (cp: number): Node => ({ kind: 'chars', ranges: [[cp, cp]], negated: false });
    switch (c) {
      case 'd':
        return { kind: 'chars', ranges: DIGIT, negated: false };
      case 'D':
        return { kind: 'chars', ranges: DIGIT, negated: true };
      case 'w':
        return { kind: 'chars', ranges: WORD, negated: false };
      case 'W':
        return { kind: 'chars', ranges: WORD, negated: true };
      case 's':
        return { kind: 'chars', ranges: SPACE, negated: false };
      case 'S':
        return { kind: 'chars', ranges: SPACE, negated: true };
      case 'n':
        return lit(0x0a);
      case 't':
        return lit(0x09);
      case 'r':
        return lit(0x0d);
      case 'u':
      case 'x': {
        const digits = this.src.slice(this.i, this.i + (c === 'x' ? 2 : 4));
        if (!/^([0-9a-fA-F]{2}|[0-9a-fA-F]{4})$/.test(digits)) throw new Error('\\u{...} escape');
        this.i += digits.length;
        return lit(Number.parseInt(digits, 16));
      }
      default:
        if (/[0-9bBpPkc]/.test(c) && !(inClass && c === 'b')) {
          throw new Error(`unsupported escape \\${c}`);
        }
        return lit(inClass && c === 'b' ? 0x08 : c.codePointAt(0)!);
    }
  }

  private charClass(): Node {
    let negated = false;
    if (this.src[this.i] === '^') {
      negated = true;
      this.i++;
    }
    const ranges: [number, number][] = [];
    while (this.i < this.src.length && this.src[this.i] !== ']') {
      const lo = this.classAtom();
      // [\D...] and the like: rare in tool schemas, not modelled.
      if (lo.kind !== 'chars' || lo.negated) throw new Error('negated escape in a class');
      const range = lo.ranges.length === 1 ? lo.ranges[0]! : null;
      if (range !== null && range[0] === range[1] && this.src[this.i] === '-') {
        const next = this.src[this.i + 1];
        if (next !== undefined && next !== ']') {
          this.i++;
          const hi = this.classAtom();
          if (hi.kind !== 'chars' || hi.ranges.length !== 1) throw new Error('bad range');
          ranges.push([range[0], hi.ranges[0]![1]]);
          continue;
        }
      }
      ranges.push(...lo.ranges);
    }
    if (this.src[this.i++] !== ']') throw new Error('unclosed class');
    if (ranges.length === 0 && !negated) throw new Error('[] matches nothing');
    return { kind: 'chars', ranges, negated };
  }

  private classAtom(): Node {
    const c = this.src[this.i++]!;
    if (c === '\\') return this.escape(true);
    const cp = this.src.codePointAt(this.i - 1)!;
    if (cp > 0xffff) this.i++;
    return { kind: 'chars', ranges: [[cp, cp]], negated: false };
  }

  private quantified(node: Node): Node {
    const c = this.src[this.i];
    let min: number;
    let max: number;
    if (c === '*' || c === '+' || c === '?') {
      this.i++;
      [min, max] = c === '*' ? [0, 2] : c === '+' ? [1, 3] : [0, 1];
    } else if (c === '{') {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(this.src.slice(this.i));
      if (m === null) return node; // a literal brace, as ECMAScript reads it outside 'u' mode
      this.i += m[0].length;
      min = Number(m[1]);
      max = m[2] === undefined ? min : m[3] === '' ? min + 2 : Number(m[3]);
      if (max > min + 3 && min >= 0) max = Math.max(min, Math.min(max, min + 3));
    } else {
      return node;
    }
    if (this.src[this.i] === '?') this.i++; // lazy: same strings
    return { kind: 'repeat', node, min, max };
  }
}

/** The characters a class or escape draws from when it allows printable ASCII. */
const PRINTABLE: [number, number] = [0x21, 0x7e];

function generate(rand: Rand, node: Node): string {
  switch (node.kind) {
    case 'empty':
      return '';
    case 'alt':
      return generate(rand, pick(rand, node.options));
    case 'seq':
      return node.items.map((n) => generate(rand, n)).join('');
    case 'repeat': {
      const n = randInt(rand, node.min, node.max);
      let out = '';
      for (let k = 0; k < n; k++) out += generate(rand, node.node);
      return out;
    }
    case 'chars': {
      const inSet = (cp: number) => node.ranges.some(([a, b]) => cp >= a && cp <= b);
      // Letters and digits, else other printable ASCII, when the class allows them, so values
      // read as text.
      const printable: number[] = [];
      for (let cp = PRINTABLE[0]; cp <= PRINTABLE[1]; cp++) {
        if (inSet(cp) !== node.negated) printable.push(cp);
      }
      const alnum = printable.filter((cp) => /[A-Za-z0-9]/.test(String.fromCodePoint(cp)));
      if (alnum.length > 0 && rand() < 0.9) return String.fromCodePoint(pick(rand, alnum));
      if (printable.length > 0) return String.fromCodePoint(pick(rand, printable));
      if (node.negated) {
        const other = [0x20, 0xe9, 0x4e00].find((cp) => !inSet(cp));
        return String.fromCodePoint(other ?? 0x1f600);
      }
      const [a, b] = pick(rand, node.ranges);
      return String.fromCodePoint(randInt(rand, a, Math.min(b, 0x10ffff)));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Arrays and objects

function sampleArray(ctx: Ctx, s: Schema, depth: number): unknown[] {
  const rand = ctx.rand;
  const prefix: unknown[] = Array.isArray(s.prefixItems)
    ? s.prefixItems
    : Array.isArray(s.items)
      ? s.items
      : [];
  const rest: unknown = Array.isArray(s.prefixItems)
    ? s.items
    : Array.isArray(s.items)
      ? s.additionalItems
      : s.items;
  const minItems = typeof s.minItems === 'number' ? clampCount(s.minItems) : 0;
  let maxItems = typeof s.maxItems === 'number' ? Math.floor(s.maxItems) : Number.POSITIVE_INFINITY;
  if (rest === false) maxItems = Math.min(maxItems, prefix.length);
  const wanted = depth >= SHALLOW_DEPTH ? 0 : Math.max(randInt(rand, 1, 3), prefix.length);
  const count = Math.max(minItems, Math.min(wanted, maxItems));
  const out: unknown[] = [];
  const seen = new Set<string>();
  for (let i = 0; i < count; i++) {
    const itemSchema = i < prefix.length ? prefix[i] : rest;
    let value = sample(ctx, itemSchema ?? true, depth + 1);
    if (s.uniqueItems === true) {
      for (let t = 0; t < REDRAWS && seen.has(canonical(value)); t++) {
        value = sample(ctx, itemSchema ?? true, depth + 1);
      }
      // Too few distinct values (a small enum): stop early where minItems allows.
      if (seen.has(canonical(value)) && i >= minItems) break;
      seen.add(canonical(value));
    }
    out.push(value);
  }
  if (s.contains !== undefined && !out.some((v) => matches(ctx, s.contains, v, 0))) {
    const value = sample(ctx, s.contains, depth + 1);
    if (out.length < maxItems) out.push(value);
    else if (out.length > prefix.length) out[out.length - 1] = value;
  }
  return out;
}

function sampleObject(ctx: Ctx, s: Schema, depth: number): Record<string, unknown> {
  const rand = ctx.rand;
  const props = isObject(s.properties) ? s.properties : {};
  const required = asStrings(s.required);
  const additional = s.additionalProperties;
  const minProps = typeof s.minProperties === 'number' ? s.minProperties : 0;
  const maxProps = typeof s.maxProperties === 'number' ? s.maxProperties : Number.POSITIVE_INFINITY;
  const names = Object.keys(props);
  const chosen = new Set<string>(required);
  const optional = names.filter((n) => !chosen.has(n) && props[n] !== false);
  for (const n of optional) {
    if (depth < SHALLOW_DEPTH && chosen.size < maxProps && rand() < 0.5) chosen.add(n);
  }
  for (const n of optional) if (chosen.size < minProps) chosen.add(n);
  let extra = 0;
  while (chosen.size < minProps && additional !== false && extra < 64) {
    const name = `${pick(rand, WORDS)}_${++extra}`;
    if (!Object.hasOwn(props, name)) chosen.add(name);
  }
  const out: Record<string, unknown> = {};
  // Declared order first, as a model writes them after reading the schema.
  const order = [
    ...names.filter((n) => chosen.has(n)),
    ...[...chosen].filter((n) => !Object.hasOwn(props, n)),
  ];
  for (const name of order) {
    const schema = Object.hasOwn(props, name) ? props[name] : extraSchema(s, name);
    Object.defineProperty(out, name, {
      value: sample(ctx, schema, depth + 1),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

/** The schema of a key not in `properties`: its patternProperties match, else additionalProperties. */
function extraSchema(s: Schema, name: string): unknown {
  if (isObject(s.patternProperties)) {
    for (const [pattern, schema] of Object.entries(s.patternProperties)) {
      try {
        if (new RegExp(pattern, 'u').test(name)) return schema;
      } catch {
        // Not a pattern this runtime reads: skip it.
      }
    }
  }
  return isObject(s.additionalProperties) ? s.additionalProperties : true;
}

// ---------------------------------------------------------------------------------------------
// A validator for the same subset: oneOf, not and enum filtering need to know what a value fits.

function matches(ctx: Ctx, raw: unknown, v: unknown, depth: number): boolean {
  if (raw === true || raw === undefined) return true;
  if (raw === false) return false;
  if (!isObject(raw) || depth > MAX_DEPTH || ++ctx.work > WORK_LIMIT) return true;
  if (typeof raw.$ref === 'string') {
    const target = resolveRef(ctx.root, raw.$ref);
    if (target !== undefined && !matches(ctx, target, v, depth + 1)) return false;
  }
  const s = raw;
  if (Array.isArray(s.allOf) && !s.allOf.every((b) => matches(ctx, b, v, depth + 1))) return false;
  if (Array.isArray(s.anyOf) && !s.anyOf.some((b) => matches(ctx, b, v, depth + 1))) return false;
  if (Array.isArray(s.oneOf) && s.oneOf.filter((b) => matches(ctx, b, v, depth + 1)).length !== 1) {
    return false;
  }
  if (s.not !== undefined && matches(ctx, s.not, v, depth + 1)) return false;
  if ('const' in s && canonical(s.const) !== canonical(v)) return false;
  if (Array.isArray(s.enum) && !s.enum.some((e) => canonical(e) === canonical(v))) return false;
  if (s.type !== undefined && !typeList(s.type).some((t) => isOfType(v, t))) return false;
  if (typeof v === 'number') return numberFits(s, v);
  if (typeof v === 'string') return stringFits(s, v);
  if (Array.isArray(v)) return arrayFits(ctx, s, v, depth);
  if (isObject(v)) return objectFits(ctx, s, v, depth);
  return true;
}

function isOfType(v: unknown, t: string): boolean {
  switch (t) {
    case 'null':
      return v === null;
    case 'boolean':
      return typeof v === 'boolean';
    case 'integer':
      return typeof v === 'number' && Number.isInteger(v);
    case 'number':
      return typeof v === 'number' && Number.isFinite(v);
    case 'string':
      return typeof v === 'string';
    case 'array':
      return Array.isArray(v);
    case 'object':
      return isObject(v);
    default:
      return false;
  }
}

function numberFits(s: Schema, v: number): boolean {
  const b = bounds(s);
  if (b.loOpen ? v <= b.lo : v < b.lo) return false;
  if (b.hiOpen ? v >= b.hi : v > b.hi) return false;
  const m = s.multipleOf;
  return !(typeof m === 'number' && m > 0 && !Number.isInteger(v / m));
}

function stringFits(s: Schema, v: string): boolean {
  const n = [...v].length;
  if (typeof s.minLength === 'number' && n < s.minLength) return false;
  if (typeof s.maxLength === 'number' && n > s.maxLength) return false;
  if (typeof s.pattern === 'string') {
    try {
      if (!new RegExp(s.pattern, 'u').test(v)) return false;
    } catch {
      // A pattern this runtime cannot read constrains nothing here.
    }
  }
  return true;
}

function arrayFits(ctx: Ctx, s: Schema, v: unknown[], depth: number): boolean {
  if (typeof s.minItems === 'number' && v.length < s.minItems) return false;
  if (typeof s.maxItems === 'number' && v.length > s.maxItems) return false;
  if (s.uniqueItems === true && new Set(v.map(canonical)).size !== v.length) return false;
  const prefix = Array.isArray(s.prefixItems)
    ? s.prefixItems
    : Array.isArray(s.items)
      ? s.items
      : [];
  const rest = Array.isArray(s.prefixItems)
    ? s.items
    : Array.isArray(s.items)
      ? s.additionalItems
      : s.items;
  for (let i = 0; i < v.length; i++) {
    const schema = i < prefix.length ? prefix[i] : rest;
    if (!matches(ctx, schema, v[i], depth + 1)) return false;
  }
  if (s.contains !== undefined && !v.some((x) => matches(ctx, s.contains, x, depth + 1))) {
    return false;
  }
  return true;
}

function objectFits(ctx: Ctx, s: Schema, v: Schema, depth: number): boolean {
  const keys = Object.keys(v);
  if (typeof s.minProperties === 'number' && keys.length < s.minProperties) return false;
  if (typeof s.maxProperties === 'number' && keys.length > s.maxProperties) return false;
  if (!asStrings(s.required).every((k) => Object.hasOwn(v, k))) return false;
  const props = isObject(s.properties) ? s.properties : {};
  const patterns = isObject(s.patternProperties) ? Object.entries(s.patternProperties) : [];
  for (const k of keys) {
    let covered = false;
    if (Object.hasOwn(props, k)) {
      covered = true;
      if (!matches(ctx, props[k], v[k], depth + 1)) return false;
    }
    for (const [pattern, schema] of patterns) {
      let hit = false;
      try {
        hit = new RegExp(pattern, 'u').test(k);
      } catch {
        // Unreadable pattern: no match.
      }
      if (hit) {
        covered = true;
        if (!matches(ctx, schema, v[k], depth + 1)) return false;
      }
    }
    if (!covered && s.additionalProperties !== undefined) {
      if (!matches(ctx, s.additionalProperties, v[k], depth + 1)) return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Helpers

function isObject(v: unknown): v is Schema {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * A minimum length or count as a loop bound: at most 10,000, so a tool definition asking for
 * a billion items gets a best effort rather than an answer that never ends.
 */
function clampCount(n: number): number {
  return Number.isFinite(n) ? Math.min(10_000, Math.max(0, Math.ceil(n))) : 0;
}

function asStrings(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
}

function pick<T>(rand: Rand, items: readonly T[]): T {
  return items[Math.min(items.length - 1, Math.floor(rand() * items.length))]!;
}

/** An integer in [lo, hi], both ends included. */
function randInt(rand: Rand, lo: number, hi: number): number {
  return Math.min(hi, lo + Math.floor(rand() * (hi - lo + 1)));
}

/** JSON with sorted keys: equality as JSON Schema's enum, const and uniqueItems mean it. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (isObject(v)) {
    const keys = Object.keys(v).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}
