// Tokenizers from files: any local Hugging Face tokenizer directory (`--tokenizer DIR`), or a
// model preset's own files (presets.ts says where each comes from). Nothing is fetched: a missing
// or unreadable file is a configuration error naming `--tokenizer`.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { RS_ERR_CONFIG_INVALID } from '../errors.js';
import { ByteLevelBpe } from './byte-level-bpe.js';
import { ChatTemplate, type ChatTemplateSource } from './chat-template.js';
import { Tokenizer, type TokenizerEngine } from './tokenizer.js';
import { type TokenizerJson, vocabBytesTable } from './vocab-bytes.js';

/** The parsed files of one tokenizer. */
export interface TokenizerFiles {
  /** tokenizer.json */
  tokenizer: TokenizerJson & Record<string, unknown>;
  /** tokenizer_config.json ({} when absent) */
  config: TokenizerConfig;
  /** generation_config.json, when there is one */
  generation?: { eos_token_id?: number | number[]; bos_token_id?: number } | null;
  /** chat_template.jinja, which wins over the config's chat_template as in transformers */
  chatTemplate?: string | null;
}

type TokenText = string | { content: string } | null | undefined;

export interface TokenizerConfig {
  chat_template?: ChatTemplateSource;
  bos_token?: TokenText;
  eos_token?: TokenText;
  pad_token?: TokenText;
  unk_token?: TokenText;
  [field: string]: unknown;
}

/** Loads `dir`'s tokenizer.json, tokenizer_config.json, generation_config.json, chat_template.jinja. */
export async function loadTokenizer(dir: string): Promise<Tokenizer> {
  const tokenizer = await readJson(join(dir, 'tokenizer.json'), true);
  const config = (await readJson(join(dir, 'tokenizer_config.json'), false)) ?? {};
  const generation = await readJson(join(dir, 'generation_config.json'), false);
  const chatTemplate = await readText(join(dir, 'chat_template.jinja'));
  return tokenizerFromFiles(dir, {
    tokenizer: tokenizer as TokenizerFiles['tokenizer'],
    config: config as TokenizerConfig,
    generation: generation as TokenizerFiles['generation'],
    chatTemplate,
  });
}

export function tokenizerFromFiles(name: string, files: TokenizerFiles): Tokenizer {
  const { tokenizer, config } = files;
  if (typeof tokenizer.model !== 'object' || tokenizer.model === null) {
    throw new RS_ERR_CONFIG_INVALID('--tokenizer', `${name}: tokenizer.json has no model`);
  }
  const bpe = ByteLevelBpe.fromJson(tokenizer);
  const engine: TokenizerEngine =
    bpe === null
      ? { kind: 'hf', hf: new HfTokenizer(tokenizer, config) }
      : { kind: 'byte-level', bpe };
  const addedTokens = new Map((tokenizer.added_tokens ?? []).map((t) => [t.content, t.id]));
  const vocab = tokenizer.model.vocab;
  const idOf = (t: TokenText): number | null => {
    const text = tokenText(t);
    if (text === null) return null;
    const id = addedTokens.get(text) ?? (Array.isArray(vocab) ? undefined : vocab[text]);
    return id ?? null;
  };
  const eos = eosIds(files.generation?.eos_token_id, idOf(config.eos_token));
  const source = files.chatTemplate ?? config.chat_template ?? null;
  const specialTexts: Record<string, string> = {};
  for (const key of ['bos_token', 'eos_token', 'pad_token', 'unk_token'] as const) {
    const text = tokenText(config[key]);
    if (text !== null) specialTexts[key] = text;
  }
  return new Tokenizer({
    name,
    engine,
    addedTokens,
    bytes: vocabBytesTable(tokenizer),
    chatTemplate: source === null ? null : new ChatTemplate(source, specialTexts),
    eosTokenIds: eos,
    bosTokenId: files.generation?.bos_token_id ?? idOf(config.bos_token),
  });
}

function eosIds(
  fromGeneration: number | number[] | undefined,
  fromConfig: number | null,
): number[] {
  if (typeof fromGeneration === 'number') return [fromGeneration];
  if (Array.isArray(fromGeneration) && fromGeneration.length > 0) return [...fromGeneration];
  return fromConfig === null ? [] : [fromConfig];
}

function tokenText(t: TokenText): string | null {
  if (typeof t === 'string') return t;
  if (t !== null && typeof t === 'object' && typeof t.content === 'string') return t.content;
  return null;
}

async function readText(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new RS_ERR_CONFIG_INVALID(
      '--tokenizer',
      `cannot read ${path}: ${(err as Error).message}`,
    );
  }
}

async function readJson(path: string, required: boolean): Promise<unknown> {
  const text = await readText(path);
  if (text === null) {
    if (required) throw new RS_ERR_CONFIG_INVALID('--tokenizer', `${path} does not exist`);
    return null;
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new RS_ERR_CONFIG_INVALID(
      '--tokenizer',
      `${path} is not JSON: ${(err as Error).message}`,
    );
  }
}
