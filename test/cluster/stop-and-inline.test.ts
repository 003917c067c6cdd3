/**
 * Stop strings end a request at the token that completes them, in both output-processing modes,
 * and the inline per-token-object baseline answers exactly what the worker path answers: every
 * form (packed and legacy JSON, msgpack, streams of both JSON forms), with logprobs, sampling
 * masks, routed experts (also from routed_experts_prompt_start) and n > 1.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GenerateResult, generate, generateStream } from '../../src/client/index.js';
import { tokenizerForModel } from '../../src/tokenizer/presets.js';
import { type Cluster, startCluster } from './harness.js';

const PROMPT = [5, 17, 300, 42, 7];
// The text the cluster matches stop strings against: the served (tiny) tokenizer's bytes.
const source = (await tokenizerForModel('tiny')).bytes;

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
  const scratch = new Uint8Array(source.maxTokenBytes);
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

/** The arrays of every choice, and the usage. */
function allArrays(r: GenerateResult) {
  return {
    choices: r.choices.map((c) => ({ index: c.index, ...arrays({ ...r, choices: [c] }) })),
    usage: r.usage,
  };
}

/** A legacy body as JSON, logprobs read as float32 (the paths print them with different digits). */
async function legacyJson(cluster: Cluster, b: Record<string, unknown>) {
  const res = await fetch(`${cluster.url}/inference/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(b),
  });
  expect(res.status).toBe(200);
  const json = (await res.json()) as {
    created: number;
    choices: {
      logprobs: { content: { logprob: number; top_logprobs: { logprob: number }[] }[] };
    }[];
  };
  json.created = 0;
  for (const choice of json.choices) {
    for (const entry of choice.logprobs.content) {
      entry.logprob = Math.fround(entry.logprob);
      for (const t of entry.top_logprobs) t.logprob = Math.fround(t.logprob);
    }
  }
  return json;
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
  it('answer the same arrays in every form, with masks, routing and n > 1', async () => {
    const cases: [number, Record<string, unknown>][] = [
      [11, {}],
      [12, { routed_experts_prompt_start: 3 }],
      [14, { n: 3 }],
    ];
    for (const [seed, params] of cases) {
      const variants: [Record<string, unknown>, 'json' | 'msgpack'][] = [
        [{}, 'json'],
        [{ packed: false }, 'json'],
        [{}, 'msgpack'],
      ];
      for (const [extra, accept] of variants) {
        const a = allArrays(await generate(workers.url, body(seed, extra, params), { accept }));
        const b = allArrays(await generate(inline.url, body(seed, extra, params), { accept }));
        expect(b).toEqual(a);
        for (const c of a.choices) {
          expect(c.weightVersions).toHaveLength(c.tokens.length);
          expect(c.routing.length).toBeGreaterThan(0);
          expect(c.start).toBe(params.routed_experts_prompt_start ?? 0);
        }
      }
      // The legacy body itself, field by field: the same contract from objects as from the writer.
      const legacy = body(seed, { packed: false, request_id: `legacy-${seed}` }, params);
      expect(await legacyJson(inline, legacy)).toEqual(await legacyJson(workers, legacy));
      if (params.n !== undefined) continue; // n > 1 does not stream
      const whole = arrays(await generate(workers.url, body(seed, {}, params)));
      for (const packed of [true, false]) {
        const s = body(seed, { stream: true, packed }, params);
        expect(arrays(await generateStream(inline.url, s).collect())).toEqual(whole);
      }
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
    // Random ids include lone UTF-8 fragments (byte tokens), which decode to U+FFFD: the stop
    // string is four characters of real text, from the middle on.
    const text = prefixes.at(-1)!;
    const stop = text.slice(Math.floor(text.length / 2)).match(/[^\uFFFD\uD800-\uDFFF]{4}/u)?.[0];
    if (stop === undefined)
      throw new Error(`no four characters of text in ${JSON.stringify(text)}`);
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
