/**
 * --inline-pack-values: an answer small enough is encoded on the API server's main thread instead of
 * by a packer. Two clusters of the same seeded model, one with the default bound and one with 0
 * (every answer to a packer), answer the same requests in every form with the same bytes, and each
 * counts its answers where they were encoded: small ones inline, large ones in the response pool.
 */
import { pack, unpack } from 'msgpackr';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseExposition } from '../obs/prom.js';
import { until } from '../until.js';
import { type Cluster, startCluster } from './harness.js';

const PROMPT = [21, 22, 23, 24, 25, 26, 27, 28, 29];

interface Call {
  name: string;
  path: string;
  body: Record<string, unknown>;
  msgpack?: boolean;
}

const generate = (maxTokens: number, extra: Record<string, unknown> = {}) => ({
  token_ids: PROMPT,
  sampling_params: { max_tokens: maxTokens, ignore_eos: true, seed: 5, logprobs: 1, ...extra },
});

/** Small answers (at most 256 values), then one over the bound. */
const SMALL: readonly Call[] = [
  { name: 'packed JSON', path: '/inference/v1/generate', body: generate(16) },
  { name: 'msgpack', path: '/inference/v1/generate', body: generate(16), msgpack: true },
  {
    name: 'legacy with top candidates',
    path: '/inference/v1/generate',
    body: { ...generate(12, { logprobs: 3 }), packed: false },
  },
  {
    name: 'completions, n = 2',
    path: '/v1/completions',
    body: { model: 'sim-tiny', prompt: PROMPT, max_tokens: 8, n: 2, seed: 3, logprobs: 2 },
  },
  {
    name: 'chat',
    path: '/v1/chat/completions',
    body: {
      model: 'sim-tiny',
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 12,
      seed: 4,
    },
  },
];
const LARGE: Call = {
  name: 'packed JSON over the bound',
  path: '/inference/v1/generate',
  body: generate(100),
};

async function call(cluster: Cluster, c: Call, id: string): Promise<unknown> {
  const res = await request(`${cluster.url}${c.path}`, {
    method: 'POST',
    headers: {
      'content-type': c.msgpack ? 'application/msgpack' : 'application/json',
      accept: c.msgpack ? 'application/msgpack' : 'application/json',
      'x-request-id': id,
    },
    body: c.msgpack ? pack(c.body) : JSON.stringify(c.body),
  });
  const bytes = Buffer.from(await res.body.arrayBuffer());
  expect(res.statusCode, `${c.name}: ${bytes.toString('utf8', 0, 300)}`).toBe(200);
  return withoutClock(c.msgpack ? unpack(bytes) : JSON.parse(bytes.toString('utf8')));
}

/** The answer without `created` (the second it was made), which two clusters need not share. */
function withoutClock(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutClock);
  if (value instanceof Uint8Array || value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) if (k !== 'created') out[k] = withoutClock(v);
  return out;
}

/** A counter's total over the API servers, once the servers have published it (every 100 ms). */
async function counter(cluster: Cluster, name: string, expected: number): Promise<number> {
  return until(
    async () => {
      const res = await request(`${cluster.url}/metrics`);
      return parseExposition(await res.body.text())
        .all(name)
        .reduce((a, n) => a + n, 0);
    },
    (n) => n === expected,
    { timeoutMs: 10_000, what: `${name} to read ${expected}` },
  );
}

let inline: Cluster;
let packers: Cluster;

beforeAll(async () => {
  const flags = ['--model', 'tiny', '--max-speed', '--api-server-count', '1'];
  [inline, packers] = await Promise.all([
    startCluster(flags),
    startCluster([...flags, '--inline-pack-values', '0']),
  ]);
});

afterAll(async () => {
  await Promise.all([inline?.stop(), packers?.stop()]);
});

describe('--inline-pack-values', () => {
  it('answers every form with the same bytes whether the main thread or a packer encodes it', async () => {
    for (const [i, c] of [...SMALL, LARGE].entries()) {
      const id = `inline-pack-${i}`;
      const [a, b] = await Promise.all([call(inline, c, id), call(packers, c, id)]);
      expect(a, c.name).toEqual(b);
    }
    const calls = SMALL.length + 1;
    // The default bound: every small answer on the main thread, the large one in the pool.
    expect(await counter(inline, 'ringserve_inline_answers_total', SMALL.length)).toBe(
      SMALL.length,
    );
    expect(await counter(inline, 'ringserve_response_pool_answers_total', 1)).toBe(1);
    // 0: every answer through a packer.
    expect(await counter(packers, 'ringserve_response_pool_answers_total', calls)).toBe(calls);
    expect(await counter(packers, 'ringserve_inline_answers_total', 0)).toBe(0);
  });
});
