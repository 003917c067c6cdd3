/**
 * Stop strings end a request at the token that completes them, in both output-processing modes,
 * and the inline per-token-object baseline answers exactly what the worker path answers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GenerateResult, generate, generateStream } from '../../src/client/index.js';
import { tokenByteSource } from '../../src/server/output/detokenizer.js';
import { getPreset } from '../../src/sim/presets.js';
import { type Cluster, startCluster } from './harness.js';

const PROMPT = [5, 17, 300, 42, 7];
const tiny = getPreset('tiny');
const source = tokenByteSource('tiny', tiny.eosTokenIds);

function body(
  seed: number,
  extra: Record<string, unknown> = {},
  params: Record<string, unknown> = {},
) {
  return {
    token_ids: PROMPT,
    sampling_params: {
      max_tokens: 120,
      ignore_eos: true,
      seed,
      logprobs: 1,
      top_p: 0.9,
      return_sampling_mask: true,
      return_routed_experts: true,
      ...params,
    },
    ...extra,
  };
}

function texts(tokens: Int32Array): string[] {
  const scratch = new Uint8Array(64);
  const decoder = new TextDecoder();
  let text = '';
  return Array.from(tokens, (t) => {
    const n = source.write(t, scratch, 0);
    text += decoder.decode(scratch.subarray(0, n), { stream: true });
    return text;
  });
}

function arrays(r: GenerateResult) {
  const c = r.choices[0]!;
  return {
    tokens: Array.from(c.tokenIds),
    logprobs: Array.from(c.logprobs ?? []),
    counts: Array.from(c.mask?.counts ?? []),
    ids: Array.from(c.mask?.ids ?? []),
    routing: Array.from(c.routedExperts?.data ?? []),
    start: c.routedExperts?.start,
    weightVersions: Array.from(c.weightVersions ?? []),
    finish: c.finishReason,
    stop: c.stopReason,
  };
}

let workers: Cluster;
let inline: Cluster;

beforeAll(async () => {
  [workers, inline] = await Promise.all([
    startCluster(['--model', 'tiny', '--max-speed', '--api-server-count', '2']),
    startCluster(['--model', 'tiny', '--max-speed', '--output-processing', 'inline']),
  ]);
});

afterAll(async () => {
  await Promise.all([workers?.stop(), inline?.stop()]);
});

describe('inline baseline and worker path', () => {
  it('answer the same arrays in every form', async () => {
    for (const seed of [11, 12]) {
      const variants: [Record<string, unknown>, 'json' | 'msgpack'][] = [
        [{}, 'json'],
        [{ packed: false }, 'json'],
        [{}, 'msgpack'],
      ];
      for (const [extra, accept] of variants) {
        const a = arrays(await generate(workers.url, body(seed, extra), { accept }));
        const b = arrays(await generate(inline.url, body(seed, extra), { accept }));
        expect(b).toEqual(a);
        expect(a.weightVersions).toHaveLength(a.tokens.length);
      }
      const streamed = await generateStream(inline.url, body(seed, { stream: true })).collect();
      expect(arrays(streamed)).toEqual(arrays(await generate(workers.url, body(seed))));
    }
  });

  it('stream with the same SSE framing: response id, usage events and [DONE]', async () => {
    const usage = { include_usage: true, continuous_usage_stats: true };
    const texts: string[] = [];
    for (const cluster of [workers, inline]) {
      const s = body(13, { stream: true, stream_options: usage, request_id: 'sse-13' });
      const collected = await generateStream(cluster.url, s).collect();
      expect(arrays(collected)).toEqual(arrays(await generate(workers.url, body(13))));
      expect(collected.usage?.completionTokens).toBe(collected.choices[0]!.tokenIds.length);
      const res = await fetch(`${cluster.url}/inference/v1/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body(13, { stream: true, stream_options: usage, request_id: 'sse' })),
      });
      texts.push(await res.text());
    }
    for (const text of texts) {
      const events = text.split('\n\n').filter((e) => e !== '');
      expect(events.at(-1)).toBe('data: [DONE]');
      const last = JSON.parse(events.at(-2)!.slice('data: '.length));
      expect(last).toMatchObject({ request_id: 'generate-tokens-sse', choices: [] });
      for (const event of events.slice(0, -2)) {
        const json = JSON.parse(event.slice('data: '.length));
        expect(json.request_id).toBe('generate-tokens-sse');
        expect(json.usage.prompt_tokens).toBe(PROMPT.length);
      }
    }
  });

  it('n > 1 answers n choices, choice i being the request seeded seed + i, in both paths', async () => {
    for (const cluster of [workers, inline]) {
      for (const accept of ['json', 'msgpack'] as const) {
        const r = await generate(cluster.url, body(31, {}, { n: 3 }), { accept });
        expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2]);
        let total = 0;
        for (let i = 0; i < 3; i++) {
          const single = arrays(await generate(cluster.url, body(31 + i)));
          const choice = arrays({ ...r, choices: [r.choices[i]!] });
          expect(choice).toEqual(single);
          total += single.tokens.length;
        }
        expect(r.usage?.completionTokens).toBe(total);
      }
    }
  });

  it('stop strings end the request at the token that completes them', async () => {
    const full = await generate(workers.url, body(21));
    const prefixes = texts(full.choices[0]!.tokenIds);
    // A stop string taken from the middle of the text; the request must end where it first appears.
    const text = prefixes.at(-1)!;
    const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 4);
    const end = prefixes.findIndex((p) => p.includes(stop));
    expect(end).toBeGreaterThanOrEqual(0);
    expect(end + 1).toBeLessThan(120);
    for (const cluster of [workers, inline]) {
      const r = arrays(await generate(cluster.url, body(21, {}, { stop: [stop] })));
      expect(r.finish).toBe('stop');
      expect(r.stop).toBe(stop);
      expect(r.tokens).toEqual(Array.from(full.choices[0]!.tokenIds.subarray(0, end + 1)));
      const s = await generateStream(
        cluster.url,
        body(21, { stream: true }, { stop: [stop] }),
      ).collect();
      expect(arrays(s).tokens).toEqual(r.tokens);
      expect(s.choices[0]!.finishReason).toBe('stop');
    }
  });
});
