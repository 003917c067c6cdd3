/**
 * Data parallelism through the bridge, as processes on loopback: `serve --engine vllm
 * --data-parallel-size 2` with two headless engines (`engine --vllm-protocol --data-parallel-size 2
 * --data-parallel-start-rank 0|1`) dialling one handshake port, and `tiny` being a MoE model, the
 * two ranks form a DP group that steps in lockstep waves (a request on one rank finishes only if
 * the bridge wakes the other with START_DP_WAVE). The answers are those of a bridge with one
 * rank, in every form, with both ranks used (placed by load and pinned by X-data-parallel-rank),
 * and /metrics labels the ranks' figures engine="0" and engine="1". A rank SIGKILLed mid-run
 * fails only its own requests, /health stays 200, and a restarted rank is taken back.
 */
import type { ChildProcess } from 'node:child_process';
import { request } from 'undici';
import { beforeAll, describe, expect, it } from 'vitest';
import { type GenerateResult, generate, generateStream } from '../../src/client/index.js';
import { until } from '../until.js';
import type { Cluster } from './harness.js';
import { healthStatus, startBridgeCluster, startHeadlessEngine } from './vllm-engine-pair.js';

const SIM = ['--model', 'tiny', '--seed', '11', '--max-speed'];
const ENGINE = [...SIM, '--enable-return-sampling-mask'];
// Five processes and the ranks' group on CI's two cores: a rank is declared dead only after 5 s
// of silence (the pair's default here is 1 s), so a busy moment does not detach one.
const BRIDGE = [
  '--model',
  'tiny',
  '--enable-return-sampling-mask',
  '--api-server-count',
  '2',
  '--vllm-ping-timeout-s',
  '5',
];
const PROMPT = Array.from({ length: 23 }, (_, i) => (i * 37 + 5) % 990);

function body(seed: number, maxTokens = 24): Record<string, unknown> {
  return {
    token_ids: PROMPT.map((t) => (t + seed) % 990),
    sampling_params: {
      max_tokens: maxTokens,
      temperature: 0.8,
      top_k: 50,
      seed,
      logprobs: 1,
      return_routed_experts: true,
      return_sampling_mask: true,
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
    start: c.routedExperts?.start,
    finish: c.finishReason,
  }));
}

function rankHeader(rank: number | undefined): Record<string, string> {
  return rank === undefined ? {} : { 'x-data-parallel-rank': String(rank) };
}

/** Every form of one request, decoded; `rank` pins it with X-data-parallel-rank. */
async function allForms(url: string, b: Record<string, unknown>, rank?: number) {
  const headers = rankHeader(rank);
  return {
    packed: arrays(await generate(url, b, { headers })),
    legacy: arrays(await generate(url, { ...b, packed: false }, { headers })),
    msgpack: arrays(
      await generate(url, b, { accept: 'msgpack', bodyEncoding: 'msgpack', headers }),
    ),
    stream: arrays(await generateStream(url, { ...b, stream: true }, { headers }).collect()),
  };
}

async function metricsText(cluster: Cluster): Promise<string> {
  const res = await request(`${cluster.url}/metrics`);
  return res.body.text();
}

/** The value of `name{...engine="rank"...}` in a metrics text, or NaN. */
function rankValue(text: string, name: string, rank: number): number {
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name}{`) && line.includes(`engine="${rank}"`))
      return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return Number.NaN;
}

async function healthy(cluster: Cluster): Promise<void> {
  await until(
    () => healthStatus(cluster),
    (status) => status === 200,
    { timeoutMs: 30_000, what: 'the bridge to be healthy' },
  );
}

/** Both ranks of a 2-rank bridge attached (ringserve_dp_rank_up of each is 1). */
async function bothRanksUp(cluster: Cluster): Promise<void> {
  await until(
    () => metricsText(cluster),
    (text) =>
      rankValue(text, 'ringserve_dp_rank_up', 0) === 1 &&
      rankValue(text, 'ringserve_dp_rank_up', 1) === 1,
    { timeoutMs: 30_000, what: 'both data-parallel ranks to be attached' },
  );
}

function dpEngine(endpoint: string, rank: number, extra: string[] = []): ChildProcess {
  return startHeadlessEngine(endpoint, [
    ...ENGINE,
    '--data-parallel-size',
    '2',
    '--data-parallel-start-rank',
    String(rank),
    ...extra,
  ]);
}

describe('data parallelism through the bridge', () => {
  let one: Cluster;
  let two: Cluster;

  beforeAll(async () => {
    const [single, dual] = await Promise.all([
      startBridgeCluster(BRIDGE),
      startBridgeCluster([...BRIDGE, '--data-parallel-size', '2']),
    ]);
    one = single.cluster;
    two = dual.cluster;
    startHeadlessEngine(single.endpoint, ENGINE, false, 'file');
    for (const rank of [0, 1]) {
      startHeadlessEngine(
        dual.endpoint,
        [...ENGINE, '--data-parallel-size', '2', '--data-parallel-start-rank', String(rank)],
        false,
        'file',
      );
    }
    await Promise.all([healthy(one), healthy(two)]);
    await bothRanksUp(two);
  }, 120_000);

  it('answers as one rank does, in every form, with both ranks used', async () => {
    const seeds = [1, 2, 3, 4, 5, 6];
    // Concurrent, so the least-loaded placement spreads them over both ranks.
    const [single, dual] = await Promise.all([
      Promise.all(seeds.map((seed) => allForms(one.url, body(seed)))),
      Promise.all(seeds.map((seed) => allForms(two.url, body(seed)))),
    ]);
    expect(dual).toEqual(single);
    for (const answer of single) expect(answer.packed[0]!.tokens.length).toBe(24);
    // Placed by load alone, the requests ran on both ranks.
    const placed = await metricsText(two);
    for (const rank of [0, 1])
      expect(rankValue(placed, 'vllm:generation_tokens_total', rank)).toBeGreaterThan(0);
    // Pinned to each rank by the header: the same answers again.
    for (const rank of [0, 1]) {
      expect(await allForms(two.url, body(7), rank)).toEqual(await allForms(one.url, body(7)));
    }
    expect(await healthStatus(two)).toBe(200);
  });

  it('a rank the cluster does not have is a 400 naming the header', async () => {
    const res = await request(`${two.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-data-parallel-rank': '2' },
      body: JSON.stringify(body(1)),
    });
    expect(res.statusCode).toBe(400);
    expect(await res.body.text()).toContain('X-data-parallel-rank');
  });
});

describe('a data-parallel rank dies', () => {
  it('fails only its requests, /health stays 200, and a restarted rank is taken back', async () => {
    const { cluster, endpoint } = await startBridgeCluster([
      ...BRIDGE,
      '--data-parallel-size',
      '2',
    ]);
    // Slow enough that a long request is still running when its rank is killed.
    const slow = ['--no-max-speed', '--speedup', '0.05'];
    dpEngine(endpoint, 0, slow);
    const victim = dpEngine(endpoint, 1, slow);
    await healthy(cluster);
    await bothRanksUp(cluster);
    const long = (seed: number, rank: number) =>
      generate(cluster.url, body(seed, 400), { headers: rankHeader(rank) }).then(
        (r) => ({ status: 200, tokens: r.choices[0]!.tokenIds.length }),
        (error: { status?: number }) => ({ status: error.status ?? 0, tokens: 0 }),
      );
    const survivors = [long(21, 0), long(22, 0)];
    const doomed = [long(23, 1), long(24, 1)];
    await until(
      () => metricsText(cluster),
      (text) =>
        rankValue(text, 'vllm:generation_tokens_total', 0) > 10 &&
        rankValue(text, 'vllm:generation_tokens_total', 1) > 10,
      { timeoutMs: 20_000, what: 'both ranks to be generating' },
    );
    victim.kill('SIGKILL');
    for (const outcome of await Promise.all(doomed)) expect(outcome.status).toBe(503);
    expect(await healthStatus(cluster)).toBe(200);
    for (const outcome of await Promise.all(survivors))
      expect(outcome).toEqual({ status: 200, tokens: 400 });
    // A new request pinned to the dead rank is a 503; one placed freely runs on rank 0.
    expect((await long(25, 1)).status).toBe(503);
    expect((await generate(cluster.url, body(26))).choices[0]!.tokenIds.length).toBe(24);
    dpEngine(endpoint, 1, slow);
    await bothRanksUp(cluster);
    const back = await generate(cluster.url, body(27), { headers: rankHeader(1) });
    expect(back.choices[0]!.tokenIds.length).toBe(24);
    await cluster.stop();
  }, 120_000);
});
