/**
 * /inference/v1/generate end to end on a real cluster (supervisor, engine core, 2 API servers):
 * every form decodes to the same arrays, the packed invariants hold, bad input is a 400 naming the
 * field, and the same seed gives the same tokens whatever the number of API servers.
 */
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  checkInvariants,
  type GenerateResult,
  generate,
  generateStream,
} from '../../src/client/index.js';
import { type Cluster, startCluster } from './harness.js';

const PROMPT = Array.from({ length: 37 }, (_, i) => (i * 37 + 11) % 1000);

function body(seed: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    token_ids: PROMPT,
    sampling_params: {
      max_tokens: 48,
      temperature: 0.8,
      top_p: 0.9,
      top_k: 50,
      seed,
      logprobs: 1,
      ignore_eos: true,
      return_sampling_mask: true,
      return_routed_experts: true,
    },
    ...extra,
  };
}

function arrays(r: GenerateResult) {
  const c = r.choices[0]!;
  return {
    tokens: Array.from(c.tokenIds),
    logprobs: Array.from(c.logprobs ?? []),
    counts: Array.from(c.mask?.counts ?? []),
    ids: Array.from(c.mask?.ids ?? []),
    routing: Array.from(c.routedExperts?.data ?? []),
    shape: c.routedExperts?.shape,
    start: c.routedExperts?.start,
    finish: c.finishReason,
  };
}

let cluster: Cluster;

beforeAll(async () => {
  cluster = await startCluster(['--model', 'tiny', '--max-speed', '--api-server-count', '2']);
});

afterAll(async () => {
  await cluster?.stop();
});

describe('generate on a 2-API-server cluster', () => {
  it('answers packed with every contract field, and the invariants hold', async () => {
    const res = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body(1)),
    });
    expect(res.statusCode).toBe(200);
    const json = (await res.body.json()) as Record<string, unknown>;
    for (const key of [
      'request_id',
      'model',
      'created',
      'choices',
      'usage',
      'prompt_logprobs',
      'kv_transfer_params',
    ]) {
      expect(json).toHaveProperty(key);
    }
    const choice = (json.choices as Record<string, unknown>[])[0]!;
    for (const key of [
      'index',
      'finish_reason',
      'stop_reason',
      'logprobs',
      'token_ids',
      'completion_logprobs',
      'sampling_mask',
      'routed_experts',
    ]) {
      expect(choice).toHaveProperty(key);
    }
    expect(choice.logprobs).toBeNull();
    expect(choice.finish_reason).toBe('length');
    const result = await generate(cluster.url, body(1));
    checkInvariants(result, PROMPT.length);
    const a = arrays(result);
    expect(a.tokens).toHaveLength(48);
    // Rows end at len(prompt) + len(completion) - 1 (the last sampled token is never forwarded).
    expect(a.shape![0]).toBe(PROMPT.length + 48 - 1);
    expect(a.start).toBe(0);
  });

  it('packed, legacy, msgpack and streaming decode to identical arrays', async () => {
    const packed = arrays(await generate(cluster.url, body(2)));
    const legacy = arrays(await generate(cluster.url, body(2, { packed: false })));
    const msgpack = arrays(
      await generate(cluster.url, body(2), { accept: 'msgpack', bodyEncoding: 'msgpack' }),
    );
    const stream = generateStream(
      cluster.url,
      body(2, { stream: true, stream_options: { include_usage: true } }),
    );
    const streamed = await stream.collect();
    checkInvariants(streamed, PROMPT.length);
    expect(legacy).toEqual(packed);
    expect(msgpack).toEqual(packed);
    expect(arrays(streamed)).toEqual(packed);
    expect(streamed.usage?.completionTokens).toBe(48);
  });

  it('the legacy form lists the sampled token first, then the best candidates (logprobs k)', async () => {
    const k = 4;
    const res = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        token_ids: PROMPT,
        packed: false,
        sampling_params: { max_tokens: 32, temperature: 1, seed: 5, logprobs: k, ignore_eos: true },
      }),
    });
    expect(res.statusCode).toBe(200);
    type Entry = { token: string; logprob: number; bytes: null };
    const json = (await res.body.json()) as {
      choices: {
        token_ids: number[];
        logprobs: { content: (Entry & { top_logprobs: Entry[] })[] };
      }[];
    };
    const c = json.choices[0]!;
    expect(c.logprobs.content).toHaveLength(32);
    let sampledOutsideTop = 0;
    c.logprobs.content.forEach((e, i) => {
      expect(e.token).toBe(`token_id:${c.token_ids[i]}`);
      const top = e.top_logprobs;
      // vLLM: max(k, 1) entries of {sampled, the k best}, each token once.
      expect(top).toHaveLength(k);
      expect(top[0]).toEqual({ token: e.token, logprob: e.logprob, bytes: null });
      expect(new Set(top.map((t) => t.token)).size).toBe(k);
      for (let j = 2; j < k; j++) expect(top[j]!.logprob).toBeLessThanOrEqual(top[j - 1]!.logprob);
      // The best candidate is at least as likely as the sampled token.
      expect(top[1]!.logprob).toBeGreaterThanOrEqual(
        Math.min(e.logprob, ...top.slice(1).map((t) => t.logprob)),
      );
      for (const t of top) expect(t.logprob).toBeLessThanOrEqual(0);
      if (top.slice(1).every((t) => t.logprob > e.logprob)) sampledOutsideTop++;
    });
    // A temperature-1 draw from the simulator's spread-out distribution leaves the top k at times.
    expect(sampledOutsideTop).toBeGreaterThan(0);
  });

  it('routed_experts_prompt_start skips leading prompt rows', async () => {
    const full = arrays(await generate(cluster.url, body(3)));
    const r = await generate(cluster.url, {
      ...body(3),
      sampling_params: { ...(body(3).sampling_params as object), routed_experts_prompt_start: 10 },
    });
    const cut = arrays(r);
    checkInvariants(r, PROMPT.length);
    expect(cut.start).toBe(10);
    expect(cut.shape![0]).toBe(full.shape![0] - 10);
    const rowIds = full.shape![1] * full.shape![2];
    expect(cut.routing).toEqual(full.routing.slice(10 * rowIds));
  });

  it('bad input is a 400 naming the field, never a 500', async () => {
    const cases: [unknown, string][] = [
      [{ token_ids: [], sampling_params: {} }, 'token_ids'],
      [{ token_ids: [1, 2, 5000], sampling_params: {} }, 'token_ids[2]'],
      [{ token_ids: [1], sampling_params: { top_p: 0 } }, 'sampling_params.top_p'],
      [{ token_ids: [1], sampling_params: { temperature: 3 } }, 'sampling_params.temperature'],
      [{ token_ids: [1], sampling_params: { max_tokens: 0 } }, 'sampling_params.max_tokens'],
      [{ token_ids: 'abc', sampling_params: {} }, 'token_ids'],
      [{ token_ids: [1] }, 'sampling_params'],
      [{ token_ids: [1], sampling_params: { n: 2 }, stream: true }, 'sampling_params.n'],
      [
        { token_ids: [1], sampling_params: { prompt_logprobs: 1 }, stream: true },
        'sampling_params.prompt_logprobs',
      ],
      [{ token_ids: [1], sampling_params: {}, priority: 3 }, 'priority'],
    ];
    for (const [payload, param] of cases) {
      const res = await request(`${cluster.url}/inference/v1/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(payload),
      });
      const json = (await res.body.json()) as { error: { param: string; code: number } };
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(json.error.code).toBe(400);
      expect(json.error.param).toBe(param);
    }
    const broken = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"token_ids": [1,',
    });
    expect(broken.statusCode).toBe(400);
    await broken.body.dump();
    const model = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...body(1), model: 'no-such-model' }),
    });
    expect(model.statusCode).toBe(404);
    await model.body.dump();
    const empty = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '',
    });
    expect(empty.statusCode).toBe(400);
    await empty.body.dump();
    // Control calls often come as JSON with no body at all: that is "no body", not bad JSON.
    const resume = await request(`${cluster.url}/resume`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '',
    });
    expect(resume.statusCode).toBe(200);
    expect(await resume.body.json()).toEqual({ status: 'resumed' });
    const route = await request(`${cluster.url}/no/such/route`);
    expect(route.statusCode).toBe(404);
    expect(((await route.body.json()) as { error: { code: number } }).error.code).toBe(404);
  });

  it('serves /health, /liveness, /v1/models and /load', async () => {
    const health = await request(`${cluster.url}/health`);
    expect(health.statusCode).toBe(200);
    await health.body.dump();
    const live = await request(`${cluster.url}/liveness`);
    expect(await live.body.json()).toEqual({ status: 'ok' });
    const models = (await (await request(`${cluster.url}/v1/models`)).body.json()) as {
      data: { id: string; max_model_len: number }[];
    };
    expect(models.data[0]!.id).toBe('sim-tiny');
    const load = (await (await request(`${cluster.url}/load`)).body.json()) as {
      server_load: number;
    };
    expect(load.server_load).toBe(0);
  });
});

describe('determinism across cluster shapes', () => {
  it('gives the same outputs for the same seed with 1 and 3 API servers', async () => {
    const reference = await Promise.all(
      [5, 6, 7].map(async (s) => arrays(await generate(cluster.url, body(s)))),
    );
    for (const count of ['1', '3']) {
      const other = await startCluster([
        '--model',
        'tiny',
        '--max-speed',
        '--api-server-count',
        count,
      ]);
      try {
        const got = await Promise.all(
          [5, 6, 7].map(async (s) => arrays(await generate(other.url, body(s)))),
        );
        expect(got).toEqual(reference);
      } finally {
        await other.stop();
      }
    }
  });
});
