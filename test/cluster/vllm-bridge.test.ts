/**
 * `ringserve serve --engine vllm` end to end over real ZMQ on loopback, against an independent
 * headless vLLM engine (test/engine/vllm/mirror/, written from vLLM's structs, importing nothing
 * of src/): /health is 503 until an engine has registered; tokens, logprobs, routing rows and
 * sampling masks arrive as the engine sent them, in every response form, with /health 200
 * throughout; a client that disconnects aborts the request in the engine; the control plane maps
 * to utility calls; a dead or silent engine fails what is in flight with 503s and a restarted one
 * is taken back without restarting the API servers.
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
  expertAt,
  logprobAt,
  MirrorEngine,
  type MirrorEngineOptions,
  maskRowAt,
  promptSum,
  tokenAt,
} from '../engine/vllm/mirror/engine.js';
import { until } from '../until.js';
import { type Cluster, startCluster } from './harness.js';

const PROMPT = [5, 17, 300, 42, 9, 77, 1];
/** The mirror engine's vocabulary: tiny's 1000 ids. */
const VOCAB = 1000;
const engines: MirrorEngine[] = [];
/** The bridge notices an engine (or its loss, by the 5 s ping) within a few seconds. */
const BRIDGE_WAIT = { timeoutMs: 15_000 };

afterEach(async () => {
  for (const e of engines.splice(0)) await e.close();
});

const expectedToken = (prompt: readonly number[], i: number): number =>
  tokenAt(promptSum(prompt), i, VOCAB);
/** Tiny's routing rows: 4 hidden layers, the first dense, top-4 of 16 experts. */
const expectedExpert = (pos: number, layer: number, k: number): number =>
  expertAt(pos, layer, k, 16);

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
    '5',
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

async function attach(
  cluster: Cluster,
  endpoint: string,
  options: Partial<MirrorEngineOptions> = {},
): Promise<MirrorEngine> {
  const engine = new MirrorEngine({
    era: '0.33',
    layers: 4,
    topk: 4,
    numExperts: 16,
    vocab: VOCAB,
    returnRoutedExperts: true,
    ...options,
  });
  engines.push(engine);
  await engine.connect(endpoint);
  await until(
    () => status(cluster, '/health'),
    (code) => code === 200,
    BRIDGE_WAIT,
  );
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

/** POSTs a generate body; its status and, for an error, the field the error names. */
async function post(cluster: Cluster, b: Record<string, unknown>) {
  const res = await request(`${cluster.url}/inference/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(b),
  });
  const json = (await res.body.json()) as { error?: { param: string } };
  return { status: res.statusCode, param: json.error?.param ?? null };
}

/** Polls /health every 20 ms until stop(); counts the answers that were not 200. */
function healthProbe(cluster: Cluster) {
  let failed = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      if ((await status(cluster, '/health')) !== 200) failed++;
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return { failed };
    },
  };
}

/** The choice's sampling mask, one id list per token (empty when the answer has none). */
function masksOf(r: GenerateResult): number[][] {
  const m = r.choices[0]!.mask;
  if (m === null) return [];
  const rows: number[][] = [];
  let at = 0;
  for (const n of m.counts) {
    rows.push(Array.from(m.ids.subarray(at, at + n)).sort((a, b) => a - b));
    at += n;
  }
  return rows;
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
    expect(a.logprobs).toEqual(Array.from({ length: n }, (_, i) => logprobAt(i)));
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
    const last = engine.adds.at(-1)!;
    expect(last.length).toBe(22); // the 0.33 EngineCoreRequest: the layout detected
    const sent = last.request.sampling_params!;
    expect(sent.max_tokens).toBe(3);
    expect(sent._eos_token_id).toBe(999);
    expect(sent.stop_token_ids).toEqual([998]);
    expect(sent.routed_experts_prompt_start).toBe(PROMPT.length - 1);
    const ids = new Set(engine.adds.map((x) => x.request.request_id));
    expect(ids.size).toBe(engine.adds.length);
    const metrics = await (await request(`${cluster.url}/metrics`)).body.text();
    expect(metrics).toMatch(/ringserve_vllm_engine_info\{[^}]*vllm_layout="0\.33"[^}]*\} 1/);
  });

  it('refuses sampling masks without --enable-return-sampling-mask, and prompts over the engine max_model_len, with 400s', async () => {
    const { cluster, endpoint } = await bridgeCluster();
    const engine = await attach(cluster, endpoint, { maxModelLen: 64 });
    const long = await post(cluster, body(60));
    expect(long.status).toBe(400);
    expect(long.param).toBe('sampling_params.max_tokens');
    expect(engine.adds).toHaveLength(0);
    const masks = await post(cluster, body(4, { return_sampling_mask: true }));
    expect(masks.status).toBe(400);
    expect(masks.param).toBe('sampling_params.return_sampling_mask');
  });

  it('with --enable-return-sampling-mask: stock masks in every form, /health 200 throughout, greedy and top_k-less sampling refused', async () => {
    const { cluster, endpoint } = await bridgeCluster(['--enable-return-sampling-mask']);
    await attach(cluster, endpoint, { returnSamplingMask: true });
    const probe = healthProbe(cluster);
    const n = 5;
    const asked = body(n, { return_sampling_mask: true, temperature: 1, top_k: 20 });
    const results = [
      await generate(cluster.url, asked),
      await generate(cluster.url, { ...asked, packed: false }),
      await generate(cluster.url, asked, { accept: 'msgpack', bodyEncoding: 'msgpack' }),
      await generateStream(cluster.url, { ...asked, stream: true }).collect(),
    ];
    const sum = promptSum(PROMPT);
    const want = Array.from({ length: n }, (_, i) => maskRowAt(tokenAt(sum, i, VOCAB), i, VOCAB));
    for (const r of results) {
      checkInvariants(r, PROMPT.length);
      expect(arrays(r).tokens).toEqual(
        Array.from({ length: n }, (_, i) => expectedToken(PROMPT, i)),
      );
      expect(masksOf(r)).toEqual(want);
      expect(arrays(r).routing.length).toBeGreaterThan(0);
    }
    // Without asking: no masks in the answer, though the engine sends them for every request.
    expect(masksOf(await generate(cluster.url, body(n, { top_k: 20 })))).toEqual([]);
    const greedy = await post(cluster, body(4, { temperature: 0, top_k: 20 }));
    expect([greedy.status, greedy.param]).toEqual([400, 'sampling_params.temperature']);
    const noTopK = await post(cluster, body(4, { temperature: 1 }));
    expect([noTopK.status, noTopK.param]).toEqual([400, 'sampling_params.top_k']);
    expect(await probe.stop()).toEqual({ failed: 0 });
  });

  it('an engine no layout fits: /health and requests answer 503 saying what was seen', async () => {
    const { cluster, endpoint } = await bridgeCluster();
    const engine = new MirrorEngine({ era: '0.29', registration: { max_model_len: undefined } });
    engines.push(engine);
    await engine.connect(endpoint);
    const health = async () => {
      const res = await request(`${cluster.url}/health`);
      const text = await res.body.text();
      return { status: res.statusCode, text };
    };
    const h = await until(health, (answer) => answer.text.includes('max_model_len'), BRIDGE_WAIT);
    expect(h.status).toBe(503);
    const error = (JSON.parse(h.text) as { error: { message: string; code: number } }).error;
    expect(error.code).toBe(503);
    expect(error.message).toMatch(/registration did not decode.*max_model_len.*layouts: 0\.33/);
    const refused = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body(2)),
    });
    expect(refused.statusCode).toBe(503);
    expect(await refused.body.text()).toMatch(/max_model_len/);
  });

  it('aborts a request in the engine when its client disconnects; control routes are utility calls', async () => {
    const { cluster, endpoint } = await bridgeCluster();
    const engine = await attach(cluster, endpoint);
    const controller = new AbortController();
    const pending = generate(cluster.url, body(4000, { ignore_eos: true }), {
      signal: controller.signal,
    }).catch(() => null);
    await until(
      () => engine.running,
      (n) => n === 1,
      BRIDGE_WAIT,
    );
    controller.abort();
    await pending;
    await until(
      () => ({ aborts: engine.aborts.length, running: engine.running }),
      (e) => e.aborts === 1 && e.running === 0,
      BRIDGE_WAIT,
    );
    expect(engine.aborts[0]).toBe(engine.adds[0]!.request.request_id);

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
    // No directory (NCCL, NIXL): passed on as null, the frontend host never looks at a path.
    const noDir = await request(`${cluster.url}/update_weights`, { method: 'POST' });
    expect(noDir.statusCode).toBe(200);
    await noDir.body.dump();
    const elsewhere = await request(`${cluster.url}/update_weights`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ weight_dir: '/only/on/the/engine/host' }),
    });
    expect(elsewhere.statusCode).toBe(200);
    await elsewhere.body.dump();
    const calls = engine.calls
      .filter((c) => c.method !== 'is_scheduler_paused')
      .map(({ method, args }) => ({ method, args }));
    expect(calls).toEqual([
      { method: 'pause_scheduler', args: ['keep', false] },
      { method: 'resume_scheduler', args: [] },
      { method: 'reset_prefix_cache', args: [] },
      { method: 'collective_rpc', args: ['update_weights_from_path', null, [process.cwd()], null] },
      { method: 'reset_prefix_cache', args: [] },
      { method: 'collective_rpc', args: ['update_weights_from_path', null, [null], null] },
      { method: 'reset_prefix_cache', args: [] },
      {
        method: 'collective_rpc',
        args: ['update_weights_from_path', null, ['/only/on/the/engine/host'], null],
      },
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
    await until(
      () => first.running,
      (n) => n === 1,
      BRIDGE_WAIT,
    );
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
    await until(
      () => second.running,
      (n) => n === 1,
      BRIDGE_WAIT,
    );
    await second.dieLoudly();
    expect(await again).toBe(503);
    await until(
      () => status(cluster, '/health'),
      (code) => code === 503,
      BRIDGE_WAIT,
    );
    await attach(cluster, endpoint);
  });
});
