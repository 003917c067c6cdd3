import { beforeAll, describe, expect, it } from 'vitest';
import { tokenizerForModel } from '../../src/tokenizer/presets.js';
import type { Tokenizer } from '../../src/tokenizer/tokenizer.js';

// Ids published by other implementations of the Qwen2/Qwen3 tokenizer (same vocabulary): a C++
// BPE's tests checked against llama.cpp, a vLLM/SGLang tokenizer probe, a /tokenize answer of
// vLLM serving Qwen2.5, a Qwen3-ASR C++ port's tests. Not produced by this code.
const PUBLISHED: readonly [string, number[]][] = [
  ['Hello world', [9707, 1879]],
  ['Hello\nworld', [9707, 198, 14615]],
  ['Hello, world! 123', [9707, 11, 1879, 0, 220, 16, 17, 18]],
  ['What is the capital of France?', [3838, 374, 279, 6722, 315, 9625, 30]],
  ['The capital of France is', [785, 6722, 315, 9625, 374]],
  ['1+1=', [16, 10, 16, 28]],
  ['def foo(): return 42', [750, 15229, 4555, 470, 220, 19, 17]],
  ['你好世界', [108386, 99489]],
  ['这是上下文。', [100346, 102285, 16744, 1773]],
  ['🚀', [145836]],
  ['Qwen3-ASR: test 123!', [48, 16948, 18, 12, 1911, 49, 25, 1273, 220, 16, 17, 18, 0]],
  ['<|im_start|>user\nHi<|im_end|>', [151644, 872, 198, 13048, 151645]],
];

const MULTILINGUAL = [
  'The quick brown fox jumps over the lazy dog.',
  'Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.',
  'Съешь же ещё этих мягких французских булок, да выпей чаю.',
  'いろはにほへと ちりぬるを わかよたれそ つねならむ',
  '다람쥐 헌 쳇바퀴에 타고파',
  'نص حكيم له سر قاطع وذو شأن عظيم',
  'Emoji: 👩‍👩‍👧‍👦 🏳️‍🌈 🇯🇵 🤗🎉 e\u0301',
  '  leading spaces,\ttabs\r\nand CRLF\n\n\nlines   ',
  'code: for (let i = 0; i < n; i++) { sum += a[i] ** 2; }',
];

let tok: Tokenizer;
beforeAll(async () => {
  tok = await tokenizerForModel('qwen3-30b-a3b');
});

describe('the qwen3-30b-a3b tokenizer', () => {
  it('encodes known strings to the ids other implementations publish', () => {
    for (const [text, ids] of PUBLISHED) expect([...tok.encode(text)], text).toEqual(ids);
  });

  it('round-trips multilingual text and emoji', () => {
    for (const text of MULTILINGUAL) {
      const ids = tok.encode(text);
      expect(tok.decode(ids), text).toBe(text.normalize('NFC'));
    }
  });

  it('knows its vocabulary, special tokens and EOS ids', () => {
    expect(tok.vocabSize).toBe(151669);
    expect(tok.eosTokenIds).toEqual([151645, 151643]);
    expect(tok.tokenToId('<|im_end|>')).toBe(151645);
    expect(tok.isSpecial(151645)).toBe(true);
    expect(tok.isSpecial(9707)).toBe(false);
    expect(tok.idToToken(1879)).toBe('Ġworld');
    expect(tok.tokenText(1879)).toBe(' world');
    expect(tok.decode([151644, 872, 151645], { skipSpecialTokens: false })).toBe(
      '<|im_start|>user<|im_end|>',
    );
    expect(tok.decode([151644, 872, 151645])).toBe('user');
  });

  it('renders its chat template as Qwen3 documents it', () => {
    const messages = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Hi' },
    ];
    expect(tok.applyChatTemplate(messages)).toBe(
      '<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(
      tok.applyChatTemplate([{ role: 'user', content: 'Hi' }], {
        chatTemplateKwargs: { enable_thinking: false },
      }),
    ).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
    expect(
      tok.applyChatTemplate(
        [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'a' },
              { type: 'text', text: 'b' },
            ],
          },
        ],
        {
          addGenerationPrompt: false,
        },
      ),
    ).toBe('<|im_start|>user\na\nb<|im_end|>\n');
  });

  it('renders tools into the system turn', () => {
    const tools = [
      { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } },
    ];
    const text = tok.applyChatTemplate([{ role: 'user', content: 'Weather?' }], { tools });
    expect(text).toBe(
      '<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
        'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
        '{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}\n</tools>\n\n' +
        'For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n' +
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n',
    );
  });
});
