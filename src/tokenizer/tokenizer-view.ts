// What an API server's main thread holds of the served tokenizer: its token byte table (shared
// with the tokenizer thread that built it, and handed on to the output worker) and a few plain
// fields. No vocabulary strings, merge tables or chat template: those live on the tokenizer
// thread (workers/tokenize.ts), so the main isolate's heap stays small and its GCs short.

import { textVocabSizeOf } from './table-text.js';
import { type SharedTokenBytes, TokenBytesTable } from './token-bytes.js';
import type { Tokenizer } from './tokenizer.js';

/** A loaded tokenizer as plain data: what the tokenizer thread answers a `describe` task with. */
export interface TokenizerDescription {
  name: string;
  kind: Tokenizer['kind'];
  bytes: SharedTokenBytes;
  eosTokenIds: readonly number[];
  bosTokenId: number | null;
  hasChatTemplate: boolean;
}

export function describeTokenizer(t: Tokenizer): TokenizerDescription {
  return {
    name: t.name,
    kind: t.kind,
    bytes: t.bytes.shared,
    eosTokenIds: t.eosTokenIds,
    bosTokenId: t.bosTokenId,
    hasChatTemplate: t.hasChatTemplate,
  };
}

export class TokenizerView {
  readonly name: string;
  /** `byte-level`: ids turn into text and spellings from the byte table alone. */
  readonly kind: Tokenizer['kind'];
  /** Each id's UTF-8 bytes over the thread's SharedArrayBuffer (the output worker's TokenBytes). */
  readonly bytes: TokenBytesTable;
  readonly vocabSize: number;
  readonly eosTokenIds: readonly number[];
  readonly bosTokenId: number | null;
  readonly hasChatTemplate: boolean;

  constructor(d: TokenizerDescription) {
    this.name = d.name;
    this.kind = d.kind;
    this.bytes = new TokenBytesTable(d.bytes);
    this.vocabSize = this.bytes.size;
    this.eosTokenIds = d.eosTokenIds;
    this.bosTokenId = d.bosTokenId;
    this.hasChatTemplate = d.hasChatTemplate;
  }

  /** Ids below this are all ordinary text tokens: present, neither added nor special. */
  get textVocabSize(): number {
    return textVocabSizeOf(this.bytes);
  }
}
