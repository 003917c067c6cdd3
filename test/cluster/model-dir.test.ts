/**
 * `--model DIR` on a real cluster (supervisor, engine core, API server): a Hugging Face model
 * directory of the tiny preset's shape (test/wire/hf-fixtures.ts, with tokenizers/tiny's files)
 * is served under its path as vLLM serves one, generates with routing rows of its config's shape,
 * and chats through the directory's own tokenizer and chat template.
 */
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkInvariants, generate } from '../../src/client/index.js';
import { modelDirs, TINY_GLM_SHAPE } from '../wire/hf-fixtures.js';
import { type Cluster, startCluster } from './harness.js';

const dirs = modelDirs();
const PROMPT = Array.from({ length: 37 }, (_, i) => (i * 37 + 11) % 990);
let dir: string;
let cluster: Cluster;

beforeAll(async () => {
  dir = dirs.tiny('tiny-moe', TINY_GLM_SHAPE);
  cluster = await startCluster(['--model', dir, '--max-speed']);
});

afterAll(async () => {
  await cluster?.stop();
});

describe('a model directory served by a cluster', () => {
  it('lists the directory as the model, as vLLM does', async () => {
    const res = await request(`${cluster.url}/v1/models`);
    const body = (await res.body.json()) as { data: { id: string; root: string }[] };
    expect(body.data.map((m) => [m.id, m.root])).toEqual([[dir, dir]]);
  });

  it("generates with routing rows of the config's shape", async () => {
    const result = await generate(cluster.url, {
      model: dir,
      token_ids: PROMPT,
      sampling_params: {
        max_tokens: 24,
        seed: 3,
        ignore_eos: true,
        logprobs: 1,
        return_routed_experts: true,
      },
    });
    checkInvariants(result, PROMPT.length);
    const c = result.choices[0]!;
    expect(c.tokenIds).toHaveLength(24);
    // 3 routing layers (4 hidden, the first dense) of 4 experts out of 16, one row per position.
    expect(c.routedExperts?.shape).toEqual([PROMPT.length + 24 - 1, 3, 4]);
    expect(Math.max(...Array.from(c.routedExperts?.data ?? []))).toBeLessThan(16);
  });

  it("chats through the directory's tokenizer and chat template", async () => {
    const res = await request(`${cluster.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: dir,
        messages: [{ role: 'user', content: 'What is the sum of two and two?' }],
        max_tokens: 16,
        seed: 1,
      }),
    });
    expect(res.statusCode).toBe(200);
    const body = (await res.body.json()) as {
      model: string;
      choices: { message: { content: string } }[];
      usage: { prompt_tokens: number };
    };
    expect(body.model).toBe(dir);
    expect(body.choices[0]?.message.content.length).toBeGreaterThan(0);
    expect(body.usage.prompt_tokens).toBeGreaterThan(10);
  });
});
