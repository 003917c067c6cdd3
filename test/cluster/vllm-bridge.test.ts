/**
 * `ringserve serve --engine vllm` end to end over real ZMQ on loopback, against a small fake vLLM
 * engine built from the codec (test/engine/vllm/fake-vllm-engine.ts): /health is 503 until an
 * engine has registered; tokens, logprobs and routing rows arrive as the engine sent them, in every
 * response form; a client that disconnects aborts the request in the engine; the control plane
 * maps to utility calls; a dead or silent engine fails what is in flight with 503s and a restarted
 * one is taken back without restarting the API servers.
 */
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import {
  checkInvariants,
  type GenerateResult,
  generate,
  generateStream,
} from '../../src/client/index.js';
import {
  expectedExpert,
  expectedToken,
  type FakeEngineOptions,
  FakeVllmEngine,
} from '../engine/vllm/fake-vllm-engine.js';
import { type Cluster, startCluster } from './harness.js';

const PROMPT = [5, 17, 300, 42, 9, 77, 1];
const engines: FakeVllmEngine[] = [];

afterEach(() => {
  for (const e of engines.splice(0)) e.close();
});

async function bridgeCluster(
  extra: string[] = [],
): Promise<{ cluster: Cluster; endpoint: string }> {
  const cluster = await startCluster([
    '--model',
    'tiny',
    '--engine',
    'vllm',
    '--data-parallel-address',
    '127.0.0.1',
    '--data-parallel-rpc-port',
    '0',
    '--vllm-ping-timeout-s',
    '1',
    ...extra,
  ]);
  const match = /vLLM bridge \(protocol [^)]+\) listening on (tcp:\/\/\S+)/.exec(cluster.log());
  expect(match).not.toBeNull();
  return { cluster, endpoint: match![1]! };
}

async function status(cluster: Cluster, path: string): Promise<number> {
  const res = await request(`${cluster.url}${path}`);
  await res.body.dump();
  return res.statusCode;
}

async function until(what: () => Promise<boolean> | boolean, timeoutMs = 15_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await what())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function attach(
  cluster: Cluster,
  endpoint: string,
  options: FakeEngineOptions = {},
): Promise<FakeVllmEngine> {
  const engine = new FakeVllmEngine(options);
  engines.push(engine);
  await engine.connect(endpoint);
  await until(async () => (await status(cluster, '/health')) === 200);
  return engine;
}

function body(maxTokens: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    token_ids: PROMPT,
    sampling_params: {
      max_tokens: maxTokens,
      seed: 3,
      logprobs: 1,
      return_routed_experts: true,
      ...extra,
    },
  };
}

function arrays(r: GenerateResult) {
  const c = r.choices[0]!;
  return {
    tokens: Array.from(c.tokenIds),
    logprobs: Array.from(c.logprobs ?? []),
    routing: Array.from(c.routedExperts?.data ?? []),
    shape: c.routedExperts?.shape,
    start: c.routedExperts?.start,
    finish: c.finishReason,
  };
}

describe('serve --engine vllm', () => {
  it('answers 503 until an engine registers, then serves what the engine sent in every form', async () => {
    const { cluster, endpoint } = await bridgeCluster(['--api-server-count', '2']);
    expect(await status(cluster, '/health')).toBe(503);
    const refused = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body(4)),
    });
    expect(refused.statusCode).toBe(503);
    await refused.body.dump();
    const engine = await attach(cluster, endpoint, { layers: 4 });

    const n = 6;
    const packed = await generate(cluster.url, body(n));
    checkInvariants(packed, PROMPT.length);
    const a = arrays(packed);
    expect(a.tokens).toEqual(Array.from({ length: n }, (_, i) => expectedToken(PROMPT, i)));
    expect(a.logprobs).toEqual(Array.from({ length: n }, (_, i) => -(i + 1) / 16));
    expect(a.finish).toBe('length');
    expect(a.shape).toEqual([PROMPT.length + n - 1, 3, 4]);
    expect(a.start).toBe(0);
    // The engine sent 4 layers (hidden layers); tiny's first is dense, so rows start at layer 1.
    const want: number[] = [];
    for (let pos = 0; pos < PROMPT.length + n - 1; pos++)
      for (let l = 1; l < 4; l++) for (let k = 0; k < 4; k++) want.push(expectedExpert(pos, l, k));
    expect(a.routing).toEqual(want);

    const legacy = arrays(await generate(cluster.url, { ...body(n), packed: false }));
    const msgpack = arrays(
      await generate(cluster.url, body(n), { accept: 'msgpack', bodyEncoding: 'msgpack' }),
    );
    const streamed = await generateStream(cluster.url, { ...body(n), stream: true }).collect();
    expect(legacy).toEqual(a);
    expect(msgpack).toEqual(a);
    expect(arrays(streamed)).toEqual(a);

    // What the engine was sent: max_tokens, the card's EOS ids, the routing start below P.
    const cut = arrays(await generate(cluster.url, body(3, { routed_experts_prompt_start: 7 })));
    expect(cut.start).toBe(7);
    expect(cut.shape![0]).toBe(PROMPT.length + 3 - 1 - 7);
    const sent = engine.adds.at(-1)!.params;
    expect(sent.maxTokens).toBe(3);
    expect(sent.eosTokenId).toBe(999);
    expect(Array.from(sent.stopTokenIds)).toEqual([998]);
    expect(sent.routedExpertsPromptStart).toBe(PROMPT.length - 1);
    const ids = new Set(engine.adds.map((x) => x.requestId));
    expect(ids.size).toBe(engine.adds.length);
  });

  it('refuses sampling masks and prompts over the engine max_model_len with 400s', async () => {
    const { cluster, endpoint } = await bridgeCluster();
    const engine = await attach(cluster, endpoint, { maxModelLen: 64 });
    const long = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body(60)),
    });
    expect(long.statusCode).toBe(400);
    expect(((await long.body.json()) as { error: { param: string } }).error.param).toBe(
      'sampling_params.max_tokens',
    );
    expect(engine.adds).toHaveLength(0);
    const masks = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body(4, { return_sampling_mask: true })),
    });
    expect(masks.statusCode).toBe(400);
    expect(((await masks.body.json()) as { error: { param: string } }).error.param).toBe(
      'sampling_params.return_sampling_mask',
    );
  });

  it('aborts a request in the engine when its client disconnects; control routes are utility calls', async () => {
    const { cluster, endpoint } = await bridgeCluster();
    const engine = await attach(cluster, endpoint);
    const controller = new AbortController();
    const pending = generate(cluster.url, body(4000, { ignore_eos: true }), {
      signal: controller.signal,
    }).catch(() => null);
    await until(() => engine.running === 1);
    controller.abort();
    await pending;
    await until(() => engine.aborts.length === 1 && engine.running === 0);
    expect(engine.aborts[0]).toBe(engine.adds[0]!.requestId);

    for (const path of ['/pause', '/resume', '/reset_prefix_cache']) {
      const res = await request(`${cluster.url}${path}`, { method: 'POST' });
      expect(res.statusCode).toBe(200);
      await res.body.dump();
    }
    const weights = await request(`${cluster.url}/update_weights`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ weight_dir: process.cwd() }),
    });
    expect(weights.statusCode).toBe(200);
    expect(((await weights.body.json()) as { weight_version: number }).weight_version).toBe(1);
    const noDir = await request(`${cluster.url}/update_weights`, { method: 'POST' });
    expect(noDir.statusCode).toBe(400);
    expect(((await noDir.body.json()) as { error: { param: string } }).error.param).toBe(
      'weight_dir',
    );
    const calls = engine.calls.filter((c) => c.method !== 'is_scheduler_paused');
    expect(calls).toEqual([
      { method: 'pause_scheduler', args: ['keep', false] },
      { method: 'resume_scheduler', args: [] },
      { method: 'reset_prefix_cache', args: [] },
      { method: 'collective_rpc', args: ['update_weights_from_path', null, [process.cwd()], null] },
      { method: 'reset_prefix_cache', args: [] },
    ]);
  });

  it('fails in-flight requests with 503 when the engine goes silent or dies, and takes a restarted one back', async () => {
    const { cluster, endpoint } = await bridgeCluster();
    const first = await attach(cluster, endpoint);
    const inFlight = generate(cluster.url, body(4000, { ignore_eos: true })).then(
      () => 0,
      (error: { status?: number }) => error.status ?? -1,
    );
    await until(() => first.running === 1);
    first.close(); // silent, as SIGKILL: only the ping notices
    expect(await inFlight).toBe(503);
    expect(await status(cluster, '/health')).toBe(503);

    const second = await attach(cluster, endpoint);
    const ok = await generate(cluster.url, body(3));
    expect(arrays(ok).tokens).toEqual([0, 1, 2].map((i) => expectedToken(PROMPT, i)));

    const again = generate(cluster.url, body(4000, { ignore_eos: true })).then(
      () => 0,
      (error: { status?: number }) => error.status ?? -1,
    );
    await until(() => second.running === 1);
    await second.dieLoudly();
    expect(await again).toBe(503);
    await until(async () => (await status(cluster, '/health')) === 503);
    await attach(cluster, endpoint);
  });
});
