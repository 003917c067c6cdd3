// The bytes of every id of a Hugging Face tokenizer.json, as its decoder would produce them for
// that token alone: byte-level vocabularies through GPT-2's byte alphabet, byte-fallback `<0xNN>`
// tokens as one raw byte, SentencePiece-style `▁` as a space (the Replace/Metaspace decoders),
// added tokens as their text. The decoder's whole-sequence steps (stripping the first space, cleaning
// up spaces before punctuation) are not per token and are left out, as vLLM's incremental
// detokenizer leaves them out.
import { writeByteLevel } from './byte-level.js';
import { TokenBytesBuilder, type TokenBytesTable } from './token-bytes.js';

/** The parts of tokenizer.json read here. */
export interface TokenizerJson {
  model: {
    type?: string;
    vocab: Record<string, number> | [string, number][];
    byte_fallback?: boolean;
    merges?: (string | [string, string])[];
  };
  added_tokens?: { id: number; content: string; special?: boolean }[];
  decoder?: DecoderJson | null;
}

interface DecoderJson {
  type: string;
  decoders?: DecoderJson[];
  pattern?: { String?: string; Regex?: string };
  content?: string;
  replacement?: string;
}

const utf8 = new TextEncoder();
const BYTE_FALLBACK = /^<0x([0-9A-Fa-f]{2})>$/;

/** How the decoder turns one model token into bytes. */
interface TokenDecoding {
  byteLevel: boolean;
  byteFallback: boolean;
  replace: readonly [string, string][];
}

/** Each id's bytes and flags, packed with no object per token (151k ids for Qwen3). */
export function vocabBytesTable(json: TokenizerJson): TokenBytesTable {
  const decoders = flatten(json.decoder ?? null);
  const decoding: TokenDecoding = {
    byteLevel: decoders.some((d) => d.type === 'ByteLevel'),
    byteFallback:
      json.model.byte_fallback === true || decoders.some((d) => d.type === 'ByteFallback'),
    replace: replacements(decoders),
  };
  const vocab = json.model.vocab;
  const added = json.added_tokens ?? [];
  let count = 0;
  if (Array.isArray(vocab)) count = vocab.length;
  else for (const token in vocab) count = Math.max(count, vocab[token]! + 1);
  for (const t of added) count = Math.max(count, t.id + 1);
  const builder = new TokenBytesBuilder(count);
  if (Array.isArray(vocab))
    for (let id = 0; id < vocab.length; id++)
      builder.commit(id, writeModelToken(builder, vocab[id]![0], decoding), false, false);
  else
    for (const token in vocab)
      builder.commit(vocab[token]!, writeModelToken(builder, token, decoding), false, false);
  for (const t of added) {
    const { written } = utf8.encodeInto(
      t.content,
      builder.room(3 * t.content.length).subarray(builder.at),
    );
    builder.commit(t.id, written, t.special === true, true);
  }
  return builder.finish();
}

/** Writes a model token's bytes at the builder's `at`; answers how many. */
function writeModelToken(
  builder: TokenBytesBuilder,
  token: string,
  { byteLevel, byteFallback, replace }: TokenDecoding,
): number {
  if (byteLevel) {
    const n = writeByteLevel(token, builder.room(token.length), builder.at);
    if (n >= 0) return n;
  }
  if (byteFallback) {
    const m = BYTE_FALLBACK.exec(token);
    if (m !== null) {
      builder.room(1)[builder.at] = Number.parseInt(m[1]!, 16);
      return 1;
    }
  }
  let text = token;
  for (const [from, to] of replace) text = text.split(from).join(to);
  return utf8.encodeInto(text, builder.room(3 * text.length).subarray(builder.at)).written;
}

function flatten(d: DecoderJson | null): DecoderJson[] {
  if (d === null) return [];
  if (d.type === 'Sequence') return (d.decoders ?? []).flatMap(flatten);
  return [d];
}

/** String replacements the decoder makes on each token (`▁` -> ` ` for SentencePiece vocabularies). */
function replacements(decoders: readonly DecoderJson[]): [string, string][] {
  const out: [string, string][] = [];
  for (const d of decoders) {
    if (d.type === 'Replace' && d.pattern?.String !== undefined)
      out.push([d.pattern.String, d.content ?? '']);
    if (d.type === 'Metaspace') out.push([d.replacement ?? '▁', ' ']);
  }
  return out;
}
