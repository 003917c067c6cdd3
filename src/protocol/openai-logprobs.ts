import type { JsonWriter } from './json-writer.js';
import { LOGPROB_FLOOR, type TopColumns } from './response-columns.js';
import type { TokenBytes } from './token-bytes.js';
import { countChars, sequenceAt } from './utf8.js';

/**
 * The per-token `logprobs` objects of the OpenAI answers, written byte by byte from the logprob
 * column and the tokenizer's byte table (no per-token JS object or string):
 *   completions: `{"text_offset": [..], "token_logprobs": [..], "tokens": [..], "top_logprobs": [{tok: lp}, ..]}`
 *   chat:        `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}`
 * A token's text is its bytes decoded with U+FFFD for a character split across tokens, as vLLM's
 * `tokenizer.decode([id])` gives it, special tokens included (written as their text: `skipSpecial`
 * false); `bytes` are that text's UTF-8 bytes.
 *
 * `top_logprobs` lists what vLLM lists (its serving_completion / serving_chat at v0.11-v0.13 and
 * since): the sampled token first, then the engine's best candidates in order, each token once;
 * completions keep k + 1 of them (k = 0: the sampled token alone), chat keeps k (k = 0: none).
 * A completion's dict is keyed by token text, so two candidates of the same text collapse into one
 * key for a JSON reader, as they do in vLLM's Python dict.
 */

const FLOOR = LOGPROB_FLOOR;

export class LogprobsWriter {
  readonly #tokens: TokenBytes;
  readonly #scratch: Uint8Array;

  constructor(tokens: TokenBytes) {
    this.#tokens = tokens;
    this.#scratch = new Uint8Array(tokens.maxTokenBytes);
  }

  /**
   * Completions' object for `ids` (logprobs `lps`); offsets start at `textOffset` characters and
   * grow by each token's text length, as vLLM counts them.
   */
  completion(
    w: JsonWriter,
    ids: Int32Array,
    lps: Float32Array,
    top: TopColumns | null,
    k: number,
    textOffset: number,
  ): void {
    w.raw('{"text_offset":[');
    let offset = textOffset;
    for (let i = 0; i < ids.length; i++) {
      if (i > 0) w.raw(',');
      w.int(offset);
      const n = this.#tokens.write(ids[i]!, this.#scratch, 0, false);
      offset += countChars(this.#scratch, 0, n);
    }
    w.raw('],"token_logprobs":[');
    for (let i = 0; i < lps.length; i++) {
      if (i > 0) w.raw(',');
      w.number(Math.max(lps[i]!, FLOOR));
    }
    w.raw('],"tokens":[');
    for (let i = 0; i < ids.length; i++) {
      if (i > 0) w.raw(',');
      this.#tokenText(w, ids[i]!);
    }
    w.raw('],"top_logprobs":[');
    const width = top === null ? 0 : top.k;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      w.raw(i > 0 ? ',{' : '{');
      this.#tokenText(w, id);
      w.raw(':').number(Math.max(lps[i]!, FLOOR));
      let listed = 1;
      for (let t = i * width, end = t + width; t < end && listed < k + 1; t++) {
        const other = (top as TopColumns).ids[t]!;
        if (other < 0 || other === id) continue;
        w.raw(',');
        this.#tokenText(w, other);
        w.raw(':').number(Math.max((top as TopColumns).logprobs[t]!, FLOOR));
        listed++;
      }
      w.raw('}');
    }
    w.raw(']}');
  }

  /** Chat's object for `ids`; `k` candidates under each `top_logprobs` (see the header). */
  chat(w: JsonWriter, ids: Int32Array, lps: Float32Array, top: TopColumns | null, k: number): void {
    const width = top === null ? 0 : top.k;
    w.raw('{"content":[');
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      w.raw(i > 0 ? ',{' : '{');
      this.#chatEntry(w, id, lps[i]!);
      w.raw(',"top_logprobs":[');
      if (k > 0) {
        w.raw('{');
        this.#chatEntry(w, id, lps[i]!);
        w.raw('}');
      }
      let listed = 1;
      for (let t = i * width, end = t + width; t < end && listed < k; t++) {
        const other = (top as TopColumns).ids[t]!;
        if (other < 0 || other === id) continue;
        w.raw(',{');
        this.#chatEntry(w, other, (top as TopColumns).logprobs[t]!);
        w.raw('}');
        listed++;
      }
      w.raw(']}');
    }
    w.raw(']}');
  }

  #chatEntry(w: JsonWriter, id: number, lp: number): void {
    w.raw('"token":');
    const n = this.#tokenText(w, id);
    w.raw(',"logprob":').number(Math.max(lp, FLOOR)).raw(',"bytes":[');
    writeLossyBytes(w, this.#scratch, n);
    w.raw(']');
  }

  /** Writes the token's text as a JSON string; returns its byte count (left in the scratch). */
  #tokenText(w: JsonWriter, id: number): number {
    const n = this.#tokens.write(id, this.#scratch, 0, false);
    w.utf8String(this.#scratch, 0, n);
    return n;
  }
}

/** The UTF-8 bytes of the text `bytes[0..n)` decodes to (an ill-formed part becomes EF BF BD). */
function writeLossyBytes(w: JsonWriter, bytes: Uint8Array, n: number): void {
  let at = 0;
  let first = true;
  while (at < n) {
    const len = sequenceAt(bytes, at, n);
    if (len > 0) {
      for (let k = 0; k < len; k++) {
        if (!first) w.raw(',');
        w.int(bytes[at + k]!);
        first = false;
      }
      at += len;
    } else {
      w.raw(first ? '239,191,189' : ',239,191,189');
      first = false;
      at -= len;
    }
  }
}
