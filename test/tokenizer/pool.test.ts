import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseArgs } from '../../src/cli-args.js';
import { loadTokenizer } from '../../src/tokenizer/load.js';
import { TokenizerPool } from '../../src/tokenizer/pool.js';
import { committedTokenizersDir } from '../../src/tokenizer/presets.js';

const LONG = 'Ein langer Text über Tokenisierung, mit Emoji 🤗 und 中文字符。\n'.repeat(40);

describe('TokenizerPool', () => {
  let pool: TokenizerPool;
  beforeAll(async () => {
    pool = await TokenizerPool.start({ source: { preset: 'tiny' }, inlineBelowChars: 100 });
  });
  afterAll(async () => {
    await pool.close();
  });

  it('encodes long texts on a thread to what the tokenizer gives inline', async () => {
    const ids = await pool.encode(LONG);
    expect(ids).toBeInstanceOf(Int32Array);
    expect([...ids]).toEqual([...pool.tokenizer.encode(LONG)]);
    expect([...(await pool.encode('short'))]).toEqual([...pool.tokenizer.encode('short')]);
  });

  it('renders and encodes a long conversation on a thread as inline', async () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: [{ type: 'text', text: LONG }] },
    ];
    const tools = [{ type: 'function', function: { name: 'f', parameters: {} } }];
    const out = await pool.renderChatAndEncode(messages, { tools });
    const prompt = pool.tokenizer.applyChatTemplate(messages, { tools });
    expect(out.prompt).toBe(prompt);
    expect(out.prompt.endsWith('<|im_start|>assistant\n')).toBe(true);
    expect([...out.ids]).toEqual([...pool.tokenizer.encode(prompt, { addSpecialTokens: false })]);
    const short = await pool.renderChatAndEncode([{ role: 'user', content: 'hi' }], {
      addGenerationPrompt: false,
    });
    expect(short.prompt).toBe('<|im_start|>user\nhi<|im_end|>\n');
    expect([...short.ids.slice(0, 1)]).toEqual([997]);
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
    pool = await TokenizerPool.start({ source: { preset: 'tiny', dir }, inlineBelowChars: 10 });
  });
  afterAll(async () => {
    await pool.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('loads, takes EOS from tokenizer_config.json, and refuses chat with a coded 400', async () => {
    expect(pool.tokenizer.eosTokenIds).toEqual([998]);
    expect(pool.tokenizer.hasChatTemplate).toBe(false);
    await expect(
      pool.renderChatAndEncode([{ role: 'user', content: 'a longer message' }]),
    ).rejects.toMatchObject({
      code: 'RS_ERR_TOKENIZER_TEMPLATE',
      statusCode: 400,
      param: 'messages',
    });
  });

  it('names --tokenizer when a directory has no tokenizer.json', async () => {
    await expect(loadTokenizer(join(dir, 'missing'))).rejects.toMatchObject({
      code: 'RS_ERR_CONFIG_INVALID',
      param: '--tokenizer',
    });
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
