// One model's tokenizer: text <-> ids with Hugging Face's tokenizer.json semantics, its chat
// template, its end-of-sequence ids, and the packed byte table the output worker detokenizes with.
// Byte-level BPE vocabularies (Qwen, GLM, GPT-2 style) are encoded by ByteLevelBpe over typed
// arrays and decoded from the byte table, so a loaded tokenizer keeps almost nothing on the
// garbage-collected heap; any other tokenizer.json family goes through @huggingface/tokenizers,
// the pure-JS port of the Rust crate. Built by load.ts from a directory or a preset's files.
import type { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import type { ByteLevelBpe } from './byte-level-bpe.js';
import type { ChatMessage, ChatTemplate, ChatTemplateOptions } from './chat-template.js';
import { RS_ERR_TOKENIZER_TEMPLATE } from './errors.js';
import { byteLevelSpelling, decodeWithTable, textVocabSizeOf, tokenTextOf } from './table-text.js';
import type { TokenBytesTable } from './token-bytes.js';

export interface EncodeOptions {
  /** Add the tokenizer's BOS/EOS as its post-processor says (default true, as transformers). */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Leave special tokens out of the text (default true, as vLLM). */
  skipSpecialTokens?: boolean;
}

/** How a tokenizer turns text into ids: ours for byte-level BPE, else tokenizers.js. */
export type TokenizerEngine =
  | { kind: 'byte-level'; bpe: ByteLevelBpe }
  | { kind: 'hf'; hf: HfTokenizer };

/** What load.ts hands the constructor. */
export interface TokenizerParts {
  name: string;
  engine: TokenizerEngine;
  bytes: TokenBytesTable;
  /** Added tokens' texts -> ids (`<|im_end|>` -> 151645). */
  addedTokens: ReadonlyMap<string, number>;
  chatTemplate: ChatTemplate | null;
  eosTokenIds: readonly number[];
  bosTokenId: number | null;
}

export class Tokenizer {
  /** The directory or preset it was loaded from. */
  readonly name: string;
  /** Ids in [0, vocabSize) are the ones it can decode (some may be holes: see `bytes.has`). */
  readonly vocabSize: number;
  /** generation_config.json's eos_token_id, else tokenizer_config.json's eos_token; first = the model's. */
  readonly eosTokenIds: readonly number[];
  readonly bosTokenId: number | null;
  /** Each id's UTF-8 bytes over a SharedArrayBuffer (the output worker's TokenBytes). */
  readonly bytes: TokenBytesTable;
  readonly #engine: TokenizerEngine;
  readonly #added: ReadonlyMap<string, number>;
  readonly #template: ChatTemplate | null;

  constructor(parts: TokenizerParts) {
    this.name = parts.name;
    this.#engine = parts.engine;
    this.bytes = parts.bytes;
    this.vocabSize = parts.bytes.size;
    this.#added = parts.addedTokens;
    this.#template = parts.chatTemplate;
    this.eosTokenIds = parts.eosTokenIds;
    this.bosTokenId = parts.bosTokenId;
  }

  /** Ids below this are all ordinary text tokens: present, neither added nor special. */
  get textVocabSize(): number {
    return textVocabSizeOf(this.bytes);
  }

  /** How it encodes: its own byte-level BPE, or tokenizers.js (`hf`). */
  get kind(): TokenizerEngine['kind'] {
    return this.#engine.kind;
  }

  get hasChatTemplate(): boolean {
    return this.#template !== null;
  }

  encode(text: string, opts: EncodeOptions = {}): Int32Array {
    const add = opts.addSpecialTokens ?? true;
    const engine = this.#engine;
    if (engine.kind === 'byte-level') return engine.bpe.encode(text, add);
    return Int32Array.from(engine.hf.encode(text, { add_special_tokens: add }).ids);
  }

  /** Ids outside the vocabulary decode to nothing; a part of a character left alone to U+FFFD. */
  decode(ids: ArrayLike<number>, opts: DecodeOptions = {}): string {
    const skip = opts.skipSpecialTokens ?? true;
    const engine = this.#engine;
    if (engine.kind === 'hf') {
      const known: number[] = [];
      for (let i = 0; i < ids.length; i++) if (this.bytes.has(ids[i]!)) known.push(ids[i]!);
      return engine.hf.decode(known, { skip_special_tokens: skip });
    }
    return decodeWithTable(this.bytes, ids, skip);
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
    return tokenTextOf(this.bytes, id);
  }

  /** The vocabulary's own spelling of a token (`Ġworld`), vLLM's /tokenize `token_strs`; null for none. */
  idToToken(id: number): string | null {
    const engine = this.#engine;
    if (engine.kind === 'hf') return engine.hf.id_to_token(id) ?? null;
    return byteLevelSpelling(this.bytes, id);
  }

  /** The id of an added token's text (`<|im_end|>`) or of a vocabulary spelling (`Ġworld`), or null. */
  tokenToId(token: string): number | null {
    const added = this.#added.get(token);
    if (added !== undefined) return added;
    const engine = this.#engine;
    if (engine.kind === 'hf') return engine.hf.token_to_id(token) ?? null;
    // Rare (not per request): a scan of the byte table.
    for (let id = 0; id < this.vocabSize; id++) {
      if (!this.bytes.isAdded(id) && this.idToToken(id) === token) return id;
    }
    return null;
  }
}
