import { Worker } from 'node:worker_threads';
import { beforeAll, describe, expect, it } from 'vitest';
import { BYTE_TO_CHAR, byteLevelBytes } from '../../src/tokenizer/byte-level.js';
import { tokenizerForModel } from '../../src/tokenizer/presets.js';
import type { TokenBytesTable } from '../../src/tokenizer/token-bytes.js';
import type { Tokenizer } from '../../src/tokenizer/tokenizer.js';
import { vocabBytesTable } from '../../src/tokenizer/vocab-bytes.js';

const TEXTS = [
  'plain ascii text, with punctuation!',
  'Grüße aus Köln — naïve café',
  '数学题：求 1+2+…+100 的和。',
  'emoji 🤗🎉👩‍👩‍👧‍👦 and flags 🇫🇷',
  '\u{10348} Gothic, \u{1F9EA} test tube',
];

/** The text the byte table gives for `ids`, one token at a time as the output worker writes it. */
function tableText(table: TokenBytesTable, ids: ArrayLike<number>, skipSpecial = true): Buffer {
  const out = Buffer.alloc(ids.length * table.maxTokenBytes);
  let n = 0;
  for (let i = 0; i < ids.length; i++) n += table.write(ids[i]!, out, n, skipSpecial);
  return out.subarray(0, n);
}

/** Whether the bytes are not valid UTF-8 on their own (part of a character). */
function partial(bytes: Uint8Array): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    return false;
  } catch {
    return true;
  }
}

describe('GPT-2 byte alphabet', () => {
  it('maps 256 bytes to 256 distinct characters and back', () => {
    expect(new Set(BYTE_TO_CHAR).size).toBe(256);
    expect(BYTE_TO_CHAR[32]).toBe('Ġ');
    expect(BYTE_TO_CHAR[10]).toBe('Ċ');
    expect([...byteLevelBytes(BYTE_TO_CHAR.join(''))!]).toEqual([...Array(256).keys()]);
    expect(byteLevelBytes('a世')).toBeNull();
    expect([...byteLevelBytes('ĠworldĊ')!]).toEqual([...Buffer.from(' world\n')]);
  });
});

for (const preset of ['qwen3-30b-a3b', 'tiny']) {
  describe(`the ${preset} byte table`, () => {
    let tok: Tokenizer;
    beforeAll(async () => {
      tok = await tokenizerForModel(preset);
    });

    it('gives each text back from its ids token by token, characters split across tokens included', () => {
      let splits = 0;
      for (const text of TEXTS) {
        const ids = tok.encode(text);
        expect(tableText(tok.bytes, ids).toString('utf8'), text).toBe(text.normalize('NFC'));
        for (const id of ids) if (partial(tok.bytes.bytesOf(id))) splits++;
      }
      expect(splits).toBeGreaterThan(0);
    });

    it('skips special tokens unless asked for them', () => {
      const [eos] = tok.eosTokenIds;
      const ids = [...tok.encode('a b'), eos!];
      expect(tableText(tok.bytes, ids).toString()).toBe('a b');
      expect(tableText(tok.bytes, ids, false).toString()).toBe(
        `a b${tok.decode([eos!], { skipSpecialTokens: false })}`,
      );
      expect(tok.bytes.write(eos!, Buffer.alloc(64), 0)).toBe(0);
      expect(tok.bytes.write(-1, Buffer.alloc(64), 0)).toBe(0);
      expect(tok.bytes.write(tok.vocabSize, Buffer.alloc(64), 0)).toBe(0);
    });
  });
}

describe('TokenBytesTable', () => {
  it('packs byte-fallback and SentencePiece vocabularies, holes included', () => {
    // A hand-written tokenizer.json on purpose: the committed tokenizers are byte-level BPEs, and
    // none has `<0xNN>` byte-fallback tokens, `▁` spaces or holes in its ids.
    const table = vocabBytesTable({
      model: {
        type: 'BPE',
        byte_fallback: true,
        vocab: { '<0xE2>': 0, '<0x82>': 1, '<0xAC>': 2, '▁euro': 3, x: 5 },
      },
      added_tokens: [{ id: 6, content: '</s>', special: true }],
      decoder: {
        type: 'Sequence',
        decoders: [
          { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
          { type: 'ByteFallback' },
          { type: 'Fuse' },
        ],
      },
    });
    expect(table.size).toBe(7);
    expect(table.has(4)).toBe(false);
    expect(tableText(table, [3, 0, 1, 2, 6, 4]).toString()).toBe(' euro€');
    expect(tableText(table, [6], false).toString()).toBe('</s>');
  });

  it('is read by another thread from the same SharedArrayBuffer', async () => {
    const tok = await tokenizerForModel('tiny');
    const table = tok.bytes;
    const [answer] = tok.encode(' answer', { addSpecialTokens: false });
    const worker = new Worker(
      `const { workerData, parentPort } = require('node:worker_threads');
       const { shared: { sab, count }, id } = workerData;
       const offsets = new Int32Array(sab, 0, count + 1);
       const bytes = new Uint8Array(sab, 4 * (count + 1) + count);
       parentPort.postMessage(Buffer.from(bytes.subarray(offsets[id], offsets[id + 1])).toString());`,
      { eval: true, workerData: { shared: table.shared, id: answer } },
    );
    const text = await new Promise<string>((resolve) => worker.once('message', resolve));
    await worker.terminate();
    expect(text).toBe(' answer');
    expect(table.shared.sab).toBeInstanceOf(SharedArrayBuffer);
  });
});
