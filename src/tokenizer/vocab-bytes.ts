// The bytes of every id of a Hugging Face tokenizer.json, as its decoder would produce them for
// that token alone: byte-level vocabularies through GPT-2's byte alphabet, byte-fallback `<0xNN>`
// tokens as one raw byte, SentencePiece-style `▁` as a space (the Replace/Metaspace decoders),
// added tokens as their text. The decoder's whole-sequence steps (stripping the first space, cleaning
// up spaces before punctuation) are not per token and are left out, as vLLM's incremental
// detokenizer leaves them out.
import { byteLevelBytes } from './byte-level.js';
import type { TokenBytesEntry } from './token-bytes.js';

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

/** Each id's bytes and special flag. */
export function vocabBytes(json: TokenizerJson): TokenBytesEntry[] {
  const decoders = flatten(json.decoder ?? null);
  const byteLevel = decoders.some((d) => d.type === 'ByteLevel');
  const byteFallback =
    json.model.byte_fallback === true || decoders.some((d) => d.type === 'ByteFallback');
  const replace = replacements(decoders);
  const entries = new Map<number, TokenBytesEntry>();
  for (const [token, id] of vocabEntries(json.model.vocab)) {
    entries.set(id, {
      id,
      bytes: modelTokenBytes(token, byteLevel, byteFallback, replace),
      special: false,
    });
  }
  for (const t of json.added_tokens ?? []) {
    entries.set(t.id, {
      id: t.id,
      bytes: utf8.encode(t.content),
      special: t.special === true,
      added: true,
    });
  }
  return [...entries.values()];
}

function modelTokenBytes(
  token: string,
  byteLevel: boolean,
  byteFallback: boolean,
  replace: readonly [string, string][],
): Uint8Array {
  if (byteLevel) {
    const bytes = byteLevelBytes(token);
    if (bytes !== null) return bytes;
  }
  if (byteFallback) {
    const m = BYTE_FALLBACK.exec(token);
    if (m !== null) return Uint8Array.of(Number.parseInt(m[1]!, 16));
  }
  let text = token;
  for (const [from, to] of replace) text = text.split(from).join(to);
  return utf8.encode(text);
}

function vocabEntries(vocab: TokenizerJson['model']['vocab']): [string, number][] {
  if (Array.isArray(vocab)) return vocab.map(([token], id) => [token, id]);
  return Object.entries(vocab);
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
