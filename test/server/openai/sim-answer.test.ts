/**
 * composeSimAnswer writes what each model writes: Qwen3's and GLM-4.5's reasoning spans and tool
 * calls laid out exactly as their chat templates render the same assistant turn (checked by
 * rendering it with the presets' own templates), hermes JSON with Python's separators, GLM's
 * arg_key/arg_value pairs read back as vLLM's glm4_moe_tool_parser reads them, the JSON forms of
 * tool_choice "required" and a named function, arguments that validate against the function's
 * schema (ajv), the asked share of "auto" calls, echo mode, and the same answer for the same seed.
 */
import { Ajv, type ValidateFunction } from 'ajv';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  composeSimAnswer,
  type SimAnswer,
  type SimAnswerInput,
} from '../../../src/server/main/openai/sim-answer.js';
import { tokenizerForModel } from '../../../src/tokenizer/presets.js';
import type { Tokenizer } from '../../../src/tokenizer/tokenizer.js';

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city over the next days',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', minLength: 1 },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        days: { type: 'integer', minimum: 1, maximum: 7 },
      },
      required: ['city'],
      additionalProperties: false,
    },
  },
};
const SEARCH = {
  type: 'function',
  function: {
    name: 'search',
    description: 'Search the web',
    parameters: {
      type: 'object',
      properties: {
        query: { type: 'string', maxLength: 30 },
        limit: { type: 'integer', minimum: 1, maximum: 20 },
        sites: { type: 'array', items: { type: 'string', format: 'hostname' }, maxItems: 3 },
        filters: {
          type: 'object',
          properties: {
            after: { type: 'string', format: 'date' },
            kind: { enum: ['news', 'blogs'] },
            score: { type: 'number', minimum: 0, maximum: 1 },
          },
          required: ['after'],
        },
        safe: { type: 'boolean' },
      },
      required: ['query', 'limit', 'filters'],
    },
  },
};
const NO_PARAMETERS = { type: 'function', function: { name: 'get_time' } };
const TOOLS = [WEATHER, SEARCH, NO_PARAMETERS];

const ajv = new Ajv({ strict: false, validateFormats: false });
const validators = new Map<string, ValidateFunction>(
  TOOLS.map((t) => [
    t.function.name,
    ajv.compile(('parameters' in t.function ? t.function.parameters : {}) as object),
  ]),
);

function checkArguments(name: string, args: unknown): void {
  const validate = validators.get(name);
  expect(validate, `a call of an offered function, got ${name}`).toBeDefined();
  expect(validate!(args), `${JSON.stringify(args)}: ${JSON.stringify(validate!.errors)}`).toBe(
    true,
  );
}

type Reasoning = 'qwen3' | 'glm45';

const FORMATS: Record<Reasoning, SimAnswerInput['format']> = {
  qwen3: { reasoning: 'qwen3', tools: 'hermes' },
  glm45: { reasoning: 'glm45', tools: 'glm45' },
};

function input(over: Partial<SimAnswerInput> = {}): SimAnswerInput {
  return {
    format: FORMATS.qwen3,
    thinking: true,
    tools: TOOLS,
    toolChoice: 'auto',
    seed: 7,
    mode: 'random',
    echoText: null,
    toolCallShare: 1,
    ...over,
  };
}

function compose(over: Partial<SimAnswerInput> = {}): SimAnswer | null {
  return composeSimAnswer(input(over));
}

/** JSON as Python's json.dumps writes it by default. */
function pyDumps(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(pyDumps).join(', ')}]`;
  if (typeof v === 'object' && v !== null) {
    const items = Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pyDumps(x)}`);
    return `{${items.join(', ')}}`;
  }
  return JSON.stringify(v);
}

/**
 * The reasoning and what follows it. Qwen3's span is `<think>\n...\n</think>\n\n` (none with
 * thinking off: the prompt holds it); GLM's `\n<think>...</think>`, and its content always starts
 * with "\n" (after the model's `</think>`, or the prompt's with thinking off).
 */
function split(
  format: Reasoning,
  thinking: boolean,
  text: string,
): { reasoning: string | null; rest: string } {
  const re =
    format === 'qwen3'
      ? thinking
        ? /^<think>\n([^<]+)\n<\/think>\n\n/
        : /^/
      : thinking
        ? /^\n<think>([^<]+)<\/think>\n/
        : /^\n/;
  const m = re.exec(text);
  expect(m, JSON.stringify(text)).not.toBeNull();
  return { reasoning: m![1] ?? null, rest: text.slice(m![0].length) };
}

interface Call {
  name: string;
  arguments: Record<string, unknown>;
}

/** Hermes calls, checked for the exact layout and Python's separators. */
function parseHermes(rest: string): Call[] {
  expect(rest).toMatch(/^<tool_call>\n.+\n<\/tool_call>(\n<tool_call>\n.+\n<\/tool_call>)*$/);
  return [...rest.matchAll(/<tool_call>\n(.+)\n<\/tool_call>/g)].map((m) => {
    const call = JSON.parse(m[1]!) as Call;
    expect(Object.keys(call)).toEqual(['name', 'arguments']);
    expect(m[1]).toBe(pyDumps(call));
    return call;
  });
}

function parameterType(name: string, key: string): unknown {
  const tool = TOOLS.find((t) => t.function.name === name);
  const params = (tool && 'parameters' in tool.function ? tool.function.parameters : undefined) as
    | { properties?: Record<string, { type?: unknown }> }
    | undefined;
  return params?.properties?.[key]?.type;
}

/**
 * GLM-4.5's calls as vLLM's glm4_moe_tool_parser reads them: name up to the first newline, each
 * value stripped, and read as JSON unless the property's type is "string". The layout is checked
 * too: values written raw for strings and as Python's JSON otherwise, nothing around them.
 */
function parseGlm(rest: string): Call[] {
  const call =
    '<tool_call>[^\\n<]+(\\n<arg_key>[^<]+</arg_key>\\n<arg_value>[^<]*</arg_value>)*\\n</tool_call>';
  expect(rest).toMatch(new RegExp(`^${call}(\\n${call})*$`));
  return [...rest.matchAll(/<tool_call>[\s\S]*?<\/tool_call>/g)].map((m) => {
    const detail = /<tool_call>([\s\S]*?)\n([\s\S]*)<\/tool_call>/.exec(m[0])!;
    const name = detail[1]!;
    const args: Record<string, unknown> = {};
    const pairs = detail[2]!.matchAll(
      /<arg_key>([\s\S]*?)<\/arg_key>\s*<arg_value>([\s\S]*?)<\/arg_value>/g,
    );
    for (const [, key, value] of pairs) {
      const raw = value!.trim();
      expect(raw).toBe(value);
      if (parameterType(name, key!) === 'string') {
        args[key!.trim()] = raw;
        continue;
      }
      let parsed: unknown = raw;
      try {
        parsed = JSON.parse(raw);
      } catch {
        // vLLM keeps the text as it is.
      }
      expect(typeof parsed === 'string' ? parsed : pyDumps(parsed)).toBe(raw);
      args[key!.trim()] = parsed;
    }
    return { name, arguments: args };
  });
}

const seeds = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });

describe('composeSimAnswer', () => {
  it('echo mode answers with the last user message and ends, whatever else is asked', () => {
    expect(compose({ mode: 'echo', echoText: 'Say this back.' })).toEqual({
      text: 'Say this back.',
      ends: true,
    });
    expect(compose({ mode: 'echo', echoText: null, toolChoice: 'required' })).toEqual({
      text: '',
      ends: true,
    });
  });

  it('gives the same answer for the same seed, and another for other seeds', () => {
    fc.assert(
      fc.property(
        seeds,
        fc.constantFrom<Reasoning>('qwen3', 'glm45'),
        fc.boolean(),
        fc.constantFrom<SimAnswerInput['toolChoice']>('auto', 'required', 'none', {
          name: 'search',
        }),
        (seed, format, thinking, toolChoice) => {
          const over = { seed, format: FORMATS[format], thinking, toolChoice, toolCallShare: 0.5 };
          expect(compose(over)).toEqual(compose(over));
        },
      ),
      { numRuns: 300 },
    );
    const texts = new Set<string>();
    for (let seed = 0; seed < 50; seed++) texts.add(compose({ seed })!.text);
    expect(texts.size).toBeGreaterThan(45);
    // Seeds past 2^32 that differ only in their high bits answer differently.
    const high = new Set<string>();
    for (let k = 1; k <= 20; k++) high.add(compose({ seed: 5 + k * 2 ** 33 })!.text);
    expect(high.size).toBeGreaterThan(15);
  });

  describe('thinking spans', () => {
    it("are in each model's format, and random content follows them", () => {
      for (let seed = 0; seed < 100; seed++) {
        const q = compose({ seed, toolChoice: 'none' })!;
        expect(q.ends).toBe(false);
        expect(q.text).toMatch(/^<think>\n[A-Z][a-zA-Z ,.]+\.\n<\/think>\n\n$/);
        const g = compose({ seed, toolChoice: 'none', format: FORMATS.glm45 })!;
        expect(g.ends).toBe(false);
        expect(g.text).toMatch(/^\n<think>[A-Z][a-zA-Z ,.]+\.<\/think>\n$/);
      }
    });

    it('are left out with thinking off or without a reasoning format', () => {
      for (const format of [FORMATS.qwen3, FORMATS.glm45]) {
        expect(compose({ thinking: false, toolChoice: 'none', format })).toBeNull();
        expect(compose({ thinking: false, tools: null, format })).toBeNull();
      }
      expect(compose({ format: { reasoning: null, tools: null }, thinking: false })).toBeNull();
      // A caller that says thinking without a format gets no span either.
      expect(
        compose({ format: { reasoning: null, tools: 'hermes' }, toolChoice: 'none' }),
      ).toBeNull();
    });
  });

  describe('tool calls', () => {
    it('hermes (Qwen3): <tool_call> JSON blocks of offered functions with valid arguments', () => {
      const counts = new Set<number>();
      for (const thinking of [true, false]) {
        for (let seed = 0; seed < 200; seed++) {
          const a = compose({ seed, thinking })!;
          expect(a.ends).toBe(true);
          const calls = parseHermes(split('qwen3', thinking, a.text).rest);
          counts.add(calls.length);
          for (const c of calls) checkArguments(c.name, c.arguments);
        }
      }
      expect([...counts].sort()).toEqual([1, 2]);
    });

    it('glm45 (GLM-4.5): <tool_call>name and arg_key/arg_value pairs whose values validate', () => {
      const counts = new Set<number>();
      const names = new Set<string>();
      for (const thinking of [true, false]) {
        for (let seed = 0; seed < 200; seed++) {
          const a = compose({ seed, thinking, format: FORMATS.glm45 })!;
          expect(a.ends).toBe(true);
          const calls = parseGlm(split('glm45', thinking, a.text).rest);
          counts.add(calls.length);
          for (const c of calls) {
            names.add(c.name);
            checkArguments(c.name, c.arguments);
          }
        }
      }
      expect([...counts].sort()).toEqual([1, 2]);
      expect([...names].sort()).toEqual(['get_time', 'get_weather', 'search']);
    });

    it('"required": a JSON array of 1-2 {name, parameters} that validate (glm45: its own markup)', () => {
      for (const format of ['qwen3', 'glm45'] as const) {
        for (const thinking of [true, false]) {
          const counts = new Set<number>();
          for (let seed = 0; seed < 150; seed++) {
            const a = compose({
              seed,
              thinking,
              format: FORMATS[format],
              toolChoice: 'required',
              toolCallShare: 0,
            })!;
            expect(a.ends).toBe(true);
            const { rest } = split(format, thinking, a.text);
            if (format === 'glm45') {
              // vLLM does not guide glm45 for "required": the model writes its calls as for auto.
              const calls = parseGlm(rest);
              counts.add(calls.length);
              for (const c of calls) checkArguments(c.name, c.arguments);
              continue;
            }
            const calls = JSON.parse(rest) as unknown[];
            counts.add(calls.length);
            for (const c of calls as { name: string; parameters: unknown }[]) {
              expect(Object.keys(c)).toEqual(['name', 'parameters']);
              checkArguments(c.name, c.parameters);
            }
          }
          expect([...counts].sort()).toEqual([1, 2]);
        }
      }
      // Without a tool-call format (guided decoding needs none).
      const plain = compose({
        format: { reasoning: null, tools: null },
        thinking: false,
        toolChoice: 'required',
      })!;
      expect(Array.isArray(JSON.parse(plain.text))).toBe(true);
    });

    it('a named function: its arguments object alone, valid; {} for one without parameters (glm45: one call in its markup)', () => {
      for (const format of ['qwen3', 'glm45'] as const) {
        for (const thinking of [true, false]) {
          for (let seed = 0; seed < 100; seed++) {
            for (const name of ['get_weather', 'search']) {
              const a = compose({ seed, thinking, format: FORMATS[format], toolChoice: { name } })!;
              expect(a.ends).toBe(true);
              const { rest } = split(format, thinking, a.text);
              if (format === 'glm45') {
                const calls = parseGlm(rest);
                expect(calls.map((c) => c.name)).toEqual([name]);
                checkArguments(name, calls[0]!.arguments);
              } else {
                checkArguments(name, JSON.parse(rest));
              }
            }
            const none = compose({
              seed,
              thinking,
              format: FORMATS[format],
              toolChoice: { name: 'get_time' },
            })!;
            const rest = split(format, thinking, none.text).rest;
            if (format === 'glm45')
              expect(parseGlm(rest)).toEqual([{ name: 'get_time', arguments: {} }]);
            else expect(rest).toBe('{}');
          }
        }
      }
    });

    it('toolCallShare 0 never calls, 1 always does, and 0.3 about 30% of the time', () => {
      for (const format of ['qwen3', 'glm45'] as const) {
        for (let seed = 0; seed < 300; seed++) {
          const never = compose({ seed, format: FORMATS[format], toolCallShare: 0 })!;
          expect(never.ends).toBe(false);
          expect(never.text).not.toContain('<tool_call>');
          expect(
            compose({ seed, format: FORMATS[format], toolCallShare: 0, thinking: false }),
          ).toBeNull();
          const always = compose({ seed, format: FORMATS[format], toolCallShare: 1 })!;
          expect(always.ends).toBe(true);
          expect(always.text).toContain('<tool_call>');
        }
        let calls = 0;
        const n = 4000;
        for (let seed = 0; seed < n; seed++) {
          if (compose({ seed: seed * 7919 + 3, format: FORMATS[format], toolCallShare: 0.3 })!.ends)
            calls++;
        }
        expect(calls / n).toBeGreaterThan(0.27);
        expect(calls / n).toBeLessThan(0.33);
      }
    });

    it('"none", no tools, or no tool-call format: never a call', () => {
      for (let seed = 0; seed < 200; seed++) {
        for (const format of [FORMATS.qwen3, FORMATS.glm45]) {
          for (const over of [
            { toolChoice: 'none' as const },
            { tools: null },
            { tools: [] },
            { format: { reasoning: format.reasoning, tools: null } },
          ]) {
            const a = compose({ seed, format, ...over })!;
            expect(a.ends).toBe(false);
            expect(a.text).not.toContain('tool_call');
          }
        }
      }
    });

    it('never throws on odd tool definitions', () => {
      const odd: Record<string, unknown>[] = [
        { type: 'function' },
        { type: 'function', function: null },
        { type: 'function', function: { name: '' } },
        { type: 'function', function: { name: 'f', parameters: null } },
        {
          type: 'function',
          function: { name: 'g', parameters: { type: 'object', required: ['x'] } },
        },
        {
          type: 'function',
          function: { name: 'h', parameters: { type: 'integer', minimum: 3, maximum: 1 } },
        },
      ];
      for (const choice of ['auto', 'required', { name: 'f' }, { name: 'missing' }] as const) {
        for (let seed = 0; seed < 20; seed++) {
          for (const format of [FORMATS.qwen3, FORMATS.glm45])
            compose({ seed, format, tools: odd, toolChoice: choice });
        }
      }
      expect(
        JSON.parse(compose({ tools: odd, toolChoice: { name: 'f' }, thinking: false })!.text),
      ).toEqual({});
      expect(compose({ tools: [{ type: 'function' }], thinking: false })).toBeNull();
      fc.assert(
        fc.property(fc.anything(), seeds, (parameters, seed) => {
          const tools = [{ type: 'function', function: { name: 'f', parameters } }];
          for (const format of [FORMATS.qwen3, FORMATS.glm45]) {
            compose({ seed, format, tools, toolChoice: 'auto' });
            compose({ seed, format, tools, toolChoice: 'required' });
          }
        }),
        { numRuns: 300 },
      );
    });
  });

  describe("the models' chat templates render the same assistant turn", () => {
    const MODELS: Record<Reasoning, { preset: string; turn: string; end: string }> = {
      qwen3: { preset: 'qwen3-30b-a3b', turn: '<|im_start|>assistant\n', end: '<|im_end|>\n' },
      glm45: { preset: 'glm-4.5-air', turn: '<|assistant|>', end: '' },
    };
    const tokenizers = new Map<Reasoning, Tokenizer>();
    beforeAll(async () => {
      for (const f of ['qwen3', 'glm45'] as const)
        tokenizers.set(f, await tokenizerForModel(MODELS[f].preset));
    });
    const USER = { role: 'user', content: 'What is the weather in Paris?' };

    /** The last assistant turn of a render: from its opening on. */
    function lastTurn(format: Reasoning, rendered: string): string {
      return rendered.slice(rendered.lastIndexOf(MODELS[format].turn));
    }

    /**
     * The generation prompt + `text` + what follows it is what the template renders for the
     * assistant message the parsers read out of `text`.
     */
    function roundTrip(
      format: Reasoning,
      thinking: boolean,
      text: string,
      after: string,
      message: Record<string, unknown>,
    ): void {
      const tok = tokenizers.get(format)!;
      const opts = { tools: TOOLS, chatTemplateKwargs: { enable_thinking: thinking } };
      const prompt = tok.applyChatTemplate([USER], { ...opts, addGenerationPrompt: true });
      const full = tok.applyChatTemplate([USER, { role: 'assistant', ...message }], {
        ...opts,
        addGenerationPrompt: false,
      });
      expect(lastTurn(format, prompt) + text + after + MODELS[format].end).toBe(
        lastTurn(format, full),
      );
    }

    for (const format of ['qwen3', 'glm45'] as const) {
      for (const thinking of [true, false]) {
        it(`${format}, thinking ${thinking ? 'on' : 'off'}: tool calls, JSON answers and spans`, () => {
          for (let seed = 0; seed < 40; seed++) {
            const base = { seed, thinking, format: FORMATS[format] };
            const call = compose(base)!;
            const { reasoning, rest } = split(format, thinking, call.text);
            const calls = format === 'qwen3' ? parseHermes(rest) : parseGlm(rest);
            roundTrip(format, thinking, call.text, '', {
              content: '',
              reasoning_content: reasoning ?? '',
              tool_calls: calls.map((c) => ({ type: 'function', function: c })),
            });
            for (const toolChoice of ['required', { name: 'search' }] as const) {
              const json = compose({ ...base, toolChoice })!;
              const parts = split(format, thinking, json.text);
              roundTrip(format, thinking, json.text, '', {
                content: parts.rest,
                reasoning_content: parts.reasoning ?? '',
              });
            }
            if (thinking) {
              const span = compose({ ...base, toolChoice: 'none' })!;
              roundTrip(format, thinking, span.text, 'Sunny.', {
                content: 'Sunny.',
                reasoning_content: split(format, thinking, span.text).reasoning,
              });
            }
          }
        });
      }
    }
  });
});
