/**
 * The bridge against the simulator speaking vLLM's protocol (`serve --engine vllm` + `engine
 * --vllm-protocol`, real processes, real ZMQ on loopback) gives, for the same seeds, the token ids,
 * logprobs, sampling masks (stock new_sampling_mask: both sides run with
 * --enable-return-sampling-mask) and routing rows of the default in-process simulator (`serve`), in
 * every response form and with two API servers; n fan-out (childSeed = seed + i) and stop strings,
 * done in the API server, agree too. An engine of every layout is detected and served (`auto`).
 * Then the engine is SIGKILLed mid-request: the request in flight gets a 503, /health 503, and a
 * restarted engine is taken back by the same API servers.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GenerateResult, generate, generateStream } from '../../src/client/index.js';
import { until } from '../until.js';
import { type Cluster, startCluster } from './harness.js';
import { healthStatus, startBridgeCluster, startHeadlessEngine } from './vllm-engine-pair.js';

const SIM = ['--model', 'tiny', '--seed', '11', '--max-speed'];
/** The headless engine's flags: the simulator's, and vLLM's engine-wide sampling masks. */
const ENGINE = [...SIM, '--enable-return-sampling-mask'];
const PROMPT = Array.from({ length: 29 }, (_, i) => (i * 53 + 7) % 990);

function body(seed: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    token_ids: PROMPT,
    sampling_params: {
      max_tokens: 40,
      temperature: 0.9,
      top_p: 0.95,
      top_k: 64,
      seed,
      logprobs: 1,
      return_routed_experts: true,
      return_sampling_mask: true,
      ...extra,
    },
  };
}

function arrays(r: GenerateResult) {
  return r.choices.map((c) => ({
    tokens: Array.from(c.tokenIds),
    logprobs: Array.from(c.logprobs ?? []),
    maskCounts: Array.from(c.mask?.counts ?? []),
    maskIds: Array.from(c.mask?.ids ?? []),
    routing: Array.from(c.routedExperts?.data ?? []),
    shape: c.routedExperts?.shape,
    start: c.routedExperts?.start,
    finish: c.finishReason,
    stop: c.stopReason,
  }));
}

/** Every form of the same request, decoded. */
async function allForms(url: string, b: Record<string, unknown>) {
  return {
    packed: arrays(await generate(url, b)),
    legacy: arrays(await generate(url, { ...b, packed: false })),
    msgpack: arrays(await generate(url, b, { accept: 'msgpack', bodyEncoding: 'msgpack' })),
    stream: arrays(await generateStream(url, { ...b, stream: true }).collect()),
  };
}

let sim: Cluster;
let bridge: Cluster;
let endpoint: string;

beforeAll(async () => {
  sim = await startCluster([...SIM, '--api-server-count', '2']);
  ({ cluster: bridge, endpoint } = await startBridgeCluster([
    '--model',
    'tiny',
    '--api-server-count',
    '2',
    '--enable-return-sampling-mask',
  ]));
}, 120_000);

afterAll(async () => {
  await Promise.all([sim?.stop(), bridge?.stop()]);
});

describe('serve --engine vllm + engine --vllm-protocol', () => {
  it('matches the in-process simulator for the same seeds, in every form, with 2 API servers', async () => {
    expect(await healthStatus(bridge)).toBe(503);
    startHeadlessEngine(endpoint, ENGINE);
    await until(
      () => healthStatus(bridge),
      (status) => status === 200,
      { timeoutMs: 30_000 },
    );
    for (const seed of [1, 2, 3]) {
      const want = await allForms(sim.url, body(seed));
      const got = await allForms(bridge.url, body(seed));
      expect(want.legacy).toEqual(want.packed);
      expect(got).toEqual(want);
      expect(got.packed[0]!.tokens.length).toBeGreaterThan(0);
      expect(got.packed[0]!.maskIds.length).toBeGreaterThan(0);
      expect(got.packed[0]!.routing.length).toBeGreaterThan(0);
    }
    // Natural stops (EOS), a later routing start, n fan-out and stop strings.
    const cases = [
      body(4, { max_tokens: 400 }),
      body(5, { routed_experts_prompt_start: 20 }),
      body(6, { routed_experts_prompt_start: 29 }),
      body(7, { n: 3 }),
      body(8, { max_tokens: 200, stop_token_ids: [17, 300, 512] }),
    ];
    for (const b of cases) {
      const want = arrays(await generate(sim.url, b));
      expect(arrays(await generate(bridge.url, b))).toEqual(want);
    }
  });

  it.each(['0.22', '0.26', '0.28', '0.29'])(
    'an engine speaking layout %s is detected and answers as the simulator does',
    async (version) => {
      await until(
        () => healthStatus(bridge),
        (status) => status === 503,
        { timeoutMs: 30_000 },
      );
      const masks = version >= '0.28';
      startHeadlessEngine(endpoint, [...(masks ? ENGINE : SIM), '--vllm-version', version]);
      await until(
        () => healthStatus(bridge),
        (status) => status === 200,
        { timeoutMs: 30_000 },
      );
      const b = body(20, masks ? {} : { return_sampling_mask: false });
      const want = arrays(await generate(sim.url, b));
      expect(arrays(await generate(bridge.url, b))).toEqual(want);
      expect(bridge.log()).toContain(`speaks layout ${version} `);
    },
  );

  it('fails the request in flight with 503 when the engine is SIGKILLed, and takes a new one back', async () => {
    // The previous test's engine was killed after it: the bridge notices (ping), then a new one.
    await until(
      () => healthStatus(bridge),
      (status) => status === 503,
      { timeoutMs: 30_000 },
    );
    // tiny's steps are ~1 ms, and an engine does not sleep a rest under 1 ms: at --speedup 1 the
    // 3000 tokens took under 300 ms on Node 24. At 0.02 a step is ~50 ms, 3000 of them ~150 s.
    const first = startHeadlessEngine(endpoint, [
      ...ENGINE.filter((a) => a !== '--max-speed'),
      '--speedup',
      '0.02',
    ]);
    await until(
      () => healthStatus(bridge),
      (status) => status === 200,
      { timeoutMs: 30_000 },
    );
    const inFlight = generate(bridge.url, body(9, { max_tokens: 3000, ignore_eos: true })).then(
      () => 0,
      (error: { status?: number }) => error.status ?? -1,
    );
    await new Promise((r) => setTimeout(r, 300));
    first.kill('SIGKILL');
    expect(await inFlight).toBe(503);
    expect(await healthStatus(bridge)).toBe(503);
    startHeadlessEngine(endpoint, ENGINE);
    await until(
      () => healthStatus(bridge),
      (status) => status === 200,
      { timeoutMs: 30_000 },
    );
    const want = arrays(await generate(sim.url, body(10)));
    expect(arrays(await generate(bridge.url, body(10)))).toEqual(want);
  });
  it('pause holds a request, resume finishes it, update_weights moves both paths to the same weights', async () => {
    // Each test's engine is killed after it: the bridge notices (ping), then this test's dials in.
    await until(
      () => healthStatus(bridge),
      (status) => status === 503,
      { timeoutMs: 30_000 },
    );
    startHeadlessEngine(endpoint, ENGINE);
    await until(
      () => healthStatus(bridge),
      (status) => status === 200,
      { timeoutMs: 30_000 },
    );
    // Paused, a request makes no progress (its HTTP answer does not come); resumed, it completes
    // with the tokens it would have had.
    const paused = await request(`${bridge.url}/pause`, { method: 'POST' });
    expect(paused.statusCode).toBe(200);
    await paused.body.dump();
    let answered = false;
    const held = generate(bridge.url, body(12)).then((r) => {
      answered = true;
      return arrays(r);
    });
    await new Promise((r) => setTimeout(r, 500));
    expect(answered).toBe(false);
    const resumed = await request(`${bridge.url}/resume`, { method: 'POST' });
    expect(resumed.statusCode).toBe(200);
    await resumed.body.dump();
    expect(await held).toEqual(arrays(await generate(sim.url, body(12))));

    const old = arrays(await generate(sim.url, body(13)));
    const dir = mkdtempSync(join(tmpdir(), 'ringserve-weights-'));
    writeFileSync(join(dir, 'ringserve-weights.json'), JSON.stringify({ version: 5 }));
    try {
      for (const url of [sim.url, bridge.url]) {
        const res = await request(`${url}/update_weights`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ weight_dir: dir }),
        });
        expect(res.statusCode).toBe(200);
        expect(((await res.body.json()) as { weight_version: number }).weight_version).toBe(5);
      }
      const want = arrays(await generate(sim.url, body(13)));
      expect(want[0]!.tokens).not.toEqual(old[0]!.tokens);
      expect(arrays(await generate(bridge.url, body(13)))).toEqual(want);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
