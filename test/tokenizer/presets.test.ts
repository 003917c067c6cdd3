/**
 * Each model preset's card agrees with its tokenizer (text ids, special ids, EOS ids), and the
 * simulated model samples only ids the tokenizer decodes as text, ending with EOS; glm-4.5-air's
 * stand-in tokenizer has GLM's special ids and renders GLM-4.5's chat format.
 */
import { describe, expect, it } from 'vitest';
import { PositionShape, SimModel } from '../../src/sim/model.js';
import { getPreset } from '../../src/sim/presets.js';
import { TOKENIZER_PRESETS, tokenizerForModel } from '../../src/tokenizer/presets.js';
import { combine } from '../../src/wire/hash.js';
import { getModelCard, MODEL_NAMES } from '../../src/wire/model-card.js';
import { modelDirs, TINY_GLM_SHAPE } from '../wire/hf-fixtures.js';

describe('model presets and their tokenizers', () => {
  it('every preset has one', () => {
    expect([...TOKENIZER_PRESETS].sort()).toEqual([...MODEL_NAMES].sort());
  });

  for (const name of MODEL_NAMES) {
    it(`${name}: the card's text ids, special ids and EOS ids are the tokenizer's`, async () => {
      const card = getModelCard(name);
      const tok = await tokenizerForModel(name);
      const text = card.textVocabSize!;
      expect(tok.vocabSize).toBeLessThanOrEqual(card.vocabSize);
      for (let id = 0; id < text; id++) {
        if (!tok.bytes.has(id) || tok.isSpecial(id) || tok.bytes.isAdded(id)) {
          throw new Error(`${name}: id ${id} below textVocabSize is not a text token`);
        }
      }
      expect(tok.bytes.isAdded(text)).toBe(true);
      expect(tok.textVocabSize).toBe(text);
      expect(new Set(tok.eosTokenIds)).toEqual(new Set(card.eosTokenIds));
      for (const id of card.eosTokenIds) expect(tok.isSpecial(id)).toBe(true);
    });

    it(`${name}: the simulated model samples only text ids, and EOS`, () => {
      const preset = getPreset(name);
      const model = new SimModel(preset, 7, 0);
      const shape = new PositionShape();
      for (let position = 0; position < 2000; position++) {
        model.shapeAt(combine(11, position), position, shape);
        for (const rank of [0, 1, 2, 50, model.streamSize - 1]) {
          expect(model.tokenAtRank(rank, shape)).toBeLessThan(preset.textVocabSize!);
        }
      }
      expect(model.streamSize).toBe(preset.textVocabSize);
      expect(model.primaryEos).toBe(preset.eosTokenIds[0]);
    });
  }

  it('qwen3 ends a turn with <|im_end|>, glm with <|user|>, tiny with <|im_end|>', async () => {
    expect(
      (await tokenizerForModel('qwen3-30b-a3b')).tokenText(
        getModelCard('qwen3-30b-a3b').eosTokenIds[0]!,
      ),
    ).toBe('<|im_end|>');
    expect(
      (await tokenizerForModel('glm-4.5-air')).tokenText(
        getModelCard('glm-4.5-air').eosTokenIds[0]!,
      ),
    ).toBe('<|user|>');
    expect((await tokenizerForModel('tiny')).tokenText(getModelCard('tiny').eosTokenIds[0]!)).toBe(
      '<|im_end|>',
    );
  });
});

describe('the glm-4.5-air stand-in', () => {
  it("has GLM's special ids and renders GLM-4.5's chat format", async () => {
    const tok = await tokenizerForModel('glm-4.5-air');
    expect(tok.tokenToId('[gMASK]')).toBe(151331);
    expect(tok.tokenToId('<|assistant|>')).toBe(151337);
    expect(tok.tokenToId('<think>')).toBe(151350);
    expect(tok.isSpecial(151350)).toBe(false);
    const prompt = tok.applyChatTemplate([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: '<think>greet</think>Hello!' },
      { role: 'user', content: 'Bye' },
    ]);
    expect(prompt).toBe(
      '[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|>\n<think>greet</think>\nHello!<|user|>\nBye<|assistant|>',
    );
    const tools = [{ type: 'function', function: { name: 'f', parameters: {} } }];
    const call = tok.applyChatTemplate(
      [
        { role: 'user', content: 'Go' },
        {
          role: 'assistant',
          content: '',
          tool_calls: [{ function: { name: 'f', arguments: { x: 1, y: 'a' } } }],
        },
        { role: 'tool', content: '42' },
      ],
      { tools, chatTemplateKwargs: { enable_thinking: false } },
    );
    expect(call).toBe(
      '[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
        'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
        '{"type": "function", "function": {"name": "f", "parameters": {}}}\n</tools>\n\n' +
        'For each function call, output the function name and arguments within the following XML format:\n' +
        '<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n...\n</tool_call>' +
        '<|user|>\nGo<|assistant|>\n<think></think>\n<tool_call>f\n<arg_key>x</arg_key>\n<arg_value>1</arg_value>' +
        '\n<arg_key>y</arg_key>\n<arg_value>a</arg_value>\n</tool_call><|observation|>\n<tool_response>\n42\n</tool_response>' +
        '<|assistant|>\n<think></think>',
    );
    const ids = tok.encode(prompt, { addSpecialTokens: false });
    expect([...ids.slice(0, 3)]).toEqual([151331, 151333, 151335]);
    expect(ids[ids.length - 1]).toBe(151337);
    expect(tok.decode(tok.encode('Hello, 世界 🤗'))).toBe('Hello, 世界 🤗');
  });
});

describe("a model directory's own tokenizer", () => {
  const dirs = modelDirs();

  it('is loaded from the directory, once, and agrees with its card', async () => {
    const dir = dirs.tiny('tiny-moe', TINY_GLM_SHAPE);
    const tok = await tokenizerForModel(dir);
    expect(await tokenizerForModel(dir)).toBe(tok);
    expect(tok.name).toBe(dir);
    const card = getModelCard(dir);
    expect(tok.textVocabSize).toBe(card.textVocabSize);
    expect(tok.eosTokenIds).toEqual(card.eosTokenIds);
    expect(tok.tokenText(card.eosTokenIds[0]!)).toBe('<|im_end|>');
  });

  it('is a --tokenizer error for a directory without tokenizer.json', async () => {
    const dir = dirs.write('config-only', { 'config.json': TINY_GLM_SHAPE });
    await expect(tokenizerForModel(dir)).rejects.toMatchObject({
      code: 'RS_ERR_CONFIG_INVALID',
      param: '--tokenizer',
    });
  });
});
