/**
 * `ringserve router` in front of real --role prefill and --role decode instances, for what is not
 * the generate route: /v1/completions and /v1/chat/completions through the P/D pair answer what a
 * colocated instance with the same seeds answers (the decode instance imported the prompts' KV),
 * streamed too; control routes fan out to both instances; a decode instance added while serving
 * takes sessions, and removed, is drained and dropped. Every process is stopped after its test or
 * the file (harness.ts, pd-helpers.ts), whatever happened.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { type Cluster, startCluster } from './harness.js';
import { counterValue, startRouter } from './pd-helpers.js';

const COMMON = ['--model', 'tiny', '--max-speed', '--max-model-len', '8192'];

let colocated: Cluster;
let prefill: Cluster;
let decode: Cluster;
let routerUrl: string;

beforeAll(async () => {
  [colocated, prefill, decode] = await Promise.all([
    startCluster(COMMON),
    startCluster([...COMMON, '--role', 'prefill', '--kv-transfer-timeout-s', '5']),
    startCluster([...COMMON, '--role', 'decode']),
  ]);
  routerUrl = (await startRouter([prefill.url], [decode.url])).url;
});

async function post(base: string, path: string, body: unknown, headers: object = {}) {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

/** What must match between a routed and a colocated answer (ids and timestamps may differ). */
function choicesOf(text: string): unknown {
  const answer = JSON.parse(text) as { choices: unknown; usage: { completion_tokens: number } };
  return { choices: answer.choices, completion: answer.usage.completion_tokens };
}

/** The concatenated delta content of a chat stream, checked to end with [DONE]. */
function streamedContent(text: string): string {
  const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
  expect(events.at(-1)).toBe('data: [DONE]');
  let content = '';
  for (const e of events.slice(0, -1)) {
    const chunk = JSON.parse(e.slice(6)) as { choices: { delta?: { content?: string } }[] };
    for (const c of chunk.choices) content += c.delta?.content ?? '';
  }
  return content;
}

const decodeImports = async (url: string): Promise<number> =>
  counterValue(
    await (await fetch(`${url}/metrics`)).text(),
    'vllm:external_prefix_cache_hits_total',
  );

describe('ringserve router: OpenAI routes, fan-out and membership against real instances', () => {
  it('answers /v1/completions as a colocated instance does, the decode importing the KV', async () => {
    const imported = await decodeImports(decode.url);
    const bodies = [
      { prompt: 'The quick brown fox jumps over the lazy dog', max_tokens: 24, seed: 11 },
      {
        prompt: Array.from({ length: 700 }, (_, i) => (i * 37 + 5) % 990),
        max_tokens: 16,
        seed: 3,
      },
      {
        prompt: 'Sample twice',
        max_tokens: 12,
        seed: 5,
        n: 2,
        logprobs: 2,
        return_token_ids: true,
      },
    ];
    for (const body of bodies) {
      const [routed, colo] = await Promise.all([
        post(routerUrl, '/v1/completions', body),
        post(colocated.url, '/v1/completions', body),
      ]);
      expect([routed.status, colo.status]).toEqual([200, 200]);
      expect(choicesOf(routed.text)).toEqual(choicesOf(colo.text));
    }
    expect(await decodeImports(decode.url)).toBeGreaterThan(imported);
  });

  it('streams /v1/chat/completions as a colocated instance does', async () => {
    const body = {
      messages: [{ role: 'user', content: 'Tell me about routers.' }],
      max_completion_tokens: 20,
      seed: 9,
      stream: true,
      stream_options: { include_usage: true },
    };
    const [routed, colo] = await Promise.all([
      post(routerUrl, '/v1/chat/completions', body),
      post(colocated.url, '/v1/chat/completions', body),
    ]);
    expect([routed.status, colo.status]).toEqual([200, 200]);
    const content = streamedContent(routed.text);
    expect(content.length).toBeGreaterThan(0);
    expect(content).toBe(streamedContent(colo.text));
  });

  it('adds a decode instance that then takes sessions, and drains it on removal', async () => {
    const extra = await startCluster([...COMMON, '--role', 'decode']);
    const added = await post(routerUrl, '/instances', { role: 'decode', url: extra.url });
    expect([added.status, JSON.parse(added.text)]).toMatchObject([
      200,
      { status: 'ok', healthy: true, added: true },
    ]);
    const before = await decodeImports(extra.url);
    const body = { prompt: 'Sessions spread over decode instances', max_tokens: 4, seed: 1 };
    for (let i = 0; i < 12; i++) {
      const res = await post(routerUrl, '/v1/completions', body, { 'x-session-id': `user-${i}` });
      expect(res.status).toBe(200);
    }
    // Rendezvous hashing gives the new instance about half of 12 sessions.
    expect(await decodeImports(extra.url)).toBeGreaterThan(before);
    const removed = await fetch(`${routerUrl}/instances`, {
      method: 'DELETE',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ role: 'decode', url: extra.url }),
    });
    expect([removed.status, await removed.json()]).toEqual([
      200,
      { status: 'ok', role: 'decode', url: extra.url, removed: true },
    ]);
    const live = (await (await fetch(`${routerUrl}/liveness`)).json()) as {
      decode: { instances: { url: string }[] };
    };
    expect(live.decode.instances.map((u) => u.url)).toEqual([decode.url]);
    const metrics = await (await fetch(`${routerUrl}/metrics`)).text();
    expect(metrics).toContain('ringserve_router_instances{role="decode"} 1\n');
  });

  // Last: it changes the instances' weight version, which the comparisons above do not expect.
  it('fans control routes out to both instances and lists the model once', async () => {
    for (const path of ['/pause', '/resume']) {
      const res = await post(routerUrl, path, {});
      expect([path, res.status]).toEqual([path, 200]);
    }
    const update = await post(routerUrl, '/update_weights', { weight_dir: null });
    expect(update.status).toBe(200);
    const answer = JSON.parse(update.text) as {
      instances: { url: string; role: string; status: number; body: { weight_version: number } }[];
    };
    expect(answer.instances.map((i) => [i.url, i.role, i.status])).toEqual([
      [prefill.url, 'prefill', 200],
      [decode.url, 'decode', 200],
    ]);
    expect(answer.instances.every((i) => i.body.weight_version >= 1)).toBe(true);
    const models = (await (await fetch(`${routerUrl}/v1/models`)).json()) as {
      data: { id: string }[];
    };
    expect(models.data.map((m) => m.id)).toEqual(['sim-tiny']);
  });
});
