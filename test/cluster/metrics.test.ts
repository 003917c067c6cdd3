/**
 * /metrics, logs and process health on a real 2-API-server cluster: the request figures are the
 * whole cluster's whichever API server answers (each answer, and /health's, names it), engine
 * gauges return to 0, a scrape answers during heavy load, counters survive an API server's and the
 * engine's restart, and the logs hold one line per request and a restart's cause, never a line per
 * token.
 */
import { Client, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_SERVER_HEADER } from '../../src/protocol/api-server-header.js';
import { CONTRACT_FAMILIES, type Exposition, parseExposition } from '../obs/prom.js';
import { until } from '../until.js';
import { type Cluster, everyServerHealthy, startCluster } from './harness.js';

const PROMPT = [11, 12, 13, 14, 15, 16, 17];

/** The families for the whole API-server process (issue 11), beyond the contract's. */
const WHOLE_PROCESS_FAMILIES: readonly (readonly [string, string])[] = [
  ['process_cpu_user_seconds_total', 'counter'],
  ['process_cpu_system_seconds_total', 'counter'],
  ['ringserve_thread_gc_seconds_total', 'counter'],
  ['ringserve_thread_gc_pauses_total', 'counter'],
  ['ringserve_thread_gc_pause_max_seconds', 'gauge'],
  ['ringserve_thread_heap_used_bytes', 'gauge'],
];

interface Scrape {
  server: string;
  metrics: Exposition;
}

/** One scrape on a new connection, so node:cluster may hand it to either API server. */
async function scrape(url: string): Promise<Scrape> {
  const client = new Client(url);
  try {
    const res = await client.request({ path: '/metrics', method: 'GET' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toContain('text/plain; version=0.0.4');
    const server = String(res.headers[API_SERVER_HEADER]);
    return { server, metrics: parseExposition(await res.body.text()) };
  } finally {
    await client.close();
  }
}

/**
 * Scrapes until each of the two API servers has answered `times` times (a restarted one answers
 * once it listens again), for at most 15 s; returns every scrape.
 */
async function scrapeBoth(url: string, times = 2): Promise<Scrape[]> {
  const scrapes: Scrape[] = [];
  const count = (k: string) => scrapes.filter((s) => s.server === k).length;
  await until(
    async () => {
      scrapes.push(await scrape(url));
      return { '0': count('0'), '1': count('1') };
    },
    (answered) => answered['0'] >= times && answered['1'] >= times,
    { timeoutMs: 15_000, intervalMs: 10, what: `${times} scrapes answered by each API server` },
  );
  return scrapes;
}

async function generate(url: string, id: string, maxTokens: number, signal?: AbortSignal) {
  const res = await request(`${url}/inference/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': id },
    body: JSON.stringify({
      token_ids: PROMPT,
      sampling_params: { max_tokens: maxTokens, ignore_eos: true, seed: 1, logprobs: 1 },
    }),
    ...(signal === undefined ? {} : { signal }),
  });
  expect(res.statusCode).toBe(200);
  await res.body.dump();
}

const total = async (cluster: Cluster, name: string): Promise<number> =>
  (await scrape(cluster.url)).metrics.value(name);

/**
 * The counter once it has stopped moving (two equal reads 300 ms apart): outputs of requests that
 * just ended may still be in an output ring when the engine already reports nothing running.
 */
async function settled(cluster: Cluster, name: string): Promise<number> {
  let last: number | undefined;
  const read = await until(
    async () => {
      const before = last;
      last = await total(cluster, name);
      return { before, now: last };
    },
    // The first read has nothing to compare with: the second comes 300 ms after it.
    ({ before, now }) => now === before,
    { timeoutMs: 15_000, intervalMs: 300, what: `${name} to stop moving` },
  );
  return read.now;
}

function logLines(cluster: Cluster): Record<string, unknown>[] {
  return cluster
    .log()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

let cluster: Cluster;

beforeAll(async () => {
  cluster = await startCluster([
    '--model',
    'tiny',
    '--max-speed',
    '--api-server-count',
    '2',
    '--log-level',
    'info',
  ]);
});

afterAll(async () => {
  await cluster?.stop();
});

describe('cluster-wide /metrics', () => {
  it('after 10 requests of 50 tokens, every API server reports 500 tokens and 10 length finishes', async () => {
    await Promise.all(Array.from({ length: 10 }, (_, i) => generate(cluster.url, `m${i}`, 50)));
    // 50 tokens are 200 values, under --inline-pack-values' 256: each answer was encoded on its
    // server's main thread, none by a packer (the servers publish their counts every 100 ms).
    const inline = await until(
      async () =>
        (await scrape(cluster.url)).metrics
          .all('ringserve_inline_answers_total')
          .reduce((a, n) => a + n, 0),
      (n) => n === 10,
    );
    expect(inline).toBe(10);
    for (const { metrics: m } of await scrapeBoth(cluster.url)) {
      expect(m.all('ringserve_response_pool_answers_total')).toEqual([0, 0]);
      expect(m.all('ringserve_response_pool_one_off_answers_total')).toEqual([0, 0]);
      expect(m.all('ringserve_response_pool_in_use_bytes')).toHaveLength(2);
      expect(m.value('vllm:generation_tokens_total')).toBe(500);
      expect(m.value('vllm:request_success_total', { finished_reason: 'length' })).toBe(10);
      expect(m.value('vllm:request_success_total', { finished_reason: 'stop' })).toBe(0);
      expect(m.value('vllm:prompt_tokens_total')).toBe(10 * PROMPT.length);
      expect(m.value('vllm:time_to_first_token_seconds_count')).toBe(10);
      expect(m.value('vllm:inter_token_latency_seconds_count')).toBe(490);
      expect(m.value('vllm:e2e_request_latency_seconds_count')).toBe(10);
      expect(m.value('vllm:request_generation_tokens_sum')).toBe(500);
      expect(m.value('vllm:request_generation_tokens_bucket', { le: '50.0' })).toBe(10);
      expect(m.value('vllm:request_generation_tokens_bucket', { le: '20.0' })).toBe(0);
    }
    const running = await until(
      () => total(cluster, 'vllm:num_requests_running'),
      (n) => n === 0,
    );
    expect(running).toBe(0);
  });

  it('has every family of the contract with HELP and TYPE, health for each process', async () => {
    const { metrics: m } = await scrape(cluster.url);
    for (const [name, type] of CONTRACT_FAMILIES) {
      expect(m.help.has(name), name).toBe(true);
      expect(m.types.get(name), name).toBe(type);
    }
    for (const process of ['0', '1', 'engine']) {
      expect(m.value('nodejs_heap_size_used_bytes', { api_server: process })).toBeGreaterThan(1e6);
      expect(m.value('process_resident_memory_bytes', { api_server: process })).toBeGreaterThan(
        1e6,
      );
      expect(m.find('nodejs_eventloop_lag_p99_seconds', { api_server: process })).toBeDefined();
      const gc = { api_server: process, kind: 'minor' };
      expect(m.find('nodejs_gc_duration_seconds_count', gc)).toBeDefined();
    }
    expect(m.value('vllm:cache_config_info', { block_size: '16' })).toBe(1);
  });

  it('names the API server that answered on /health too, each of the two in turn', async () => {
    expect([...(await everyServerHealthy(cluster.url, 2, 15_000))].sort()).toEqual(['0', '1']);
  });

  it('has CPU per process, and GC and heap for every thread of each API server', async () => {
    const threads = (m: Exposition, server: string): string[] =>
      m.samples
        .filter(
          (s) => s.name === 'ringserve_thread_heap_used_bytes' && s.labels.api_server === server,
        )
        .map((s) => s.labels.thread!);
    // pino's transport thread publishes once it has loaded its target: wait until it has.
    const { metrics: m } = await until(
      () => scrape(cluster.url),
      ({ metrics }) => threads(metrics, '0').length >= 4 && threads(metrics, '1').length >= 4,
    );
    for (const [name, type] of WHOLE_PROCESS_FAMILIES) expect(m.types.get(name), name).toBe(type);
    for (const process of ['0', '1', 'engine']) {
      expect(m.value('process_cpu_user_seconds_total', { api_server: process })).toBeGreaterThan(0);
      expect(m.find('process_cpu_system_seconds_total', { api_server: process })).toBeDefined();
    }
    for (const server of ['0', '1']) {
      // At least one packer (--packer-threads >= 1).
      expect(threads(m, server)).toEqual(
        expect.arrayContaining(['log', 'main', 'output', 'packer-1']),
      );
      for (const thread of threads(m, server)) {
        const labels = { api_server: server, thread };
        expect(m.value('ringserve_thread_heap_used_bytes', labels)).toBeGreaterThan(1e6);
        expect(m.value('ringserve_thread_gc_seconds_total', labels)).toBeGreaterThanOrEqual(0);
        expect(m.find('ringserve_thread_gc_pauses_total', labels)).toBeDefined();
        expect(m.find('ringserve_thread_gc_pause_max_seconds', labels)).toBeDefined();
      }
      // The main thread's entry is written from the same GC observer as its kind histograms.
      const main = { api_server: server, thread: 'main' };
      const byKind = m.samples
        .filter(
          (s) => s.name === 'nodejs_gc_duration_seconds_count' && s.labels.api_server === server,
        )
        .reduce((a, s) => a + s.value, 0);
      expect(m.value('ringserve_thread_gc_pauses_total', main)).toBeLessThanOrEqual(byKind);
    }
  });

  it('logs one line per finished request with its figures, and nothing per token', () => {
    const lines = logLines(cluster);
    for (let i = 0; i < 10; i++) {
      const mine = lines.filter((l) => l.msg === 'request finished' && l.request_id === `m${i}`);
      expect(mine).toHaveLength(1);
      expect(mine[0]).toMatchObject({
        status: 200,
        prompt_tokens: PROMPT.length,
        completion_tokens: 50,
        finish_reason: 'length',
        level: 30,
      });
      expect(mine[0]!.api_server === 0 || mine[0]!.api_server === 1).toBe(true);
      expect(mine[0]!.latency_ms).toBeGreaterThanOrEqual(0);
    }
    expect(lines.some((l) => l.msg === 'ringserve configuration')).toBe(true);
    // 500 tokens were generated: a line per token would be hundreds.
    expect(lines.length).toBeLessThan(60);
  });

  it('answers scrapes during heavy load, with counters that only grow', async () => {
    const controllers = Array.from({ length: 48 }, () => new AbortController());
    const load = controllers.map((c, i) =>
      generate(cluster.url, `load${i}`, 4000, c.signal).catch(() => 'aborted'),
    );
    const seen: number[] = [];
    let busy = 0;
    for (let i = 0; i < 20; i++) {
      const { metrics: m } = await scrape(cluster.url);
      seen.push(m.value('vllm:generation_tokens_total'));
      if (m.value('vllm:num_requests_running') > 0) busy++;
      await new Promise((r) => setTimeout(r, 50));
    }
    for (const c of controllers) c.abort();
    await Promise.all(load);
    expect(busy).toBeGreaterThan(0);
    expect(seen).toEqual([...seen].sort((a, b) => a - b));
    expect(seen.at(-1)!).toBeGreaterThan(seen[0]!);
    expect(
      await until(
        () => total(cluster, 'vllm:num_requests_running'),
        (n) => n === 0,
      ),
    ).toBe(0);
  });

  it('keeps counting across an API server restart: totals never go backwards', async () => {
    const before = await settled(cluster, 'vllm:generation_tokens_total');
    const victim = (await cluster.pids()).get('ringserve-api-1')!;
    process.kill(victim, 'SIGKILL');
    await until(
      () => cluster.pids(),
      (p) => (p.get('ringserve-api-1') ?? victim) !== victim,
      { timeoutMs: 15_000 },
    );
    for (const { metrics: m } of await scrapeBoth(cluster.url, 1)) {
      expect(m.value('vllm:generation_tokens_total')).toBe(before);
    }
    await Promise.all([generate(cluster.url, 'after0', 50), generate(cluster.url, 'after1', 50)]);
    for (const { metrics: m } of await scrapeBoth(cluster.url, 1)) {
      expect(m.value('vllm:generation_tokens_total')).toBe(before + 100);
    }
    const restart = logLines(cluster).find(
      (l) => l.msg === 'API server exited; restarting it' && l.api_server === 1,
    );
    expect(restart).toMatchObject({ signal: 'SIGKILL', level: 50 });
    expect(String(restart?.cause)).toContain('SIGKILL');
  });

  it("carries the engine's counters across an engine restart", async () => {
    const before = await settled(cluster, 'vllm:prefix_cache_queries_total');
    expect(before).toBeGreaterThan(0);
    const engine = (await cluster.pids()).get('ringserve-engine')!;
    process.kill(engine, 'SIGKILL');
    await until(
      () => cluster.pids(),
      (p) => (p.get('ringserve-engine') ?? engine) !== engine,
      { timeoutMs: 15_000 },
    );
    expect([...(await everyServerHealthy(cluster.url, 2, 15_000))].sort()).toEqual(['0', '1']);
    expect(await total(cluster, 'vllm:prefix_cache_queries_total')).toBe(before);
    await generate(cluster.url, 'after-engine', 10);
    expect(await total(cluster, 'vllm:prefix_cache_queries_total')).toBe(before + PROMPT.length);
  });
});

describe('/metrics with --output-processing inline (the benchmark baseline)', () => {
  it('records the same request figures on the main thread', async () => {
    const inline = await startCluster([
      '--model',
      'tiny',
      '--max-speed',
      '--output-processing',
      'inline',
    ]);
    try {
      await Promise.all(Array.from({ length: 4 }, (_, i) => generate(inline.url, `i${i}`, 30)));
      const { metrics: m } = await scrape(inline.url);
      expect(m.value('vllm:generation_tokens_total')).toBe(120);
      expect(m.value('vllm:request_success_total', { finished_reason: 'length' })).toBe(4);
      expect(m.value('vllm:prompt_tokens_total')).toBe(4 * PROMPT.length);
      expect(m.value('vllm:time_to_first_token_seconds_count')).toBe(4);
      expect(m.value('vllm:inter_token_latency_seconds_count')).toBe(116);
      expect(m.value('vllm:request_queue_time_seconds_count')).toBe(4);
      // No output worker and no packers: the main thread, and pino's transport once it is up.
      const threads = m.samples
        .filter((s) => s.name === 'ringserve_thread_heap_used_bytes')
        .map((s) => s.labels.thread);
      expect(threads).toContain('main');
      expect(threads.every((t) => t === 'main' || t === 'log')).toBe(true);
    } finally {
      await inline.stop();
    }
  });
});
