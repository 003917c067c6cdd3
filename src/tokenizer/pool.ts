// The served tokenizer, off the main thread: a piscina pool of threads, each of which parses
// tokenizer.json and holds the BPE tables and the chat template; every encode and chat render runs
// there (a 16 KB prompt takes ~10 ms to encode; a short one costs a thread hop, ~0.1 ms). The
// calling thread keeps only a TokenizerView (the byte table, shared, and plain fields) that the
// first thread describes at start, and decodes byte-level ids with it. A thread answers an encode
// with one transferred buffer (ids, then the rendered prompt's UTF-8), so no array of numbers is
// cloned onto the main thread.

import { join } from 'node:path';
import { Piscina } from 'piscina';
import { type ErrorData, errorFromData } from '../errors.js';
import type { ChatMessage, ChatTemplateOptions } from './chat-template.js';
import { packageRoot } from './package-root.js';
import type { TokenizerSource } from './source.js';
import { byteLevelSpelling, decodeWithTable } from './table-text.js';
import type { DecodeOptions, EncodeOptions } from './tokenizer.js';
import { type TokenizerDescription, TokenizerView } from './tokenizer-view.js';

export type TokenizeTask =
  | { kind: 'describe' }
  | { kind: 'encode'; text: string; addSpecialTokens: boolean }
  | {
      kind: 'chat';
      messages: readonly ChatMessage[];
      options: ChatTemplateOptions;
      addSpecialTokens: boolean;
    }
  | { kind: 'decode'; ids: Int32Array; skipSpecialTokens: boolean }
  | { kind: 'token-strs'; ids: Int32Array };

/** What a thread answers when the task fails: the coded error as plain data (src/errors.ts). */
export interface TokenizeFailure {
  error: ErrorData;
}

type TokenizeAnswer = ArrayBuffer | TokenizerDescription | string | (string | null)[];

/** A conversation rendered by the chat template and its ids. */
export interface RenderedPrompt {
  prompt: string;
  ids: Int32Array;
}

export interface TokenizerPoolOptions {
  source: TokenizerSource;
  /** Threads (default 1: the machine's cores are shared with the engine and the output worker). */
  threads?: number;
}

export class TokenizerPool {
  /** The served tokenizer's byte table and plain fields, on this thread. */
  readonly view: TokenizerView;
  readonly #pool: Piscina<TokenizeTask, TokenizeAnswer | TokenizeFailure>;

  private constructor(
    pool: Piscina<TokenizeTask, TokenizeAnswer | TokenizeFailure>,
    view: TokenizerView,
  ) {
    this.#pool = pool;
    this.view = view;
  }

  /** Starts the threads (each loads the tokenizer) and takes the first one's description. */
  static async start(opts: TokenizerPoolOptions): Promise<TokenizerPool> {
    const threads = opts.threads ?? 1;
    const pool = new Piscina<TokenizeTask, TokenizeAnswer | TokenizeFailure>({
      filename: join(packageRoot(), 'dist', 'workers', 'tokenize.js'),
      minThreads: threads,
      maxThreads: threads,
      idleTimeout: Number.POSITIVE_INFINITY,
      // Not parked in Atomics.wait when idle (piscina's default): its timer answers requests to
      // collect garbage (src/obs/memory-collect.ts), as the packers' do (packer-pool.ts).
      atomics: 'disabled',
      workerData: opts.source,
      name: 'default',
    });
    try {
      const description = (await run(pool, { kind: 'describe' })) as TokenizerDescription;
      return new TokenizerPool(pool, new TokenizerView(description));
    } catch (err) {
      await pool.destroy();
      throw err;
    }
  }

  async encode(text: string, opts: EncodeOptions = {}): Promise<Int32Array> {
    const addSpecialTokens = opts.addSpecialTokens ?? true;
    const answer = await run(this.#pool, { kind: 'encode', text, addSpecialTokens });
    return unpackRendered(answer as ArrayBuffer).ids;
  }

  /**
   * The conversation through the chat template, then encoded (without adding special tokens by
   * default: the template writes them, as vLLM's chat routes do).
   */
  async renderChatAndEncode(
    messages: readonly ChatMessage[],
    opts: ChatTemplateOptions & EncodeOptions = {},
  ): Promise<RenderedPrompt> {
    const options: ChatTemplateOptions = {
      tools: opts.tools ?? null,
      addGenerationPrompt: opts.addGenerationPrompt ?? true,
      chatTemplateKwargs: opts.chatTemplateKwargs ?? null,
      continueFinalMessage: opts.continueFinalMessage ?? false,
    };
    const addSpecialTokens = opts.addSpecialTokens ?? false;
    const answer = await run(this.#pool, { kind: 'chat', messages, options, addSpecialTokens });
    return unpackRendered(answer as ArrayBuffer);
  }

  /** Ids to text as Tokenizer.decode: from the byte table here, on a thread for other families. */
  async decode(ids: Int32Array, opts: DecodeOptions = {}): Promise<string> {
    const skipSpecialTokens = opts.skipSpecialTokens ?? true;
    if (this.view.kind === 'byte-level')
      return decodeWithTable(this.view.bytes, ids, skipSpecialTokens);
    return (await run(this.#pool, { kind: 'decode', ids, skipSpecialTokens })) as string;
  }

  /** Each id's vocabulary spelling (Tokenizer.idToToken), null for an id without a token. */
  async tokenStrs(ids: Int32Array): Promise<(string | null)[]> {
    const table = this.view.bytes;
    if (this.view.kind === 'byte-level')
      return Array.from(ids, (id) => byteLevelSpelling(table, id));
    return (await run(this.#pool, { kind: 'token-strs', ids })) as (string | null)[];
  }

  async close(): Promise<void> {
    await this.#pool.destroy();
  }
}

async function run(
  pool: Piscina<TokenizeTask, TokenizeAnswer | TokenizeFailure>,
  task: TokenizeTask,
): Promise<TokenizeAnswer> {
  const out = await pool.run(task);
  if (isFailure(out)) throw errorFromData(out.error);
  return out;
}

function isFailure(out: TokenizeAnswer | TokenizeFailure): out is TokenizeFailure {
  return typeof out === 'object' && out !== null && 'error' in out;
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
