#!/usr/bin/env node
// Drives a running `npm start` (its defaults: the qwen3-30b-a3b preset on 127.0.0.1:8000) with the
// official openai SDK, unchanged: chat, the same chat streamed, n > 1 with logprobs, a tool
// definition, completions with two prompts, an unknown model. Prints one JSON line of what it saw
// and exits 1 when an answer is not what the SDK should get.
// Usage: `npm start &`, then `node scripts/openai-sdk-check.mjs [baseURL]`.
import OpenAI from 'openai';

const baseURL = process.argv[2] ?? 'http://127.0.0.1:8000/v1';
const client = new OpenAI({ baseURL, apiKey: process.env.VLLM_API_KEY ?? 'unused', maxRetries: 0 });
const problems = [];
const expect = (ok, what) => {
  if (!ok) problems.push(what);
};

const model = (await client.models.list()).data[0]?.id;
expect(typeof model === 'string', 'GET /v1/models lists a model');
const seen = { model };

const ask = { model, messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 24, seed: 1 };
const chat = await client.chat.completions.create(ask);
const text = chat.choices[0]?.message.content ?? '';
seen.chat = {
  finish_reason: chat.choices[0]?.finish_reason,
  chars: text.length,
  usage: chat.usage,
};
expect(chat.usage.completion_tokens > 0, 'chat usage counts completion tokens');

let streamed = '';
for await (const chunk of await client.chat.completions.create({ ...ask, stream: true })) {
  streamed += chunk.choices[0]?.delta?.content ?? '';
}
seen.stream_equals_chat = streamed === text;
expect(seen.stream_equals_chat, 'the streamed chat text equals the non-streamed one');

const many = await client.chat.completions.create({
  model,
  messages: [{ role: 'user', content: 'Count' }],
  max_tokens: 8,
  n: 3,
  seed: 2,
  logprobs: true,
  top_logprobs: 1,
});
seen.n = many.choices.length;
seen.logprobs_per_choice = many.choices.map((c) => c.logprobs?.content?.length ?? 0);
expect(seen.n === 3, 'n=3 gives three choices');
expect(
  seen.logprobs_per_choice.every((k) => k > 0),
  'every choice carries logprobs',
);

const tools = await client.chat.completions.create({
  model,
  messages: [{ role: 'user', content: 'Weather in Paris?' }],
  max_tokens: 8,
  // Rendered into the prompt, not parsed: "auto" (the default with tools) needs
  // --enable-auto-tool-choice, as in vLLM.
  tool_choice: 'none',
  tools: [
    {
      type: 'function',
      function: {
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } } },
      },
    },
  ],
});
seen.tool_prompt_tokens = tools.usage.prompt_tokens;
expect(
  tools.usage.prompt_tokens > chat.usage.prompt_tokens,
  'a tool definition is rendered into the prompt',
);

const completions = await client.completions.create({
  model,
  prompt: ['Once upon', 'a time'],
  max_tokens: 8,
  logprobs: 2,
  seed: 3,
});
seen.completion_choices = completions.choices.length;
expect(completions.choices.length === 2, 'two prompts give two completion choices');

try {
  await client.chat.completions.create({ ...ask, model: 'no-such-model' });
  expect(false, 'an unknown model is refused');
} catch (error) {
  seen.unknown_model_status = error.status;
  expect(error.status === 404, 'an unknown model is a 404');
}

console.log(JSON.stringify({ ...seen, problems }));
process.exit(problems.length === 0 ? 0 : 1);
