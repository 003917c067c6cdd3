// Tokenization off the main thread: a piscina pool of threads, each holding the same tokenizer,
// for texts long enough that encoding them would hold up the event loop (a 16 KB prompt takes
// ~10 ms to encode); shorter texts are encoded inline, where a thread hop would cost more than the
// work. A thread answers with one transferred buffer (ids, then the rendered prompt's UTF-8), so
// no array of numbers is cloned onto the main thread.

import { join } from 'node:path';
import { Piscina } from 'piscina';
import { RingserveError } from '../errors.js';
import type { ChatMessage, ChatTemplateOptions } from './chat-template.js';
import { packageRoot } from './package-root.js';
import { openTokenizer, type TokenizerSource } from './source.js';
import type { EncodeOptions, Tokenizer } from './tokenizer.js';

/** Texts (or conversations) shorter than this many characters are tokenized on the calling thread. */
export const INLINE_BELOW_CHARS = 512;

export type TokenizeTask =
  | { kind: 'encode'; text: string; addSpecialTokens: boolean }
  | {
      kind: 'chat';
      messages: readonly ChatMessage[];
      options: ChatTemplateOptions;
      addSpecialTokens: boolean;
    };

/** What a thread answers when the task fails: the coded error as plain data. */
export interface TokenizeFailure {
  code: string;
  message: string;
  statusCode: number;
  param: string | null;
}

/** A conversation rendered by the chat template and its ids. */
export interface RenderedPrompt {
  prompt: string;
  ids: Int32Array;
}

export interface TokenizerPoolOptions {
  source: TokenizerSource;
  /** Threads (default 1: the machine's cores are shared with the engine and the output worker). */
  threads?: number;
  inlineBelowChars?: number;
}

export class TokenizerPool {
  /** The same tokenizer on this thread: inline work, decoding, the byte table. */
  readonly tokenizer: Tokenizer;
  readonly #pool: Piscina<TokenizeTask, ArrayBuffer | TokenizeFailure>;
  readonly #inlineBelow: number;

  private constructor(tokenizer: Tokenizer, opts: TokenizerPoolOptions) {
    this.tokenizer = tokenizer;
    this.#inlineBelow = opts.inlineBelowChars ?? INLINE_BELOW_CHARS;
    const threads = opts.threads ?? 1;
    this.#pool = new Piscina({
      filename: join(packageRoot(), 'dist', 'workers', 'tokenize.js'),
      minThreads: threads,
      maxThreads: threads,
      idleTimeout: Number.POSITIVE_INFINITY,
      workerData: opts.source,
      name: 'default',
    });
  }

  /** Loads the tokenizer here and starts the threads (which load it too). */
  static async start(opts: TokenizerPoolOptions): Promise<TokenizerPool> {
    return new TokenizerPool(await openTokenizer(opts.source), opts);
  }

  async encode(text: string, opts: EncodeOptions = {}): Promise<Int32Array> {
    const addSpecialTokens = opts.addSpecialTokens ?? true;
    if (text.length < this.#inlineBelow) return this.tokenizer.encode(text, { addSpecialTokens });
    return unpackRendered(await this.#run({ kind: 'encode', text, addSpecialTokens })).ids;
  }

  /**
   * The conversation through the chat template, then encoded (without adding special tokens by
   * default: the template writes them, as vLLM's chat routes do).
   */
  async renderChatAndEncode(
    messages: readonly ChatMessage[],
    opts: ChatTemplateOptions & EncodeOptions = {},
  ): Promise<RenderedPrompt> {
    const addSpecialTokens = opts.addSpecialTokens ?? false;
    const options: ChatTemplateOptions = {
      tools: opts.tools ?? null,
      addGenerationPrompt: opts.addGenerationPrompt ?? true,
      chatTemplateKwargs: opts.chatTemplateKwargs ?? null,
      continueFinalMessage: opts.continueFinalMessage ?? false,
    };
    if (conversationChars(messages) < this.#inlineBelow) {
      const prompt = this.tokenizer.applyChatTemplate(messages, options);
      return { prompt, ids: this.tokenizer.encode(prompt, { addSpecialTokens }) };
    }
    return unpackRendered(await this.#run({ kind: 'chat', messages, options, addSpecialTokens }));
  }

  async #run(task: TokenizeTask): Promise<ArrayBuffer> {
    const out = await this.#pool.run(task);
    if (out instanceof ArrayBuffer) return out;
    throw new RingserveError(out.code, out.message, out.statusCode, out.param);
  }

  async close(): Promise<void> {
    await this.#pool.destroy();
  }
}

/** Characters of a conversation's text content (parts included), to pick inline or a thread. */
function conversationChars(messages: readonly ChatMessage[]): number {
  let n = 0;
  for (const m of messages) {
    if (typeof m.content === 'string') n += m.content.length;
    else if (Array.isArray(m.content))
      for (const p of m.content) n += typeof p.text === 'string' ? p.text.length : 0;
    else n += 64;
  }
  return n;
}

/**
 * A thread's answer: | count: Int32 | ids: Int32 x count | prompt: UTF-8 |. Encoding a bare text
 * sends no prompt back.
 */
export function packRendered(ids: ArrayLike<number>, prompt: string | null): ArrayBuffer {
  const text = prompt === null ? new Uint8Array(0) : new TextEncoder().encode(prompt);
  const buf = new ArrayBuffer(4 * (ids.length + 1) + text.length);
  const head = new Int32Array(buf, 0, ids.length + 1);
  head[0] = ids.length;
  head.set(ids, 1);
  new Uint8Array(buf, 4 * (ids.length + 1)).set(text);
  return buf;
}

function unpackRendered(buf: ArrayBuffer): RenderedPrompt {
  const count = new Int32Array(buf, 0, 1)[0]!;
  return {
    ids: new Int32Array(buf, 4, count),
    prompt: new TextDecoder().decode(new Uint8Array(buf, 4 * (count + 1))),
  };
}
