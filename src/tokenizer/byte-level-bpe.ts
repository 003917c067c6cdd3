// The tokenizer.json family most LLMs use (Qwen, GLM, GPT-2, DeepSeek): added tokens split out
// first, NFC, a regex pre-tokenizer, GPT-2's byte alphabet, BPE merges. Encoded here over typed
// arrays (pair-table.ts, bpe-merge.ts), with no vocabulary strings kept: the ids of the 256 byte
// tokens and the merge table are all it needs. fromJson() answers null for any other family,
// which then goes to @huggingface/tokenizers (load.ts).

import { BpeMerger } from './bpe-merge.js';
import { BYTE_TO_CHAR } from './byte-level.js';
import { PairTable } from './pair-table.js';
import { splitPattern } from './split-pattern.js';

/** Pieces up to this many UTF-16 units are cached, up to this many of them. */
const CACHED_PIECE_CHARS = 24;
const CACHE_ENTRIES = 16_384;

/** GPT-2's pre-tokenizer regex (the ByteLevel pre-tokenizer's, with use_regex). */
const GPT2_SPLIT =
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

interface Json {
  [field: string]: unknown;
}

export interface ByteLevelBpeParts {
  byteIds: Int32Array;
  pairs: PairTable;
  splits: readonly RegExp[];
  nfc: boolean;
  /** Added tokens (content -> id), split out of the text before anything else. */
  added: ReadonlyMap<string, number>;
  /** Ids the post-processor puts around a sequence when special tokens are added. */
  prefix: readonly number[];
  suffix: readonly number[];
}

export class ByteLevelBpe {
  readonly #parts: ByteLevelBpeParts;
  readonly #merger: BpeMerger;
  readonly #addedPattern: RegExp | null;
  readonly #utf8 = new TextEncoder();
  #bytes = new Uint8Array(256);
  /** Short pieces already merged (words recur): cleared when full, so it stays a few MB. */
  readonly #cache = new Map<string, number | Int32Array>();
  /** The ids of the text being encoded (grown as needed, reused). */
  #out = new Int32Array(1024);

  constructor(parts: ByteLevelBpeParts) {
    this.#parts = parts;
    this.#merger = new BpeMerger(parts.pairs);
    const contents = [...parts.added.keys()].sort((a, b) => b.length - a.length);
    this.#addedPattern =
      contents.length === 0 ? null : new RegExp(contents.map(escapeRegExp).join('|'), 'gu');
  }

  /** The encoder for this tokenizer.json, or null when it is not of this family. */
  static fromJson(json: Json): ByteLevelBpe | null {
    const parts = byteLevelBpeParts(json);
    return parts === null ? null : new ByteLevelBpe(parts);
  }

  encode(text: string, addSpecialTokens: boolean): Int32Array {
    const { prefix, suffix, added } = this.#parts;
    let at = 0;
    if (addSpecialTokens) at = this.#append(prefix, at);
    const pattern = this.#addedPattern;
    let from = 0;
    if (pattern !== null) {
      pattern.lastIndex = 0;
      for (let m = pattern.exec(text); m !== null; m = pattern.exec(text)) {
        at = this.#encodeOrdinary(text.slice(from, m.index), at);
        at = this.#append([added.get(m[0])!], at);
        from = m.index + m[0].length;
      }
    }
    at = this.#encodeOrdinary(from === 0 ? text : text.slice(from), at);
    if (addSpecialTokens) at = this.#append(suffix, at);
    return this.#out.slice(0, at);
  }

  #append(ids: readonly number[], at: number): number {
    const out = this.#room(at, ids.length);
    for (const id of ids) out[at++] = id;
    return at;
  }

  /** The output array with room for `n` more ids after `at`. */
  #room(at: number, n: number): Int32Array {
    if (at + n > this.#out.length) {
      const grown = new Int32Array(Math.max(at + n, 2 * this.#out.length));
      grown.set(this.#out.subarray(0, at));
      this.#out = grown;
    }
    return this.#out;
  }

  /** Text without added tokens: normalized, pre-tokenized, each piece merged. */
  #encodeOrdinary(raw: string, at: number): number {
    if (raw === '') return at;
    const text = this.#parts.nfc ? raw.normalize('NFC') : raw;
    return this.#encodeSplit(this.#parts.splits, text, at);
  }

  /** Splits `text` by the first regex, each piece by the rest, and encodes the pieces. */
  #encodeSplit(splits: readonly RegExp[], text: string, at: number): number {
    const [first, ...rest] = splits;
    if (first === undefined) return this.#encodePiece(text, at);
    let end = at;
    forEachPiece(first, text, (piece) => {
      end = this.#encodeSplit(rest, piece, end);
    });
    return end;
  }

  #encodePiece(piece: string, at: number): number {
    const cached = this.#cache.get(piece);
    if (cached !== undefined) {
      if (typeof cached === 'number') {
        this.#room(at, 1)[at] = cached;
        return at + 1;
      }
      this.#room(at, cached.length).set(cached, at);
      return at + cached.length;
    }
    const end = this.#mergePiece(piece, at);
    if (piece.length <= CACHED_PIECE_CHARS) {
      if (this.#cache.size >= CACHE_ENTRIES) this.#cache.clear();
      this.#cache.set(piece, end === at + 1 ? this.#out[at]! : this.#out.slice(at, end));
    }
    return end;
  }

  #mergePiece(piece: string, at: number): number {
    if (this.#bytes.length < 3 * piece.length) this.#bytes = new Uint8Array(3 * piece.length);
    const n = this.#utf8.encodeInto(piece, this.#bytes).written;
    const byteIds = this.#parts.byteIds;
    const out = this.#room(at, n);
    if (n === 1) {
      out[at] = byteIds[this.#bytes[0]!]!;
      return at + 1;
    }
    const symbols = this.#merger.symbols(n);
    for (let i = 0; i < n; i++) symbols[i] = byteIds[this.#bytes[i]!]!;
    return this.#merger.merge(n, out, at);
  }
}

/** Calls `each` with the matches of `split` in `text` and the text between them (Isolated). */
function forEachPiece(split: RegExp, text: string, each: (piece: string) => void): void {
  split.lastIndex = 0;
  let from = 0;
  for (let m = split.exec(text); m !== null; m = split.exec(text)) {
    if (m[0] === '') {
      split.lastIndex++;
      continue;
    }
    if (m.index > from) each(text.slice(from, m.index));
    each(m[0]);
    from = m.index + m[0].length;
  }
  if (from < text.length) each(from === 0 ? text : text.slice(from));
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}

/** The parts of a supported tokenizer.json, or null for anything this encoder does not model. */
function byteLevelBpeParts(json: Json): ByteLevelBpeParts | null {
  const model = json.model as Json | undefined;
  if (model?.type !== 'BPE' || model.dropout != null || model.byte_fallback === true) return null;
  if (model.ignore_merges === true || model.continuing_subword_prefix || model.end_of_word_suffix)
    return null;
  const nfc = normalizerIsNfc(json.normalizer as Json | null | undefined);
  const splits = preTokenizerSplits(json.pre_tokenizer as Json | null | undefined);
  const around = postProcessorIds(json.post_processor as Json | null | undefined);
  if (nfc === null || splits === null || around === null) return null;
  const added = new Map<string, number>();
  for (const t of (json.added_tokens ?? []) as Json[]) {
    if (t.lstrip === true || t.rstrip === true || t.single_word === true) return null;
    added.set(t.content as string, t.id as number);
  }
  const vocab = model.vocab as Record<string, number>;
  const byteIds = new Int32Array(256);
  for (let b = 0; b < 256; b++) {
    const id = vocab[BYTE_TO_CHAR[b]!];
    if (id === undefined) return null;
    byteIds[b] = id;
  }
  const merges = model.merges as (string | [string, string])[];
  const pairs = new PairTable(merges.length);
  for (let rank = 0; rank < merges.length; rank++) {
    const m = merges[rank]!;
    const [a, b] = typeof m === 'string' ? splitMerge(m) : m;
    const left = vocab[a];
    const right = vocab[b];
    const merged = vocab[a + b];
    if (left === undefined || right === undefined || merged === undefined) return null;
    pairs.add(left, right, rank, merged);
  }
  return { byteIds, pairs, splits, nfc, added, ...around };
}

function splitMerge(m: string): [string, string] {
  const at = m.indexOf(' ', 1);
  return [m.slice(0, at), m.slice(at + 1)];
}

function normalizerIsNfc(n: Json | null | undefined): boolean | null {
  if (n == null) return false;
  if (n.type === 'NFC') return true;
  if (n.type === 'Sequence' && (n.normalizers as Json[]).length === 0) return false;
  return null;
}

/** The split regexes in order, ending in the byte-level step; null when not of this form. */
function preTokenizerSplits(p: Json | null | undefined): RegExp[] | null {
  if (p == null) return null;
  const steps = p.type === 'Sequence' ? (p.pretokenizers as Json[]) : [p];
  const last = steps[steps.length - 1];
  if (last?.type !== 'ByteLevel' || last.add_prefix_space === true) return null;
  const out: RegExp[] = [];
  for (const s of steps.slice(0, -1)) {
    const pattern = (s.pattern as Json | undefined)?.Regex;
    if (
      s.type !== 'Split' ||
      typeof pattern !== 'string' ||
      s.behavior !== 'Isolated' ||
      s.invert === true
    ) {
      return null;
    }
    const re = splitPattern(pattern);
    if (re === null) return null;
    out.push(re);
  }
  if (last.use_regex !== false) out.push(splitPattern(GPT2_SPLIT)!);
  return out;
}

/** Ids added around one sequence: ByteLevel (none) or TemplateProcessing's single template. */
function postProcessorIds(
  p: Json | null | undefined,
): { prefix: number[]; suffix: number[] } | null {
  const none = { prefix: [], suffix: [] };
  if (p == null) return none;
  const steps = p.type === 'Sequence' ? (p.processors as Json[]) : [p];
  let result: { prefix: number[]; suffix: number[] } | null = none;
  for (const s of steps) {
    if (s.type === 'ByteLevel') continue;
    if (s.type !== 'TemplateProcessing') return null;
    result = templateIds(s);
    if (result === null) return null;
  }
  return result;
}

function templateIds(s: Json): { prefix: number[]; suffix: number[] } | null {
  const specials = (s.special_tokens ?? {}) as Record<string, { ids: number[] }>;
  const prefix: number[] = [];
  const suffix: number[] = [];
  let seen = false;
  for (const item of s.single as Json[]) {
    if ('Sequence' in item) {
      if (seen) return null;
      seen = true;
      continue;
    }
    const name = (item.SpecialToken as Json | undefined)?.id as string | undefined;
    const ids = name === undefined ? undefined : specials[name]?.ids;
    if (ids === undefined) return null;
    (seen ? suffix : prefix).push(...ids);
  }
  return seen ? { prefix, suffix } : null;
}
