/**
 * POST /tokenize and POST /detokenize on a real cluster (qwen3 preset, two API servers): a prompt,
 * chat messages through Qwen3's template (tools, enable_thinking), long texts (tokenizer threads),
 * token strings, special tokens kept on the way back, and a 400 naming the field for each bad input.
 */
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Cluster, startCluster } from './harness.js';

/** An answer's JSON, read loosely: each test checks the fields it needs. */
// biome-ignore lint/suspicious/noExplicitAny: answers of several shapes, checked by toEqual
type Answer = any;

async function post(
  cluster: Cluster,
  path: string,
  body: unknown,
): Promise<{ status: number; body: Answer }> {
  const res = await request(`${cluster.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.statusCode, body: await res.body.json() };
}

describe('/tokenize and /detokenize', () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster(['--api-server-count', '2', '--max-model-len', '8192']);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('tokenizes a prompt as vLLM answers it', async () => {
    const res = await post(cluster, '/tokenize', {
      prompt: 'Hello world',
      return_token_strs: true,
    });
    expect(res).toEqual({
      status: 200,
      body: {
        count: 2,
        max_model_len: 8192,
        tokens: [9707, 1879],
        token_strs: ['Hello', 'Ġworld'],
      },
    });
    const plain = await post(cluster, '/tokenize', {
      prompt: '你好世界',
      model: 'sim-qwen3-30b-a3b',
    });
    expect(plain.body).toEqual({
      count: 2,
      max_model_len: 8192,
      tokens: [108386, 99489],
      token_strs: null,
    });
  });

  it('tokenizes chat messages through the chat template', async () => {
    const res = await post(cluster, '/tokenize', {
      messages: [{ role: 'user', content: 'Hi' }],
      chat_template_kwargs: { enable_thinking: false },
    });
    expect(res.status).toBe(200);
    const back = await post(cluster, '/detokenize', { tokens: res.body.tokens });
    expect(back).toEqual({
      status: 200,
      body: {
        prompt: '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n',
      },
    });
    const tools = [
      { type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } },
    ];
    const withTools = await post(cluster, '/tokenize', {
      messages: [{ role: 'user', content: 'Hi' }],
      tools,
      add_generation_prompt: false,
    });
    const text = (await post(cluster, '/detokenize', { tokens: withTools.body.tokens })).body
      .prompt;
    expect(text).toContain('<tools>\n{"type": "function", "function": {"name": "lookup"');
    expect(text.endsWith('<|im_start|>user\nHi<|im_end|>\n')).toBe(true);
  });

  it('tokenizes long texts (on the tokenizer threads) exactly as short ones', async () => {
    const line = 'Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. 🤗\n';
    const one = await post(cluster, '/tokenize', { prompt: line });
    const many = await post(cluster, '/tokenize', { prompt: line.repeat(50) });
    expect(many.body.count).toBe(one.body.count * 50);
    expect(many.body.tokens.slice(0, one.body.count)).toEqual(one.body.tokens);
    expect((await post(cluster, '/detokenize', { tokens: many.body.tokens })).body.prompt).toBe(
      line.repeat(50),
    );
  });

  it('answers bad input with a 400 naming the field', async () => {
    const cases: [string, unknown, string][] = [
      ['/tokenize', {}, 'prompt'],
      ['/tokenize', { prompt: 3 }, 'prompt'],
      ['/tokenize', { prompt: 'a', add_special_tokens: 'yes' }, 'add_special_tokens'],
      ['/tokenize', { messages: [] }, 'messages'],
      ['/tokenize', { messages: [{ content: 'x' }] }, 'messages[0].role'],
      ['/tokenize', { messages: [{ role: 'user', content: 5 }] }, 'messages[0].content'],
      ['/tokenize', { messages: [{ role: 'user', content: 'x' }], tools: {} }, 'tools'],
      [
        '/tokenize',
        { messages: [{ role: 'user', content: 'x' }], chat_template_kwargs: [] },
        'chat_template_kwargs',
      ],
      ['/detokenize', { tokens: 'abc' }, 'tokens'],
      ['/detokenize', { tokens: [1, -1] }, 'tokens[1]'],
      ['/detokenize', { tokens: [151669] }, 'tokens[0]'],
      ['/detokenize', { tokens: [1.5] }, 'tokens[0]'],
    ];
    for (const [path, body, param] of cases) {
      const res = await post(cluster, path, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.param, JSON.stringify(body)).toBe(param);
      expect(res.body.error.code).toBe(400);
    }
    const unknown = await post(cluster, '/tokenize', { prompt: 'a', model: 'nope' });
    expect(unknown.status).toBe(404);
  });
});
