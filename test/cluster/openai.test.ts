/**
 * /v1/completions and /v1/chat/completions end to end, driven by the official `openai` npm SDK
 * against a real cluster (supervisor, engine core, API server, the `tiny` preset's tokenizer):
 * non-streaming and streaming give the same text, stop strings that span token boundaries cut it
 * there, usage is exact (prompt tokens as the tokenizer counts them), n > 1 and several prompts
 * fan out, logprobs carry token text, a tool definition is rendered into the prompt, and errors
 * come back as the SDK's typed exceptions.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenizerForModel } from '../../src/tokenizer/presets.js';
import type { Tokenizer } from '../../src/tokenizer/tokenizer.js';
import { type Cluster, startCluster } from './harness.js';

let cluster: Cluster;
let client: OpenAI;
let tokenizer: Tokenizer;

const PROMPT = 'The answer to the question is';
const MESSAGES: OpenAI.Chat.ChatCompletionMessageParam[] = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: [{ type: 'text', text: 'What is the sum of two and two?' }] },
];

beforeAll(async () => {
  cluster = await startCluster(['--model', 'tiny', '--max-speed']);
  client = new OpenAI({ baseURL: `${cluster.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  tokenizer = await tokenizerForModel('tiny');
});

afterAll(async () => {
  await cluster?.stop();
});

async function streamedCompletion(
  params: Omit<OpenAI.CompletionCreateParamsStreaming, 'stream' | 'model'>,
): Promise<{ text: string; finish: string | null; usage: OpenAI.CompletionUsage | undefined }> {
  const stream = await client.completions.create({
    ...params,
    model: 'tiny',
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish: string | null = null;
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text;
      finish = c.finish_reason ?? finish;
    }
    usage = chunk.usage ?? usage;
  }
  return { text, finish, usage };
}

describe('the OpenAI routes through the official SDK', () => {
  it('completes a text prompt with logprobs, usage counted exactly', async () => {
    const res = await client.completions.create({
      model: 'tiny',
      prompt: PROMPT,
      max_tokens: 24,
      seed: 11,
      logprobs: 1,
      ignore_eos: true,
    } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(res.object).toBe('text_completion');
    expect(res.id.startsWith('cmpl-')).toBe(true);
    const c = res.choices[0]!;
    expect(c.finish_reason).toBe('length');
    expect(res.usage).toMatchObject({
      prompt_tokens: tokenizer.encode(PROMPT).length,
      completion_tokens: 24,
      total_tokens: tokenizer.encode(PROMPT).length + 24,
    });
    const lp = c.logprobs!;
    expect(lp.tokens).toHaveLength(24);
    expect(lp.token_logprobs).toHaveLength(24);
    expect(lp.top_logprobs).toHaveLength(24);
    // vLLM's completions: the sampled token, then the k = 1 best, keyed by text: one key where
    // the sampled token is the best (or shares its text), two where the best is another token,
    // at least as likely as the sampled one.
    let twoKeys = 0;
    lp.top_logprobs!.forEach((top, i) => {
      const keys = Object.keys(top);
      expect(keys.length).toBeGreaterThanOrEqual(1);
      expect(keys.length).toBeLessThanOrEqual(2);
      expect(keys[0]).toBe(lp.tokens![i]);
      expect(top[keys[0]!]).toBe(lp.token_logprobs![i]);
      if (keys.length === 2) {
        twoKeys++;
        expect(top[keys[1]!]).toBeGreaterThanOrEqual(top[keys[0]!]!);
      }
    });
    // Seeded: this draw leaves the best candidate at least once.
    expect(twoKeys).toBeGreaterThan(0);
    for (const p of lp.token_logprobs!) expect(p).toBeLessThanOrEqual(0);
    // The tokens' texts make up the text (no stop string cut it; none splits a character here
    // unless the text says so with U+FFFD).
    if (!c.text.includes('\ufffd')) expect(lp.tokens!.join('')).toBe(c.text);
  });

  it('streams the same text as the whole answer, and the same usage', async () => {
    const params = { prompt: PROMPT, max_tokens: 40, seed: 5, temperature: 0.9 };
    const whole = await client.completions.create({ ...params, model: 'tiny' });
    const streamed = await streamedCompletion(params);
    expect(streamed.text).toBe(whole.choices[0]!.text);
    expect(streamed.finish).toBe(whole.choices[0]!.finish_reason);
    expect(streamed.usage).toEqual(whole.usage);
  });

  it('cuts at a stop string that spans two tokens, streamed or not', async () => {
    const params = { prompt: PROMPT, max_tokens: 48, seed: 21, logprobs: 0, ignore_eos: true };
    const free = await client.completions.create({ ...params, model: 'tiny' } as never);
    const tokens = (free as OpenAI.Completion).choices[0]!.logprobs!.tokens!;
    const text = (free as OpenAI.Completion).choices[0]!.text;
    // A stop string made of the end of one token and the start of the next.
    let stop = '';
    for (let k = 4; k + 1 < tokens.length && stop === ''; k++) {
      const a = tokens[k]!;
      const b = tokens[k + 1]!;
      if (a.length < 2 || b.length < 2 || /\ufffd/.test(a + b)) continue;
      const candidate = a.slice(-2) + b.slice(0, 2);
      if (text.indexOf(candidate) === text.indexOf(a.slice(-2) + b)) stop = candidate;
    }
    expect(stop).not.toBe('');
    const want = text.slice(0, text.indexOf(stop));
    const { logprobs: _, ...rest } = params;
    const cut = await client.completions.create({ ...rest, model: 'tiny', stop } as never);
    const choice = (cut as OpenAI.Completion).choices[0]!;
    expect(choice.text).toBe(want);
    expect(choice.finish_reason).toBe('stop');
    expect((choice as unknown as { stop_reason: string }).stop_reason).toBe(stop);
    const streamed = await streamedCompletion({ ...rest, stop } as never);
    expect(streamed.text).toBe(want);
    expect(streamed.finish).toBe('stop');
    const included = await client.completions.create({
      ...rest,
      model: 'tiny',
      stop,
      include_stop_str_in_output: true,
    } as never);
    expect((included as OpenAI.Completion).choices[0]!.text).toBe(want + stop);
  });

  it('fans out n and several prompts, echoes, returns token ids', async () => {
    const res = await client.completions.create({
      model: 'tiny',
      prompt: ['One two', 'three four five'],
      n: 2,
      max_tokens: 6,
      seed: 3,
      echo: true,
      return_token_ids: true,
      ignore_eos: true,
    } as never);
    const r = res as OpenAI.Completion;
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    expect(r.choices[0]!.text.startsWith('One two')).toBe(true);
    expect(r.choices[3]!.text.startsWith('three four five')).toBe(true);
    const lens = ['One two', 'three four five'].map((p) => tokenizer.encode(p).length);
    expect(r.usage).toMatchObject({ prompt_tokens: lens[0]! + lens[1]!, completion_tokens: 24 });
    const c = r.choices[2] as unknown as { prompt_token_ids: number[]; token_ids: number[] };
    expect(c.prompt_token_ids).toEqual(Array.from(tokenizer.encode('three four five')));
    expect(c.token_ids).toHaveLength(6);
  });

  it('answers a chat with n choices and logprobs, usage from the rendered template', async () => {
    const res = await client.chat.completions.create({
      model: 'tiny',
      messages: MESSAGES,
      n: 3,
      max_completion_tokens: 12,
      logprobs: true,
      top_logprobs: 2,
      seed: 9,
    });
    expect(res.object).toBe('chat.completion');
    expect(res.id.startsWith('chatcmpl-')).toBe(true);
    expect(res.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    const rendered = tokenizer.applyChatTemplate(MESSAGES as never, {});
    const promptTokens = tokenizer.encode(rendered, { addSpecialTokens: false }).length;
    let completion = 0;
    for (const c of res.choices) {
      expect(c.message.role).toBe('assistant');
      expect(typeof c.message.content).toBe('string');
      const content = c.logprobs!.content!;
      completion += content.length;
      for (const e of content) {
        // vLLM's chat: top_logprobs k entries, the sampled token first, then the best others.
        expect(e.top_logprobs).toHaveLength(2);
        expect(e.top_logprobs[0]).toEqual({ token: e.token, logprob: e.logprob, bytes: e.bytes });
      }
    }
    expect(res.usage).toMatchObject({ prompt_tokens: promptTokens, completion_tokens: completion });
  });

  it('streams a chat: the same content as the whole answer, then usage', async () => {
    const params = { model: 'tiny', messages: MESSAGES, max_completion_tokens: 30, seed: 4 };
    const whole = await client.chat.completions.create(params);
    const stream = await client.chat.completions.create({
      ...params,
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = '';
    let role: string | undefined;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        role ??= c.delta.role;
        content += c.delta.content ?? '';
      }
      usage = chunk.usage ?? usage;
    }
    expect(role).toBe('assistant');
    expect(content).toBe(whole.choices[0]!.message.content);
    expect(usage).toEqual(whole.usage);
  });

  it('streams n choices of several prompts, each the same text as the whole answer', async () => {
    const params = {
      model: 'tiny',
      prompt: ['One two', 'three four five'],
      n: 2,
      max_tokens: 20,
      seed: 8,
    };
    const whole = await client.completions.create(params);
    const stream = await client.completions.create({
      ...params,
      stream: true,
      stream_options: { include_usage: true },
    });
    const texts = ['', '', '', ''];
    let usage: OpenAI.CompletionUsage | undefined;
    let finishes = 0;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        texts[c.index] += c.text;
        if (c.finish_reason !== null) finishes++;
      }
      usage = chunk.usage ?? usage;
    }
    expect(texts).toEqual(whole.choices.map((c) => c.text));
    expect(finishes).toBe(4);
    expect(usage).toEqual(whole.usage);
    const chat = await client.chat.completions.create({
      model: 'tiny',
      messages: MESSAGES,
      n: 3,
      max_completion_tokens: 16,
      seed: 2,
      stream: true,
    });
    const contents = ['', '', ''];
    const roles = new Set<number>();
    for await (const chunk of chat) {
      for (const c of chunk.choices) {
        if (c.delta.role === 'assistant') roles.add(c.index);
        contents[c.index] += c.delta.content ?? '';
      }
    }
    const wholeChat = await client.chat.completions.create({
      model: 'tiny',
      messages: MESSAGES,
      n: 3,
      max_completion_tokens: 16,
      seed: 2,
    });
    expect([...roles].sort()).toEqual([0, 1, 2]);
    expect(contents).toEqual(wholeChat.choices.map((c) => c.message.content));
  });

  it('renders a tool definition into the prompt; "auto" needs --enable-auto-tool-choice, as vLLM', async () => {
    const tools: OpenAI.Chat.ChatCompletionTool[] = [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'The weather in a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } } },
        },
      },
    ];
    const res = await client.chat.completions.create({
      model: 'tiny',
      messages: MESSAGES,
      tools,
      tool_choice: 'none',
      max_completion_tokens: 4,
    });
    // Tools given, tool_choice absent: "auto", which this server (no --enable-auto-tool-choice)
    // refuses with vLLM's 400.
    for (const tool_choice of ['auto', undefined] as const) {
      const auto = await client.chat.completions
        .create({ model: 'tiny', messages: MESSAGES, tools, tool_choice, max_completion_tokens: 4 })
        .catch((e: unknown) => e);
      expect(auto).toBeInstanceOf(OpenAI.BadRequestError);
      expect((auto as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('tool_choice');
    }
    const rendered = tokenizer.applyChatTemplate(MESSAGES as never, { tools });
    expect(rendered).toContain('get_weather');
    expect(res.usage!.prompt_tokens).toBe(
      tokenizer.encode(rendered, { addSpecialTokens: false }).length,
    );
    expect(res.choices[0]!.message.tool_calls).toEqual([]);
  });

  it('raises the SDK errors: 404 for an unknown model, 400 naming a bad field', async () => {
    const missing = await client.completions
      .create({ model: 'gpt-9', prompt: 'x' })
      .catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    const bad = await client.chat.completions
      .create({ model: 'tiny', messages: MESSAGES, temperature: 7 })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
    expect((bad as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('temperature');
  });

  it('the inline baseline answers the OpenAI routes with a 501 naming the flag', async () => {
    const inline = await startCluster([
      '--model',
      'tiny',
      '--max-speed',
      '--output-processing',
      'inline',
    ]);
    const sdk = new OpenAI({ baseURL: `${inline.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const err = await sdk.chat.completions
      .create({ model: 'tiny', messages: MESSAGES })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(501);
    expect(String((err as Error).message)).toContain('--output-processing workers');
    await inline.stop();
  });
});
