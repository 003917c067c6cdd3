import { describe, expect, it } from 'vitest';
import { RingserveError } from '../../src/errors.js';
import { parseChatBody } from '../../src/protocol/openai-chat-request.js';
import { parseCompletionBody } from '../../src/protocol/openai-completion-request.js';
import { type OpenAiRequestOptions, toGenerateRequest } from '../../src/protocol/openai-request.js';

const OPTS: OpenAiRequestOptions = { vocabSize: 1000, maxModelLen: 64, maxLogprobs: 20 };
const TOOLS = [{ type: 'function', function: { name: 'f', parameters: {} } }];

/** The 400's `param` for a body, or null when it parses. */
function badField(parse: () => unknown): string | null {
  try {
    parse();
    return null;
  } catch (err) {
    expect(err).toBeInstanceOf(RingserveError);
    expect((err as RingserveError).statusCode).toBe(400);
    return (err as RingserveError).param;
  }
}

const completion = (extra: Record<string, unknown>) =>
  parseCompletionBody({ model: 'tiny', prompt: 'hi', ...extra }, OPTS);
const chat = (extra: Record<string, unknown>) =>
  parseChatBody({ messages: [{ role: 'user', content: 'hi' }], ...extra }, OPTS);

describe('POST /v1/completions body', () => {
  it('reads the prompt in its four forms', () => {
    expect(completion({ prompt: 'a' }).prompt).toEqual({ kind: 'text', texts: ['a'] });
    expect(completion({ prompt: ['a', 'b'] }).prompt).toEqual({ kind: 'text', texts: ['a', 'b'] });
    expect(completion({ prompt: [1, 2] }).prompt).toEqual({
      kind: 'ids',
      ids: [Int32Array.of(1, 2)],
    });
    expect(completion({ prompt: [[1], [2, 3]] }).prompt).toEqual({
      kind: 'ids',
      ids: [Int32Array.of(1), Int32Array.of(2, 3)],
    });
  });

  it('reads every sampling field with vLLM defaults', () => {
    const d = completion({}).common;
    expect(d.maxTokens).toBe(16);
    expect(d.n).toBe(1);
    expect(d.topLogprobs).toBe(-1);
    expect(d.params).toMatchObject({ temperature: 1, topP: 1, topK: 0, minP: 0, seed: null });
    const c = completion({
      max_tokens: 5,
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
      min_p: 0.1,
      n: 3,
      stop: 'x',
      seed: 7,
      logprobs: 2,
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      repetition_penalty: 1.2,
      min_tokens: 2,
      ignore_eos: true,
      stop_token_ids: [5],
      include_stop_str_in_output: true,
      return_token_ids: true,
      user: 'ignored',
    }).common;
    expect(c).toMatchObject({
      maxTokens: 5,
      n: 3,
      stop: ['x'],
      topLogprobs: 2,
      minTokens: 2,
      includeStopStrInOutput: true,
      returnTokenIds: true,
    });
    expect(c.params).toMatchObject({
      temperature: 0.5,
      topP: 0.9,
      topK: 40,
      minP: 0.1,
      seed: 7,
      presencePenalty: 0.5,
      frequencyPenalty: -0.5,
      repetitionPenalty: 1.2,
      ignoreEos: true,
    });
    expect([...c.params.stopTokenIds]).toEqual([5]);
    expect(
      completion({ stream: true, stream_options: { include_usage: true } }).common,
    ).toMatchObject({ stream: true, includeUsage: true });
  });

  it('answers a bad field with a 400 naming it', () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ prompt: 3 }, 'prompt'],
      [{ prompt: [] }, 'prompt'],
      [{ prompt: ['a', 3] }, 'prompt[1]'],
      [{ prompt: [1, 5000] }, 'prompt[1]'],
      [{ prompt: [[1], 'a'] }, 'prompt[1]'],
      [{ max_tokens: 0 }, 'max_tokens'],
      [{ temperature: 3 }, 'temperature'],
      [{ top_p: 0 }, 'top_p'],
      [{ top_k: -2 }, 'top_k'],
      [{ n: 0 }, 'n'],
      [{ stop: [''] }, 'stop[0]'],
      [{ stop: 3 }, 'stop'],
      [{ logprobs: 21 }, 'logprobs'],
      [{ logprobs: -1 }, 'logprobs'],
      [{ echo: true, logprobs: 1 }, 'echo'],
      [{ stream_options: { include_usage: true } }, 'stream_options'],
      [{ stream: true, stream_options: { include_usage: 1 } }, 'stream_options.include_usage'],
      [{ suffix: 'x' }, 'suffix'],
      [{ logit_bias: { '1': 5 } }, 'logit_bias'],
      [{ prompt_logprobs: 1 }, 'prompt_logprobs'],
      [{ best_of: 3 }, 'best_of'],
      [{ use_beam_search: true }, 'use_beam_search'],
      [{ response_format: { type: 'json_object' } }, 'response_format.type'],
      [{ skip_special_tokens: 0 }, 'skip_special_tokens'],
      [{ stop_token_ids: [1000] }, 'stop_token_ids[0]'],
      [{ presence_penalty: 3 }, 'presence_penalty'],
      [{ repetition_penalty: 0 }, 'repetition_penalty'],
      [{ seed: 1.5 }, 'seed'],
      [{ priority: 1 }, 'priority'],
      [{ model: 3 }, 'model'],
    ];
    for (const [body, field] of cases)
      expect(
        badField(() => completion(body)),
        field,
      ).toBe(field);
    expect(() => parseCompletionBody([], OPTS)).toThrow(/expected an object/);
  });

  it('checks lengths once the prompt is tokenized', () => {
    const body = completion({ max_tokens: 10 });
    const ok = toGenerateRequest(
      body.common,
      { kind: 'completion', prompts: [new Int32Array(54)], echo: null },
      'prompt',
      OPTS,
    );
    expect(ok.params.maxTokens).toBe(10);
    expect(ok.openai).toMatchObject({ kind: 'completion', n: 1, topLogprobs: -1 });
    const tooLong = () =>
      toGenerateRequest(
        body.common,
        { kind: 'completion', prompts: [new Int32Array(55)], echo: null },
        'prompt',
        OPTS,
      );
    expect(badField(tooLong)).toBe('max_tokens');
    const several = toGenerateRequest(
      completion({ n: 2 }).common,
      { kind: 'completion', prompts: [Int32Array.of(1), Int32Array.of(2, 3)], echo: null },
      'prompt',
      OPTS,
    );
    expect(several.n).toBe(4);
  });
});

describe('POST /v1/chat/completions body', () => {
  it('reads messages, text parts, tools and the template switches', () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: {} } }];
    const c = chat({
      messages: [
        { role: 'system', content: 'be brief' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'a' },
            { type: 'text', text: 'b' },
          ],
        },
        { role: 'assistant', content: null, tool_calls: [{ id: 't1' }] },
        { role: 'tool', content: 'sunny', tool_call_id: 't1' },
      ],
      tools,
      tool_choice: 'auto',
      chat_template_kwargs: { enable_thinking: false },
      max_completion_tokens: 9,
      logprobs: true,
      top_logprobs: 3,
      response_format: { type: 'text' },
    });
    expect(c.messages[1]!.content).toBe('a\nb');
    expect(c.messages[2]!.tool_calls).toEqual([{ id: 't1' }]);
    expect(c.messages[3]!.tool_call_id).toBe('t1');
    expect(c.tools).toEqual(tools);
    expect(c.chatTemplateKwargs).toEqual({ enable_thinking: false });
    expect([c.toolChoice, c.thinking]).toEqual(['auto', false]);
    // As vLLM: tools without tool_choice is "auto", no tools "none"; named and required as sent.
    expect(chat({ tools }).toolChoice).toBe('auto');
    expect([chat({}).toolChoice, chat({}).thinking]).toEqual(['none', true]);
    expect(chat({ tools, tool_choice: 'required' }).toolChoice).toBe('required');
    const named = { type: 'function', function: { name: 'get_weather' } };
    expect(chat({ tools, tool_choice: named }).toolChoice).toEqual({ name: 'get_weather' });
    expect(c.addGenerationPrompt).toBe(true);
    expect(c.addSpecialTokens).toBe(false);
    expect(c.common.maxTokens).toBe(9);
    expect(c.common.maxTokensField).toBe('max_completion_tokens');
    expect(c.common.topLogprobs).toBe(3);
    expect(chat({ max_tokens: 4 }).common.maxTokens).toBe(4);
    expect(chat({}).common.maxTokens).toBe(null);
    expect(chat({ logprobs: true }).common.topLogprobs).toBe(0);
    const cont = chat({ continue_final_message: true });
    expect([cont.continueFinalMessage, cont.addGenerationPrompt]).toEqual([true, false]);
  });

  it('answers a bad field with a 400 naming it', () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ messages: [] }, 'messages'],
      [{ messages: 'hi' }, 'messages'],
      [{ messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role'],
      [{ messages: [{ role: 'user', content: 3 }] }, 'messages[0].content'],
      [
        { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] },
        'messages[0].content[0].type',
      ],
      [{ top_logprobs: 2 }, 'top_logprobs'],
      [{ logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
      [{ max_completion_tokens: 0 }, 'max_completion_tokens'],
      [{ tools: [{ type: 'x' }] }, 'tools[0].type'],
      [{ tools: [{ type: 'function', function: {} }] }, 'tools[0].function.name'],
      [{ tool_choice: 'required' }, 'tool_choice'],
      [{ tool_choice: 'auto' }, 'tool_choice'],
      [{ tool_choice: { type: 'function', function: { name: 'f' } } }, 'tool_choice'],
      [
        { tools: TOOLS, tool_choice: { type: 'function', function: { name: 'g' } } },
        'tool_choice.function.name',
      ],
      [{ tools: TOOLS, tool_choice: { type: 'x', function: { name: 'f' } } }, 'tool_choice.type'],
      [{ tools: TOOLS, tool_choice: 'any' }, 'tool_choice'],
      [{ response_format: { type: 'json_schema' } }, 'response_format.type'],
      [{ chat_template_kwargs: 3 }, 'chat_template_kwargs'],
      [{ continue_final_message: true, add_generation_prompt: true }, 'continue_final_message'],
      [{ chat_template: '{{x}}' }, 'chat_template'],
    ];
    for (const [body, field] of cases)
      expect(
        badField(() => chat(body)),
        field,
      ).toBe(field);
  });
});
