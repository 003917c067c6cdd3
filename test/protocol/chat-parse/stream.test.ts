import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type ChatDeltaPart,
  type ChatParseOptions,
  ChatStreamParser,
  type ParsedChatOutput,
  parseChatOutput,
  type ToolChoice,
} from '../../../src/protocol/chat-parse/chat-output.js';

/**
 * ChatStreamParser against parseChatOutput: hand-picked splits (mid-marker, one character at a
 * time) and a property test that cuts generated Qwen3 / GLM-4.5 answers at random places.
 */

interface Joined {
  reasoning: string;
  content: string;
  calls: { id: string; name: string; arguments: string }[];
}

function ids(): () => string {
  let n = 0;
  return () => `chatcmpl-tool-${n++}`;
}

/** Feed `deltas` (the last one final) and join the parts of each kind. */
function stream(deltas: readonly string[], opts: ChatParseOptions): Joined & { finish: boolean } {
  const parser = new ChatStreamParser(opts, ids());
  const parts: ChatDeltaPart[] = [];
  deltas.forEach((d, i) => {
    parts.push(...parser.push(d, i === deltas.length - 1));
  });
  return { ...join(parts), finish: parser.toolCallsFinish };
}

function join(parts: readonly ChatDeltaPart[]): Joined {
  const out: Joined = { reasoning: '', content: '', calls: [] };
  for (const p of parts) {
    if (p.kind === 'reasoning') out.reasoning += p.text;
    else if (p.kind === 'content') out.content += p.text;
    else if (p.id !== undefined) {
      expect(p.index).toBe(out.calls.length);
      out.calls.push({ id: p.id, name: p.name ?? '', arguments: p.arguments ?? '' });
    } else {
      const call = out.calls[p.index];
      expect(call, 'an arguments part after its call’s first part').toBeDefined();
      call!.arguments += p.arguments ?? '';
    }
  }
  return out;
}

function whole(text: string, opts: ChatParseOptions): Joined {
  const r: ParsedChatOutput = parseChatOutput(text, opts, ids());
  return { reasoning: r.reasoning ?? '', content: r.content ?? '', calls: r.toolCalls };
}

/** Every character its own delta, then a final empty delta. */
function chars(text: string): string[] {
  return [...Array.from(text), ''];
}

const QWEN3: ChatParseOptions = {
  reasoning: 'qwen3',
  thinking: true,
  tools: 'hermes',
  toolChoice: 'auto',
};
const GLM: ChatParseOptions = {
  reasoning: 'glm45',
  thinking: true,
  tools: 'glm45',
  toolChoice: 'auto',
};
const HERMES_PARIS =
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

describe('ChatStreamParser', () => {
  it('holds back a marker split across deltas and releases text that is not one', () => {
    const parser = new ChatStreamParser(QWEN3, ids());
    expect(parser.push('<think>\nHm, <thi', false)).toEqual([
      { kind: 'reasoning', text: '\nHm, ' },
    ]);
    expect(parser.push('s is it.</thi', false)).toEqual([
      { kind: 'reasoning', text: '<this is it.' },
    ]);
    expect(parser.push('nk>\n\nSee <tool_', false)).toEqual([
      { kind: 'content', text: '\n\nSee ' },
    ]);
    expect(parser.push('box>.', false)).toEqual([{ kind: 'content', text: '<tool_box>.' }]);
    expect(parser.push('', true)).toEqual([]);
    expect(parser.toolCallsFinish).toBe(false);
  });

  it('sends a hermes call’s name once its arguments begin, then its arguments as they come', () => {
    const parser = new ChatStreamParser({ ...QWEN3, thinking: false }, ids());
    expect(parser.push('\n\n<tool_', false)).toEqual([]);
    expect(parser.push('call>\n{"name": "get_weather", "arguments"', false)).toEqual([]);
    expect(parser.push(': {"city": ', false)).toEqual([
      { kind: 'tool_call', index: 0, id: 'chatcmpl-tool-0', name: 'get_weather', arguments: '' },
      { kind: 'tool_call', index: 0, arguments: '{"city": ' },
    ]);
    expect(parser.push('"Par', false)).toEqual([
      { kind: 'tool_call', index: 0, arguments: '"Par' },
    ]);
    // A number waits for the character that ends it.
    expect(parser.push('is","days":3', false)).toEqual([
      { kind: 'tool_call', index: 0, arguments: 'is", "days": ' },
    ]);
    expect(parser.push('}}\n</tool_call>', false)).toEqual([
      { kind: 'tool_call', index: 0, arguments: '3}' },
    ]);
    // The blank content before the call was never sent: vLLM returns null content here.
    expect(parser.push('', true)).toEqual([]);
    expect(parser.toolCallsFinish).toBe(true);
  });

  it('turns a first call that does not parse into content, as the whole answer', () => {
    // Bad before the arguments began: nothing of the call went out.
    const text = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": }\n</tool_call>\nx';
    expect(stream(chars(text), { ...QWEN3, thinking: false })).toEqual({
      reasoning: '',
      content: text,
      calls: [],
      finish: false,
    });
  });

  it('keeps what went out of a call that turns out malformed, and then answers as the whole answer', () => {
    // The name and the first fragment went out before the region went wrong: they stay, and the
    // first region failing turns the whole output into content, as parseChatOutput does.
    const text =
      'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>\nx';
    expect(stream(chars(text), { ...QWEN3, thinking: false })).toEqual({
      reasoning: '',
      content: text,
      calls: [{ id: 'chatcmpl-tool-0', name: 'get_weather', arguments: '{"city": ' }],
      finish: true,
    });
    // A later call that goes wrong is dropped: the whole answer would be all content, the stream
    // has sent the first call, and what went out of the second stays out.
    const later = `${HERMES_PARIS}\n<tool_call>\n{"name": "f", "arguments": {"a": 1}, }\n</tool_call>`;
    expect(stream(chars(later), { ...QWEN3, thinking: false })).toEqual({
      reasoning: '',
      content: '',
      calls: [
        { id: 'chatcmpl-tool-0', name: 'get_weather', arguments: '{"city": "Paris"}' },
        { id: 'chatcmpl-tool-1', name: 'f', arguments: '{"a": 1}' },
      ],
      finish: true,
    });
    // An output cut off inside the arguments (max_tokens): the same as a bad first region.
    const cut = '<tool_call>\n{"name": "f", "arguments": {"q": "long';
    expect(stream(chars(cut), { ...QWEN3, thinking: false })).toEqual({
      reasoning: '',
      content: cut,
      calls: [{ id: 'chatcmpl-tool-0', name: 'f', arguments: '{"q": "long' }],
      finish: true,
    });
  });

  it('streams a named choice’s arguments as they come', () => {
    const parser = new ChatStreamParser(
      { ...QWEN3, thinking: false, toolChoice: { name: 'get_weather' } },
      ids(),
    );
    expect(parser.push('\n', false)).toEqual([]);
    expect(parser.push('{"city"', false)).toEqual([
      { kind: 'tool_call', index: 0, id: 'chatcmpl-tool-0', name: 'get_weather', arguments: '' },
      { kind: 'tool_call', index: 0, arguments: '\n{"city"' },
    ]);
    expect(parser.push(': "Paris"}', true)).toEqual([
      { kind: 'tool_call', index: 0, arguments: ': "Paris"}' },
    ]);
    // serving.py: a named function finishes with "stop".
    expect(parser.toolCallsFinish).toBe(false);
  });

  it('reads a required choice’s array at the end', () => {
    const text = '<think>\nok\n</think>\n\n[{"name": "search", "parameters": {"query": "x"}}]';
    expect(stream(chars(text), { ...QWEN3, toolChoice: 'required' })).toEqual({
      reasoning: '\nok\n',
      content: '',
      calls: [{ id: 'chatcmpl-tool-0', name: 'search', arguments: '{"query": "x"}' }],
      finish: true,
    });
  });

  it('gives the whole-output answer for hand-picked texts, one character at a time', () => {
    const cases: [string, ChatParseOptions][] = [
      [`<think>\nweather\n</think>\n\n${HERMES_PARIS}\n${HERMES_PARIS}`, QWEN3],
      [`Thinking without end ${HERMES_PARIS}`, QWEN3],
      ['<think>\nStill thinking', QWEN3],
      ['<tool_call>\n{"name": "f", "arguments": {"a": [1.0, 2]}}', { ...QWEN3, thinking: false }],
      [
        '<think>Weather.</think>\nOK <tool_call>t</tool_call> <tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>',
        GLM,
      ],
      [
        '<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Par',
        { ...GLM, thinking: false },
      ],
      ['<tool_call>t</tool_call>', { ...GLM, thinking: false, toolChoice: 'required' }],
      [' \n ', { ...GLM, thinking: false, toolChoice: { name: 'f' } }],
      ['  ', { ...QWEN3, thinking: false }],
    ];
    for (const [text, opts] of cases) {
      const { finish: _, ...streamed } = stream(chars(text), opts);
      expect(streamed, text).toEqual(whole(text, opts));
    }
  });
});

// ---- Property: any split of a generated answer streams to the whole-output answer. ----

const MARKERS = [
  '<think>',
  '</think>',
  '<tool_call>',
  '</tool_call>',
  '<arg_key>',
  '</arg_key>',
  '<arg_value>',
  '</arg_value>',
];
const noMarker = (s: string): boolean => MARKERS.every((m) => !s.includes(m));

/** Free text with near-misses of every marker, but none whole. */
const text = fc
  .array(
    fc.constantFrom(
      'a',
      'Paris',
      ' ',
      '\n',
      '\n\n',
      'é',
      '😀',
      '<',
      '>',
      '/',
      '<thi',
      '</think',
      '<tool_',
      'call>',
      '</tool_c',
      '<arg_',
      '{',
      '"',
    ),
    { maxLength: 8 },
  )
  .map((xs) => xs.join(''))
  .filter(noMarker);

const value = fc.oneof(
  fc.integer({ min: -1000, max: 1000 }),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.string({ maxLength: 6 }),
  fc.boolean(),
  fc.constant(null),
);
const args = fc.dictionary(fc.constantFrom('city', 'days', 'q', 'é'), value, { maxKeys: 3 });
const name = fc.constantFrom('get_weather', 'search', 'f');

const hermesCall = fc
  .tuple(name, args, fc.constantFrom(0, 2), fc.boolean())
  .map(([n, a, indent, close]) => {
    const body = JSON.stringify({ name: n, arguments: a }, null, indent);
    return { region: `<tool_call>\n${body}\n${close ? '</tool_call>' : ''}`, closed: close };
  })
  .filter((c) => noMarker(c.region.slice(11, c.closed ? -12 : undefined)));

const glmCall = fc
  .tuple(
    name,
    fc.array(
      fc.tuple(
        fc.constantFrom('city', 'days', 'x'),
        fc.oneof(text, fc.constantFrom('3', 'True', "['a']", ' 1.50 ')),
      ),
      { maxLength: 3 },
    ),
    fc.boolean(),
  )
  .map(([n, pairs, newline]) => {
    const body = pairs
      .map(([k, v]) => `<arg_key>${k}</arg_key>\n<arg_value>${v}</arg_value>\n`)
      .join('');
    return `<tool_call>${n}${newline ? '\n' : ''}${body}</tool_call>`;
  });

interface Case {
  text: string;
  opts: ChatParseOptions;
}

const thinkingSpan = fc
  .tuple(fc.boolean(), text, fc.boolean())
  .map(([open, body, close]) => `${open ? '<think>' : ''}${body}${close ? '</think>' : ''}`);

/** Hermes answers: text, calls (the last perhaps unterminated), or a bad first call. */
const hermesAnswer: fc.Arbitrary<Case> = fc
  .tuple(
    fc.constantFrom<'qwen3' | null>('qwen3', null),
    fc.boolean(),
    thinkingSpan,
    text,
    fc.array(fc.tuple(hermesCall, text), { maxLength: 3 }),
    fc.boolean(),
  )
  .map(([reasoning, thinking, span, before, calls, badFirst]) => {
    let body = before;
    calls.forEach(([c, after], i) => {
      // Only the last region may be left open; text after an open region would be its JSON.
      if (!c.closed && i < calls.length - 1) return;
      body += c.closed ? c.region + after : c.region;
    });
    if (badFirst)
      body = `${before}<tool_call>{"name": "f", "arguments": }</tool_call>${body.slice(before.length)}`;
    const prefix = reasoning !== null && thinking ? span : '';
    return {
      text: prefix + body,
      opts: { reasoning, thinking, tools: 'hermes', toolChoice: 'auto' },
    };
  });

const glmAnswer: fc.Arbitrary<Case> = fc
  .tuple(
    fc.constantFrom<'glm45' | null>('glm45', null),
    fc.boolean(),
    thinkingSpan,
    text,
    fc.array(fc.tuple(glmCall, text), { maxLength: 3 }),
    fc.boolean(),
    fc.constantFrom<ToolChoice>('auto', 'required', { name: 'f' }),
  )
  .map(([reasoning, thinking, span, before, calls, cut, toolChoice]) => {
    let body = before + calls.map(([c, after]) => c + after).join('');
    // An output cut off inside a region.
    if (cut) body += '<tool_call>f\n<arg_key>x</arg_key><arg_value>1';
    const prefix = reasoning !== null && thinking ? span : '';
    return {
      text: prefix + body,
      opts: {
        reasoning,
        thinking,
        tools: 'glm45',
        toolChoice,
        requestTools: [
          {
            function: {
              name: 'get_weather',
              parameters: { properties: { city: { type: 'string' } } },
            },
          },
        ],
      },
    };
  });

/** Forced hermes choices: the guided JSON, or blank or broken output. */
const forcedAnswer: fc.Arbitrary<Case> = fc
  .tuple(
    fc.constantFrom<ToolChoice>('required', { name: 'get_weather' }),
    fc.array(fc.tuple(name, args), { maxLength: 3 }),
    fc.constantFrom('', ' ', '\n\n', 'x', ']'),
    fc.boolean(),
    thinkingSpan,
  )
  .map(([toolChoice, calls, noise, thinking, span]) => {
    const json =
      toolChoice === 'required'
        ? JSON.stringify(calls.map(([n, a]) => ({ name: n, parameters: a })))
        : JSON.stringify(calls[0]?.[1] ?? {});
    return {
      text: (thinking ? span : '') + noise + json,
      opts: { reasoning: 'qwen3', thinking, tools: 'hermes', toolChoice },
    };
  });

/** `text` cut at `cuts` (code point offsets), the last delta final. */
function split(s: string, cuts: readonly number[]): string[] {
  const cps = Array.from(s);
  const points = [...new Set(cuts.map((c) => c % (cps.length + 1)))].sort((a, b) => a - b);
  const deltas: string[] = [];
  let from = 0;
  for (const p of points) {
    deltas.push(cps.slice(from, p).join(''));
    from = p;
  }
  deltas.push(cps.slice(from).join(''));
  return deltas;
}

describe('any split gives the whole-output answer', () => {
  it.each([
    ['hermes', hermesAnswer],
    ['glm45', glmAnswer],
    ['required and named', forcedAnswer],
  ] as const)('%s', (_, answers) => {
    fc.assert(
      fc.property(answers, fc.array(fc.nat(400), { maxLength: 30 }), (c, cuts) => {
        const { finish: _f, ...streamed } = stream(split(c.text, cuts), c.opts);
        expect(streamed).toEqual(whole(c.text, c.opts));
      }),
      { numRuns: 400 },
    );
  });
});
