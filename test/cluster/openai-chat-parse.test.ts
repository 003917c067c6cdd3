/**
 * Chat answers an evaluation harness parses, through the official `openai` SDK against real
 * clusters: the simulator answers in the model's own formats (Qwen3's `<think>` span and hermes
 * tool calls on the qwen3 preset, GLM-4.5's on glm-4.5-air), and the server's parsers give
 * `reasoning_content` and `tool_calls` (arguments that satisfy the function's JSON schema, checked
 * with ajv), the same streamed (name first, then argument fragments) as not; tool_choice
 * "required" and a named function; thinking off; and echo mode.
 */
import { Ajv } from 'ajv';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Cluster, startCluster } from './harness.js';

const WEATHER: OpenAI.Chat.ChatCompletionFunctionTool = {
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
const SEARCH: OpenAI.Chat.ChatCompletionFunctionTool = {
  type: 'function',
  function: {
    name: 'search',
    description: 'Search the web',
    parameters: {
      type: 'object',
      properties: {
        query: { type: 'string' },
        limit: { type: 'integer', minimum: 1, maximum: 20 },
        sites: { type: 'array', items: { type: 'string' }, maxItems: 3 },
        safe: { type: 'boolean' },
      },
      required: ['query', 'limit'],
    },
  },
};
const TOOLS = [WEATHER, SEARCH];
const MESSAGES: OpenAI.Chat.ChatCompletionMessageParam[] = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'What is the weather in Paris this week?' },
];

const ajv = new Ajv({ strict: false });
const validators = new Map(
  TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters as object)]),
);

/** The SDK's message and delta types do not name vLLM's reasoning field. */
type Reasoning = { reasoning_content?: string | null };

interface Answer {
  reasoning: string | null;
  content: string | null;
  calls: { name: string; arguments: string }[];
  finish: string | null;
}

function checkCalls(calls: Answer['calls']): void {
  for (const call of calls) {
    const validate = validators.get(call.name);
    expect(validate, `a call of an offered function, got ${call.name}`).toBeDefined();
    const args: unknown = JSON.parse(call.arguments);
    expect(validate!(args), JSON.stringify(validate!.errors)).toBe(true);
  }
}

function clientOf(cluster: Cluster): OpenAI {
  return new OpenAI({ baseURL: `${cluster.url}/v1`, apiKey: 'unused', maxRetries: 0 });
}

async function whole(
  client: OpenAI,
  params: Partial<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming> & Record<string, unknown>,
): Promise<Answer & { ids: string[] }> {
  const res = await client.chat.completions.create({
    model: params.model ?? '',
    messages: MESSAGES,
    max_completion_tokens: 400,
    ...params,
  } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
  const c = res.choices[0]!;
  const calls = (c.message.tool_calls ?? []).map((t) => {
    expect(t.type).toBe('function');
    const f = (t as OpenAI.Chat.ChatCompletionMessageFunctionToolCall).function;
    return { name: f.name, arguments: f.arguments };
  });
  return {
    reasoning: (c.message as Reasoning).reasoning_content ?? null,
    content: c.message.content,
    calls,
    finish: c.finish_reason,
    ids: (c.message.tool_calls ?? []).map((t) => t.id),
  };
}

/** The same request streamed, its deltas put together as a client does. */
async function streamed(
  client: OpenAI,
  params: Partial<OpenAI.Chat.ChatCompletionCreateParamsStreaming> & Record<string, unknown>,
): Promise<Answer & { firstCallDeltas: unknown[] }> {
  const stream = await client.chat.completions.create({
    model: params.model ?? '',
    messages: MESSAGES,
    max_completion_tokens: 400,
    ...params,
    stream: true,
  } as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
  let reasoning: string | null = null;
  let content: string | null = null;
  let finish: string | null = null;
  const calls: { name: string; arguments: string }[] = [];
  const firstCallDeltas: unknown[] = [];
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (c === undefined) continue;
    const delta = c.delta as typeof c.delta & Reasoning;
    if (typeof delta.reasoning_content === 'string') {
      reasoning = (reasoning ?? '') + delta.reasoning_content;
    }
    if (typeof delta.content === 'string' && delta.content !== '') {
      content = (content ?? '') + delta.content;
    }
    for (const t of delta.tool_calls ?? []) {
      if (t.index === 0) firstCallDeltas.push(t);
      if (calls[t.index] === undefined) {
        // The first delta of a call names it, with its id.
        expect(t.id).toMatch(/^chatcmpl-tool-/);
        expect(t.function?.name).toBeTruthy();
        calls[t.index] = { name: t.function!.name!, arguments: '' };
      }
      calls[t.index]!.arguments += t.function?.arguments ?? '';
    }
    finish = c.finish_reason ?? finish;
  }
  return { reasoning, content, calls, finish, firstCallDeltas };
}

describe('the qwen3 preset: <think> reasoning and hermes tool calls', () => {
  let cluster: Cluster;
  let client: OpenAI;
  const model = 'sim-qwen3-30b-a3b';

  beforeAll(async () => {
    cluster = await startCluster([
      '--max-speed',
      '--max-model-len',
      '8192',
      '--enable-auto-tool-choice',
      '--sim-tool-call-share',
      '1',
    ]);
    client = clientOf(cluster);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('answers tool_choice "auto" with reasoning and tool calls whose arguments fit the schema', async () => {
    for (const seed of [1, 2, 3]) {
      const a = await whole(client, { model, tools: TOOLS, seed });
      expect(a.reasoning?.length ?? 0).toBeGreaterThan(0);
      expect(a.reasoning).not.toContain('<think>');
      expect(a.calls.length).toBeGreaterThan(0);
      checkCalls(a.calls);
      for (const id of a.ids) expect(id).toMatch(/^chatcmpl-tool-[0-9a-f]{32}$/);
      expect(a.content ?? '').not.toContain('<tool_call>');
      expect(a.finish).toBe('tool_calls');
      // Deterministic per seed, but for the calls' random ids.
      const again = await whole(client, { model, tools: TOOLS, seed });
      expect({ ...again, ids: [] }).toEqual({ ...a, ids: [] });
    }
  });

  it('streams the same answer: reasoning deltas, then each call named first and its arguments in fragments', async () => {
    for (const seed of [1, 2]) {
      const a = await whole(client, { model, tools: TOOLS, seed });
      const s = await streamed(client, { model, tools: TOOLS, seed });
      expect({ reasoning: s.reasoning, calls: s.calls, finish: s.finish }).toEqual({
        reasoning: a.reasoning,
        calls: a.calls,
        finish: a.finish,
      });
      expect(s.content ?? '').toBe(a.content ?? '');
      expect(s.firstCallDeltas.length).toBeGreaterThan(1);
    }
  });

  it('thinking off (chat_template_kwargs): no reasoning_content', async () => {
    const a = await whole(client, {
      model,
      tools: TOOLS,
      seed: 4,
      chat_template_kwargs: { enable_thinking: false },
    });
    expect(a.reasoning).toBe(null);
    expect(a.calls.length).toBeGreaterThan(0);
    checkCalls(a.calls);
  });

  it('tool_choice "required" and a named function give calls that fit the schema', async () => {
    const required = await whole(client, { model, tools: TOOLS, tool_choice: 'required', seed: 5 });
    expect(required.calls.length).toBeGreaterThan(0);
    checkCalls(required.calls);
    const named = await whole(client, {
      model,
      tools: TOOLS,
      tool_choice: { type: 'function', function: { name: 'search' } },
      seed: 6,
    });
    expect(named.calls.map((c) => c.name)).toEqual(['search']);
    checkCalls(named.calls);
    const s = await streamed(client, {
      model,
      tools: TOOLS,
      tool_choice: { type: 'function', function: { name: 'search' } },
      seed: 6,
    });
    expect(s.calls).toEqual(named.calls);
  });

  it('tool_choice "none": no calls, the answer is content', async () => {
    const a = await whole(client, { model, tools: TOOLS, tool_choice: 'none', seed: 7 });
    expect(a.calls).toEqual([]);
    expect(a.finish).not.toBe('tool_calls');
  });
});

describe('the qwen3 preset at its modelled step times', () => {
  let cluster: Cluster;

  beforeAll(async () => {
    // Steps at the modelled ~10 ms, not 5: a full suite on two cores can hold the API server's
    // event loop longer than a 5 ms step, and steps that finish together reach the client as one
    // chunk, which is what the test below counts.
    cluster = await startCluster([
      '--speedup',
      '1',
      '--max-model-len',
      '8192',
      '--enable-auto-tool-choice',
      '--sim-tool-call-share',
      '1',
    ]);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('streams a call as it is generated: its arguments in several fragments', async () => {
    const client = clientOf(cluster);
    const model = 'sim-qwen3-30b-a3b';
    const params = {
      model,
      tools: TOOLS,
      seed: 8,
      chat_template_kwargs: { enable_thinking: false },
    };
    const s = await streamed(client, params);
    const fragments = s.firstCallDeltas.filter(
      (d) => ((d as { function?: { arguments?: string } }).function?.arguments ?? '') !== '',
    );
    expect(fragments.length).toBeGreaterThan(2);
    expect(s.calls).toEqual((await whole(client, params)).calls);
    checkCalls(s.calls);
  });
});

describe('the glm-4.5-air preset: GLM-4.5 reasoning and tool calls', () => {
  let cluster: Cluster;
  let client: OpenAI;
  const model = 'sim-glm-4.5-air';

  beforeAll(async () => {
    cluster = await startCluster([
      '--model',
      'glm-4.5-air',
      '--max-speed',
      '--max-model-len',
      '8192',
      '--enable-auto-tool-choice',
      '--sim-tool-call-share',
      '1',
    ]);
    client = clientOf(cluster);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('parses its tool calls into arguments that fit the schema, streamed the same', async () => {
    for (const seed of [1, 2]) {
      const a = await whole(client, { model, tools: TOOLS, seed });
      expect(a.reasoning?.length ?? 0).toBeGreaterThan(0);
      expect(a.calls.length).toBeGreaterThan(0);
      checkCalls(a.calls);
      expect(a.finish).toBe('tool_calls');
      const s = await streamed(client, { model, tools: TOOLS, seed });
      expect({ reasoning: s.reasoning, calls: s.calls }).toEqual({
        reasoning: a.reasoning,
        calls: a.calls,
      });
    }
  });
});

describe('--sim-mode echo', () => {
  let cluster: Cluster;
  let client: OpenAI;

  beforeAll(async () => {
    cluster = await startCluster(['--model', 'tiny', '--max-speed', '--sim-mode', 'echo']);
    client = clientOf(cluster);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('answers with the last user message, streamed or not', async () => {
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: 'user', content: 'first question' },
      { role: 'assistant', content: 'an answer' },
      { role: 'user', content: 'Repeat after me: the quick brown fox, 42 times!' },
    ];
    const res = await client.chat.completions.create({ model: 'tiny', messages, seed: 1 });
    expect(res.choices[0]!.message.content).toBe('Repeat after me: the quick brown fox, 42 times!');
    expect(res.choices[0]!.finish_reason).toBe('stop');
    const stream = await client.chat.completions.create({ model: 'tiny', messages, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe('Repeat after me: the quick brown fox, 42 times!');
  });
});
