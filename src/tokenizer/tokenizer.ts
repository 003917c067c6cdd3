// One model's tokenizer: text <-> ids with Hugging Face's tokenizer.json semantics (by
// @huggingface/tokenizers, the pure-JS port of the Rust crate, which loads the file offline), its
// chat template, its end-of-sequence ids, and the packed byte table the output worker detokenizes
// with. Built by load.ts from a directory or a preset's files.
import type { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import type { ChatMessage, ChatTemplate, ChatTemplateOptions } from './chat-template.js';
import { RS_ERR_TOKENIZER_TEMPLATE } from './errors.js';
import type { TokenBytesTable } from './token-bytes.js';

export interface EncodeOptions {
  /** Add the tokenizer's BOS/EOS as its post-processor says (default true, as transformers). */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Leave special tokens out of the text (default true, as vLLM). */
  skipSpecialTokens?: boolean;
}

/** What load.ts hands the constructor. */
export interface TokenizerParts {
  name: string;
  hf: HfTokenizer;
  bytes: TokenBytesTable;
  chatTemplate: ChatTemplate | null;
  eosTokenIds: readonly number[];
  bosTokenId: number | null;
}

const textDecoder = new TextDecoder('utf-8');

export class Tokenizer {
  /** The directory or preset it was loaded from. */
  readonly name: string;
  /** Ids in [0, vocabSize) are the ones it can decode (some may be holes: see `bytes.has`). */
  readonly vocabSize: number;
  /** generation_config.json's eos_token_id, else tokenizer_config.json's eos_token; first = the model's. */
  readonly eosTokenIds: readonly number[];
  readonly bosTokenId: number | null;
  /** Each id's UTF-8 bytes over a SharedArrayBuffer (the output worker's TokenByteSource). */
  readonly bytes: TokenBytesTable;
  readonly #hf: HfTokenizer;
  readonly #template: ChatTemplate | null;

  constructor(parts: TokenizerParts) {
    this.name = parts.name;
    this.#hf = parts.hf;
    this.bytes = parts.bytes;
    this.vocabSize = parts.bytes.size;
    this.#template = parts.chatTemplate;
    this.eosTokenIds = parts.eosTokenIds;
    this.bosTokenId = parts.bosTokenId;
  }

  get hasChatTemplate(): boolean {
    return this.#template !== null;
  }

  encode(text: string, opts: EncodeOptions = {}): Int32Array {
    const { ids } = this.#hf.encode(text, { add_special_tokens: opts.addSpecialTokens ?? true });
    return Int32Array.from(ids);
  }

  /** Ids outside the vocabulary decode to nothing. */
  decode(ids: ArrayLike<number>, opts: DecodeOptions = {}): string {
    const known: number[] = [];
    for (let i = 0; i < ids.length; i++) if (this.bytes.has(ids[i]!)) known.push(ids[i]!);
    return this.#hf.decode(known, { skip_special_tokens: opts.skipSpecialTokens ?? true });
  }

  /** The conversation as the model's prompt text. */
  applyChatTemplate(messages: readonly ChatMessage[], opts: ChatTemplateOptions = {}): string {
    if (this.#template === null) {
      throw new RS_ERR_TOKENIZER_TEMPLATE(`tokenizer ${this.name} has no chat template`);
    }
    return this.#template.render(messages, opts);
  }

  isSpecial(id: number): boolean {
    return this.bytes.isSpecial(id);
  }

  /**
   * One token decoded alone (what vLLM shows as a logprob's `token`): part of a character decodes
   * to U+FFFD. Special tokens give their text.
   */
  tokenText(id: number): string {
    return textDecoder.decode(this.bytes.bytesOf(id));
  }

  /** The vocabulary's own spelling of a token (`Ġworld`), vLLM's /tokenize `token_strs`; null for none. */
  idToToken(id: number): string | null {
    return this.#hf.id_to_token(id) ?? null;
  }

  /** The id of a vocabulary spelling or added token (`<|im_end|>`), or null. */
  tokenToId(token: string): number | null {
    return this.#hf.token_to_id(token) ?? null;
  }
}
