import { describe, expect, it } from 'vitest';
import {
  type ChatParseOptions,
  type ChatToolSpec,
  type ParsedChatOutput,
  parseChatOutput,
  REASONING_PARSERS,
  TOOL_PARSERS,
} from '../../../src/protocol/chat-parse/chat-output.js';

/**
 * Whole answers as Qwen3 and GLM-4.5 write them, and what vLLM returns for each. The expected
 * values are read off vLLM's sources (commits as in docs/chat-parsing.md):
 * - hermes: vllm/tool_parsers/hermes_tool_parser.py @02bb669 (extract_tool_calls);
 * - glm45 tools: vllm/tool_parsers/glm4_moe_tool_parser.py @081866a (extract_tool_calls,
 *   _deserialize, _is_string_type);
 * - qwen3 reasoning: vllm/reasoning/qwen3_reasoning_parser.py @00a4c6a and vllm/parser/qwen3.py
 *   @03e8268; glm45 reasoning: the DeepSeek-R1 split (Holo2ReasoningParser, docs v0.15.0);
 * - content/finish rules: vllm/parser/abstract_parser.py @00cd9d7 (DelegatingParser) and
 *   vllm/entrypoints/openai/chat_completion/serving.py @006c49d.
 */

function ids(): () => string {
  let n = 0;
  return () => `chatcmpl-tool-${n++}`;
}

const QWEN3: ChatParseOptions = {
  reasoning: 'qwen3',
  thinking: true,
  tools: 'hermes',
  toolChoice: 'auto',
};

const WEATHER: ChatToolSpec = {
  function: {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string' },
        zip: { type: 'string' },
        days: { type: 'integer' },
        metric: { type: 'boolean' },
      },
    },
  },
};
const GLM: ChatParseOptions = {
  reasoning: 'glm45',
  thinking: true,
  tools: 'glm45',
  toolChoice: 'auto',
  requestTools: [WEATHER],
};

function parse(text: string, opts: ChatParseOptions): ParsedChatOutput {
  return parseChatOutput(text, opts, ids());
}

function call(name: string, args: string, id = 0): ParsedChatOutput['toolCalls'][number] {
  return { id: `chatcmpl-tool-${id}`, name, arguments: args };
}

const HERMES_PARIS =
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

describe('names', () => {
  it('lists the parsers', () => {
    expect(REASONING_PARSERS).toEqual(['qwen3', 'glm45']);
    expect(TOOL_PARSERS).toEqual(['hermes', 'glm45']);
  });
});

describe('qwen3 reasoning', () => {
  it('splits at </think>, keeping the newlines the model wrote', () => {
    // partition on <think>, then on </think>; `content or None`.
    expect(parse('<think>\nThe user greets.\n</think>\n\nHello! How can I help?', QWEN3)).toEqual({
      reasoning: '\nThe user greets.\n',
      content: '\n\nHello! How can I help?',
      toolCalls: [],
      toolCallsFinish: false,
    });
  });

  it('reads an output whose <think> the template put in the prompt', () => {
    const out = parse('The user greets.\n</think>\n\nHello!', QWEN3);
    expect(out.reasoning).toBe('The user greets.\n');
    expect(out.content).toBe('\n\nHello!');
  });

  it('takes an output cut off inside the span as all reasoning', () => {
    expect(parse('<think>\nStill thinking', QWEN3)).toMatchObject({
      reasoning: '\nStill thinking',
      content: null,
    });
  });

  it('gives null content for nothing after </think>', () => {
    expect(parse('<think>\nx\n</think>', QWEN3)).toMatchObject({
      reasoning: '\nx\n',
      content: null,
    });
  });

  it('reads all as content with thinking off', () => {
    expect(parse('Hello!', { ...QWEN3, thinking: false })).toEqual({
      reasoning: null,
      content: 'Hello!',
      toolCalls: [],
      toolCallsFinish: false,
    });
  });

  it('ends the span at a <tool_call> (implicit end, vllm/parser/qwen3.py)', () => {
    const out = parse(`Need the weather.\n${HERMES_PARIS}`, QWEN3);
    expect(out.reasoning).toBe('Need the weather.\n');
    expect(out.toolCalls).toEqual([call('get_weather', '{"city": "Paris"}')]);
  });

  it('leaves everything content without a reasoning parser', () => {
    expect(parse('<think>x</think>y', { ...QWEN3, reasoning: null, tools: null })).toMatchObject({
      reasoning: null,
      content: '<think>x</think>y',
    });
  });
});

describe('hermes tool calls', () => {
  it('reads a call after thinking; blank content before it is null', () => {
    expect(parse(`<think>\nNeed weather.\n</think>\n\n${HERMES_PARIS}`, QWEN3)).toEqual({
      reasoning: '\nNeed weather.\n',
      content: null,
      toolCalls: [call('get_weather', '{"city": "Paris"}')],
      toolCallsFinish: true,
    });
  });

  it('reads several calls; content is the text before the first, text after them is dropped', () => {
    const text =
      'Let me check both.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n' +
      '</tool_call>\nand\n<tool_call>\n{"name": "search", "arguments": {"query": "Paris events", "limit": 3}}\n</tool_call>\ntrailing';
    expect(parse(text, { ...QWEN3, thinking: false })).toEqual({
      reasoning: null,
      content: 'Let me check both.\n',
      toolCalls: [
        call('get_weather', '{"city": "Paris"}', 0),
        call('search', '{"query": "Paris events", "limit": 3}', 1),
      ],
      toolCallsFinish: true,
    });
  });

  it('re-serializes the arguments as Python json.dumps(ensure_ascii=False)', () => {
    const text =
      '<tool_call>{"name":"f","arguments":{"x":1.50,"y":1e2,"z":10,"n":-0,"s":"\\u00e9\\n\\/",' +
      '"big":12345678901234567890,"tiny":1e-7,"l":[true,null,{}]}}</tool_call>';
    expect(parse(text, { ...QWEN3, thinking: false }).toolCalls[0]?.arguments).toBe(
      '{"x": 1.5, "y": 100.0, "z": 10, "n": 0, "s": "é\\n/", "big": 12345678901234567890, ' +
        '"tiny": 1e-07, "l": [true, null, {}]}',
    );
  });

  it('keeps the last of duplicate keys at the first one’s place (a Python dict)', () => {
    const text = '<tool_call>{"name": "f", "arguments": {"a": 1, "b": 2, "a": 3}}</tool_call>';
    expect(parse(text, { ...QWEN3, thinking: false }).toolCalls[0]?.arguments).toBe(
      '{"a": 3, "b": 2}',
    );
  });

  it('reads a final call the output ended before closing (the regex’s second branch)', () => {
    const out = parse(
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}',
      QWEN3,
    );
    expect(out.toolCalls).toEqual([call('get_weather', '{"city": "Paris"}')]);
  });

  it('returns the whole output as content when the JSON is cut off', () => {
    const text = '<think>\nok\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"ci';
    expect(parse(text, QWEN3)).toEqual({
      reasoning: '\nok\n',
      content: '\n\n<tool_call>\n{"name": "get_weather", "arguments": {"ci',
      toolCalls: [],
      toolCallsFinish: false,
    });
  });

  it('returns all as content when a later call is bad, good calls included', () => {
    const text = `Checking.\n${HERMES_PARIS}\n<tool_call>\n{"name": "search", "arguments": }\n</tool_call>`;
    expect(parse(text, { ...QWEN3, thinking: false })).toMatchObject({
      content: text,
      toolCalls: [],
      toolCallsFinish: false,
    });
  });

  it('fails a call without "arguments", with a non-string name, or of a non-object', () => {
    for (const body of ['{"name": "f"}', '{"name": 1, "arguments": {}}', '["f", {}]', '']) {
      const text = `<tool_call>${body}</tool_call>`;
      expect(parse(text, { ...QWEN3, thinking: false }).content).toBe(text);
    }
  });

  it('does not check the function name against the tools', () => {
    const text = '<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>';
    expect(parse(text, { ...QWEN3, thinking: false }).toolCalls).toEqual([
      call('launch_rockets', '{}'),
    ]);
  });

  it('re-serializes non-object arguments too', () => {
    const text = '<tool_call>{"name": "f", "arguments": "{\\"a\\":1}"}</tool_call>';
    expect(parse(text, { ...QWEN3, thinking: false }).toolCalls[0]?.arguments).toBe(
      '"{\\"a\\":1}"',
    );
  });

  it('keeps a text without calls as it was, blank or empty included', () => {
    expect(parse('\n\n', { ...QWEN3, thinking: false }).content).toBe('\n\n');
    expect(parse('', { ...QWEN3, reasoning: null }).content).toBe('');
  });
});

describe('glm45', () => {
  const CALL =
    '<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>';

  it('reads a call after thinking', () => {
    expect(parse(`<think>The user wants the weather.</think>\n${CALL}`, GLM)).toEqual({
      reasoning: 'The user wants the weather.',
      content: null,
      toolCalls: [call('get_weather', '{"city": "Paris"}')],
      toolCallsFinish: true,
    });
  });

  it('keeps string-typed values as written and deserializes the others', () => {
    const text =
      '<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value> Paris </arg_value>\n' +
      '<arg_key>zip</arg_key>\n<arg_value>75001</arg_value>\n<arg_key>days</arg_key>\n' +
      '<arg_value> 3 </arg_value>\n<arg_key>metric</arg_key>\n<arg_value>True</arg_value>\n' +
      "<arg_key>extra</arg_key>\n<arg_value>['a', (1, 2.0)]</arg_value>\n</tool_call>";
    expect(parse(text, { ...GLM, thinking: false }).toolCalls[0]?.arguments).toBe(
      '{"city": " Paris ", "zip": "75001", "days": 3, "metric": true, "extra": ["a", [1, 2.0]]}',
    );
  });

  it('deserializes every value when the tools are not known', () => {
    const text =
      '<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value> Paris </arg_value>\n' +
      '<arg_key>zip</arg_key>\n<arg_value>75001</arg_value>\n</tool_call>';
    const out = parse(text, { ...GLM, thinking: false, requestTools: undefined });
    expect(out.toolCalls[0]?.arguments).toBe('{"city": "Paris", "zip": 75001}');
  });

  it('reads several calls and the text before them', () => {
    const text = `I will check.\n${CALL}\n<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>limit</arg_key>\n<arg_value>3</arg_value>\n</tool_call>`;
    expect(parse(text, { ...GLM, thinking: false })).toEqual({
      reasoning: null,
      content: 'I will check.\n',
      toolCalls: [
        call('get_weather', '{"city": "Paris"}', 0),
        call('search', '{"query": "Paris", "limit": 3}', 1),
      ],
      toolCallsFinish: true,
    });
  });

  it('reads a call without arguments', () => {
    const out = parse('<tool_call>get_time\n</tool_call>', { ...GLM, thinking: false });
    expect(out.toolCalls).toEqual([call('get_time', '{}')]);
  });

  it('skips a region without a newline after the name, and an unterminated one', () => {
    const skipped = '<tool_call>get_time</tool_call>';
    expect(parse(skipped, { ...GLM, thinking: false })).toMatchObject({
      content: skipped,
      toolCalls: [],
    });
    const cut = '<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Par';
    expect(parse(cut, { ...GLM, thinking: false })).toMatchObject({ content: cut, toolCalls: [] });
    const both = `Hi ${skipped} ${CALL}`;
    expect(parse(both, { ...GLM, thinking: false })).toMatchObject({
      content: 'Hi ',
      toolCalls: [call('get_weather', '{"city": "Paris"}')],
    });
  });

  it('returns all as content where json.dumps refuses a value (a set)', () => {
    const text = `${CALL}<tool_call>f\n<arg_key>s</arg_key><arg_value>{1, 2}</arg_value></tool_call>`;
    expect(parse(text, { ...GLM, thinking: false })).toMatchObject({
      content: text,
      toolCalls: [],
    });
  });

  it('splits a thinking span it wrote itself, an empty one included', () => {
    expect(parse('<think></think>\nHello', GLM)).toMatchObject({
      reasoning: '',
      content: '\nHello',
    });
  });

  it('reads all as content with thinking off', () => {
    expect(parse(`\n${CALL}`, { ...GLM, thinking: false })).toMatchObject({
      reasoning: null,
      content: null,
      toolCalls: [call('get_weather', '{"city": "Paris"}')],
    });
  });
});

describe('required and named tool choice', () => {
  const REQUIRED: ChatParseOptions = { ...QWEN3, thinking: false, toolChoice: 'required' };
  const NAMED: ChatParseOptions = {
    ...QWEN3,
    thinking: false,
    toolChoice: { name: 'get_weather' },
  };

  it('reads the JSON array of a required choice; content is ""', () => {
    const text =
      '[{"name": "get_weather", "parameters": {"city": "Paris"}}, ' +
      '{"name":"search","parameters":{"query":"x","limit":3}}]';
    expect(parse(text, REQUIRED)).toEqual({
      reasoning: null,
      content: '',
      toolCalls: [
        call('get_weather', '{"city": "Paris"}', 0),
        call('search', '{"query": "x", "limit": 3}', 1),
      ],
      toolCallsFinish: true,
    });
  });

  it('gives "null" arguments where parameters are missing', () => {
    expect(parse('[{"name": "get_time"}]', REQUIRED).toolCalls).toEqual([call('get_time', 'null')]);
  });

  it('gives no calls for output that does not validate, yet finishes with tool_calls', () => {
    for (const text of [
      'not json',
      '{"name": "f"}',
      '[{"name": 1}]',
      '[{"name": "f", "parameters": [1]}]',
    ]) {
      expect(parse(text, REQUIRED)).toEqual({
        reasoning: null,
        content: '',
        toolCalls: [],
        toolCallsFinish: true,
      });
    }
  });

  it('reads the JSON after a thinking span', () => {
    const out = parse(
      '<think>\nok\n</think>\n\n[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
      { ...REQUIRED, thinking: true },
    );
    expect(out.reasoning).toBe('\nok\n');
    expect(out.toolCalls).toEqual([call('get_weather', '{"city": "Paris"}')]);
  });

  it('takes the whole output of a named choice as the arguments, verbatim', () => {
    expect(parse('{"city":"Paris",  "days": 3}', NAMED)).toEqual({
      reasoning: null,
      content: '',
      toolCalls: [call('get_weather', '{"city":"Paris",  "days": 3}')],
      toolCallsFinish: false,
    });
  });

  it('makes no named call of blank output', () => {
    expect(parse(' \n', NAMED)).toMatchObject({ content: '', toolCalls: [] });
  });

  it('reads glm45 markup for forced choices (its parser skips guided decoding)', () => {
    const text =
      '\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>';
    const opts: ChatParseOptions = { ...GLM, thinking: false, toolChoice: 'required' };
    expect(parse(text, opts)).toEqual({
      reasoning: null,
      content: '',
      toolCalls: [call('get_weather', '{"city": "Paris"}')],
      toolCallsFinish: true,
    });
    expect(parse('\n', { ...opts, toolChoice: { name: 'get_weather' } })).toEqual({
      reasoning: null,
      content: '',
      toolCalls: [],
      toolCallsFinish: false,
    });
    expect(parse('No.', opts)).toMatchObject({ content: 'No.', toolCalls: [] });
  });
});
