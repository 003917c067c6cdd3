import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseArgs } from '../../src/cli-args.js';
import { loadTokenizer } from '../../src/tokenizer/load.js';
import { TokenizerPool } from '../../src/tokenizer/pool.js';
import { committedTokenizersDir, tokenizerForModel } from '../../src/tokenizer/presets.js';
import type { Tokenizer } from '../../src/tokenizer/tokenizer.js';

const LONG = 'Ein langer Text über Tokenisierung, mit Emoji 🤗 und 中文字符。\n'.repeat(40);

describe('TokenizerPool', () => {
  let pool: TokenizerPool;
  /** The same tokenizer loaded on this thread, to compare the pool's answers with. */
  let tok: Tokenizer;
  beforeAll(async () => {
    pool = await TokenizerPool.start({ source: { preset: 'tiny' } });
    tok = await tokenizerForModel('tiny');
  });
  afterAll(async () => {
    await pool.close();
  });

  it('encodes long texts on a thread to what the tokenizer gives inline', async () => {
    const ids = await pool.encode(LONG);
    expect(ids).toBeInstanceOf(Int32Array);
    expect([...ids]).toEqual([...tok.encode(LONG)]);
    expect([...(await pool.encode('short'))]).toEqual([...tok.encode('short')]);
    expect([...(await pool.encode('short', { addSpecialTokens: false }))]).toEqual([
      ...tok.encode('short', { addSpecialTokens: false }),
    ]);
  });

  it('renders and encodes a long conversation on a thread as inline', async () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: [{ type: 'text', text: LONG }] },
    ];
    const tools = [{ type: 'function', function: { name: 'f', parameters: {} } }];
    const out = await pool.renderChatAndEncode(messages, { tools });
    const prompt = tok.applyChatTemplate(messages, { tools });
    expect(out.prompt).toBe(prompt);
    expect(out.prompt.endsWith('<|im_start|>assistant\n')).toBe(true);
    expect([...out.ids]).toEqual([...tok.encode(prompt, { addSpecialTokens: false })]);
    const short = await pool.renderChatAndEncode([{ role: 'user', content: 'hi' }], {
      addGenerationPrompt: false,
    });
    expect(short.prompt).toBe('<|im_start|>user\nhi<|im_end|>\n');
    expect([...short.ids.slice(0, 1)]).toEqual([997]);
  });

  it('describes the tokenizer to this thread: byte table, vocabulary size, EOS, template', () => {
    const view = pool.view;
    expect(view.kind).toBe('byte-level');
    expect(view.vocabSize).toBe(tok.vocabSize);
    expect(view.textVocabSize).toBe(tok.textVocabSize);
    expect(view.eosTokenIds).toEqual(tok.eosTokenIds);
    expect(view.bosTokenId).toBe(tok.bosTokenId);
    expect(view.hasChatTemplate).toBe(true);
    expect(view.bytes.shared.sab).toBeInstanceOf(SharedArrayBuffer);
    for (const id of [0, 300, 997, 999])
      expect(view.bytes.bytesOf(id)).toEqual(tok.bytes.bytesOf(id));
  });

  it('decodes and spells ids here as the full tokenizer does', async () => {
    const ids = Int32Array.from([997, ...tok.encode('Grüße, 🤗 world'), 999, 5000]);
    for (const skipSpecialTokens of [true, false])
      expect(await pool.decode(ids, { skipSpecialTokens })).toBe(
        tok.decode(ids, { skipSpecialTokens }),
      );
    expect(await pool.tokenStrs(ids)).toEqual(Array.from(ids, (id) => tok.idToToken(id)));
  });
});

describe('a tokenizer directory without a chat template', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rs-tok-'));
  let pool: TokenizerPool;
  beforeAll(async () => {
    copyFileSync(
      join(committedTokenizersDir(), 'tiny', 'tokenizer.json'),
      join(dir, 'tokenizer.json'),
    );
    writeFileSync(
      join(dir, 'tokenizer_config.json'),
      JSON.stringify({ eos_token: '<|endoftext|>' }),
    );
    pool = await TokenizerPool.start({ source: { preset: 'tiny', dir } });
  });
  afterAll(async () => {
    await pool.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('loads, takes EOS from tokenizer_config.json, and refuses chat with a coded 400', async () => {
    expect(pool.view.eosTokenIds).toEqual([998]);
    expect(pool.view.hasChatTemplate).toBe(false);
    await expect(
      pool.renderChatAndEncode([{ role: 'user', content: 'a longer message' }]),
    ).rejects.toMatchObject({
      code: 'RS_ERR_TOKENIZER_TEMPLATE',
      statusCode: 400,
      param: 'messages',
    });
  });

  it('answers a load failure on the thread as the coded error, at start', async () => {
    await expect(
      TokenizerPool.start({ source: { preset: 'tiny', dir: join(dir, 'missing') } }),
    ).rejects.toMatchObject({ code: 'RS_ERR_CONFIG_INVALID', param: '--tokenizer' });
  });

  it('names --tokenizer when a directory has no tokenizer.json', async () => {
    await expect(loadTokenizer(join(dir, 'missing'))).rejects.toMatchObject({
      code: 'RS_ERR_CONFIG_INVALID',
      param: '--tokenizer',
    });
  });
});

describe('a tokenizer family the byte table cannot decode alone (tokenizers.js)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rs-tok-hf-'));
  const json = JSON.parse(
    readFileSync(join(committedTokenizersDir(), 'tiny', 'tokenizer.json'), 'utf8'),
  );
  let pool: TokenizerPool;
  beforeAll(async () => {
    writeFileSync(
      join(dir, 'tokenizer.json'),
      JSON.stringify({ ...json, normalizer: { type: 'NFKC' } }),
    );
    pool = await TokenizerPool.start({ source: { preset: 'tiny', dir } });
  });
  afterAll(async () => {
    await pool.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('encodes, decodes and spells on the thread as the full tokenizer does', async () => {
    const tok = await loadTokenizer(dir);
    expect(tok.kind).toBe('hf');
    expect(pool.view.kind).toBe('hf');
    const ids = await pool.encode('ﬁne words');
    expect([...ids]).toEqual([...tok.encode('ﬁne words')]);
    expect(await pool.decode(ids)).toBe('fine words');
    expect(await pool.tokenStrs(ids)).toEqual(Array.from(ids, (id) => tok.idToToken(id)));
  });
});

describe('--tokenizer', () => {
  it('is refused at startup when the directory has no tokenizer.json', () => {
    expect(() => parseArgs(['--tokenizer', tmpdir()], {})).toThrow(/--tokenizer/);
    const dir = join(committedTokenizersDir(), 'tiny');
    expect(parseArgs(['--tokenizer', dir], {}).tokenizer).toBe(dir);
    expect(parseArgs([], {}).tokenizer).toBeNull();
  });
});
