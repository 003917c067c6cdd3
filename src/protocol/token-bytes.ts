// The bytes of a token id: the one interface every consumer of token text reads them through. The
// output worker's scatter (the text column), the stop-string detokenizer (server/cross-thread), the
// OpenAI logprobs writer (openai-logprobs.ts, run by the stream encoder and the packers) and the
// inline baseline all take a TokenBytes. Two things implement it:
//   - TokenBytesTable (src/tokenizer/token-bytes.ts): the served tokenizer's table, every id's bytes
//     in one SharedArrayBuffer that the threads share. What an API server always detokenizes with.
//   - ByteLevelStandIn (src/server/cross-thread/detokenizer.ts): bytes for any id by a fixed rule, for a
//     caller that starts the output side with no tokenizer (benchmarks, the fuzzer, some tests).
// It lives here, in protocol, because protocol may import only wire and errors (test/layering.test.ts)
// and the logprobs writer needs it; the server's layers import protocol. The tokenizer layer may
// import neither, so TokenBytesTable satisfies it by shape (TypeScript checks that wherever a table
// is passed as a TokenBytes, e.g. server/cross-thread/detokenizer.ts's tokenBytesFor).

/** Token id -> its UTF-8 bytes, written into a caller's buffer (no object per token). */
export interface TokenBytes {
  /** The most bytes write() gives for one token. */
  readonly maxTokenBytes: number;
  /**
   * Writes the bytes of `tokenId` at `out[offset..]` (room for maxTokenBytes) and returns how many.
   * Ids without a token write nothing. A special token writes nothing when `skipSpecial` (the text
   * of a completion, as skip_special_tokens), else its text where the source has one (a logprob's
   * token, as vLLM's `decode([id])`; the byte-level stand-in has none). A token may hold part of a
   * character: text is valid UTF-8 only where tokens are concatenated.
   */
  write(tokenId: number, out: Uint8Array, offset: number, skipSpecial: boolean): number;
}
