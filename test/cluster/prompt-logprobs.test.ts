/**
 * `sampling_params.prompt_logprobs` end to end on real clusters: every position of a prompt long
 * enough to be prefilled in chunks, the same values in the packed, legacy and msgpack forms and on
 * the worker path and the inline baseline, once per request with n > 1, consistent with what the
 * engine samples (scoring a rollout at temperature 1 gives back its sampled logprobs), and a 400
 * for a stream that could not carry them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePromptLogprobs, generate } from '../../src/client/index.js';
import type { PromptLogprobColumns } from '../../src/protocol/response-columns.js';
import { type Cluster, startCluster } from './harness.js';

let workers: Cluster;
let inline: Cluster;

const COMMON = ['--model', 'tiny', '--max-speed', '--max-num-batched-tokens', '512'];

beforeAll(async () => {
  [workers, inline] = await Promise.all([
    startCluster([...COMMON, '--api-server-count', '2']),
    startCluster([...COMMON, '--output-processing', 'inline']),
  ]);
});
afterAll(async () => {
  await Promise.all([workers?.stop(), inline?.stop()]);
});

const PROMPT = Array.from({ length: 1500 }, (_, i) => (i * 31 + 7) % 990);

function scoring(k: number, extra: Record<string, unknown> = {}) {
  return {
    token_ids: PROMPT,
    sampling_params: { max_tokens: 2, seed: 9, prompt_logprobs: k, ...extra },
  };
}

async function columns(
  url: string,
  k: number,
  packed: boolean,
  accept: 'json' | 'msgpack' = 'json',
): Promise<PromptLogprobColumns> {
  const r = await generate(url, { ...scoring(k), packed }, { accept });
  return decodePromptLogprobs(r.promptLogprobs, PROMPT, k)!;
}

describe('prompt logprobs', () => {
  it('every position of a chunked prefill, alike in every form and on both output paths', async () => {
    const k = 5;
    const legacy = await columns(workers.url, k, false);
    expect([legacy.promptLength, legacy.positions, legacy.width]).toEqual([1500, 1499, 6]);
    for (let i = 0; i < legacy.positions; i++) {
      const row = i * legacy.width;
      expect(legacy.ids[row]).toBe(PROMPT[i + 1]);
      expect(legacy.ranks[row]).toBeGreaterThanOrEqual(1);
      // The k best in rank order, none more likely than the best.
      for (let j = 1; j <= k; j++) {
        expect(legacy.ranks[row + j]).toBe(j);
        expect(legacy.logprobs[row + j]).toBeLessThanOrEqual(legacy.logprobs[row + 1]!);
      }
      // The prompt token is as likely as the candidate of its rank when it is among the best.
      const r = legacy.ranks[row]!;
      if (r <= k) expect(legacy.logprobs[row]).toBe(legacy.logprobs[row + r]);
      else expect(legacy.logprobs[row]).toBeLessThanOrEqual(legacy.logprobs[row + k]!);
    }
    const packed = await columns(workers.url, k, true);
    expect(Array.from(packed.logprobs)).toEqual(
      Array.from({ length: legacy.positions }, (_, i) => legacy.logprobs[i * legacy.width]),
    );
    expect(await columns(workers.url, k, true, 'msgpack')).toEqual(packed);
    expect(await columns(inline.url, k, false)).toEqual(legacy);
    expect(await columns(inline.url, k, true)).toEqual(packed);
    expect(await columns(inline.url, k, true, 'msgpack')).toEqual(packed);
    // k = 0: the prompt token alone, the same values.
    const bare = await columns(workers.url, 0, false);
    expect(bare.width).toBe(1);
    expect(Array.from(bare.logprobs)).toEqual(Array.from(packed.logprobs));
  });

  it('once per request with n > 1, and not at all when not asked', async () => {
    const one = await generate(workers.url, { ...scoring(2), packed: false });
    const three = await generate(workers.url, {
      ...scoring(2, { n: 3 }),
      packed: false,
    });
    expect(three.choices).toHaveLength(3);
    expect(three.promptLogprobs).toEqual(one.promptLogprobs);
    const none = await generate(workers.url, {
      token_ids: PROMPT,
      sampling_params: { max_tokens: 2 },
    });
    expect(none.promptLogprobs).toBeNull();
  });

  it('scoring a rollout sampled at temperature 1 gives back its sampled logprobs', async () => {
    const prompt = PROMPT.slice(0, 40);
    const rollout = await generate(workers.url, {
      token_ids: prompt,
      sampling_params: { max_tokens: 32, temperature: 1, seed: 4, ignore_eos: true, logprobs: 0 },
    });
    const c = rollout.choices[0]!;
    const scored = await generate(workers.url, {
      token_ids: [...prompt, ...c.tokenIds],
      sampling_params: { max_tokens: 1, prompt_logprobs: 0 },
    });
    const all = decodePromptLogprobs(scored.promptLogprobs, [...prompt, ...c.tokenIds], 0)!;
    expect(Array.from(all.logprobs.subarray(prompt.length - 1))).toEqual(Array.from(c.logprobs!));
  });

  it('a stream with prompt_logprobs is a 400 naming the field', async () => {
    const res = await fetch(`${workers.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...scoring(1), stream: true }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe(
      'sampling_params.prompt_logprobs',
    );
  });
});
