/**
 * The calls an RL trainer and orchestrator make besides pause/resume (control.test.ts), on a real
 * cluster of two API servers: /init_broadcaster and path-less weight updates, LoRA adapters
 * loaded, listed, named by `model` on every route, reloaded in place and unloaded, generate past
 * the context, and the 400s of bodies no engine work may start for.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate } from '../../src/client/index.js';
import { STAT_WEIGHT_VERSION } from '../../src/shm/layout.js';
import { type Answer, call, choice, genBody, post } from './control-helpers.js';
import { type Cluster, startCluster } from './harness.js';

let cluster: Cluster;
let root: string;
/**
 * One connection per API server: the primary's distributor hands connections out in turn (under
 * --listener reuseport the kernel's hash could put both on one server).
 */
const servers: Client[] = [];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'rs-trainer-'));
  cluster = await startCluster([
    '--api-server-count',
    '2',
    '--max-model-len',
    '2048',
    '--listener',
    'primary',
  ]);
  for (let i = 0; i < 2; i++) servers.push(new Client(cluster.url, { pipelining: 0 }));
});
afterAll(async () => {
  await Promise.all(servers.map((c) => c.close()));
  await cluster?.stop();
  await rm(root, { recursive: true, force: true });
});

async function adapter(name: string, weights: string): Promise<string> {
  const dir = join(root, name);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'adapter_config.json'), JSON.stringify({ r: 16, lora_alpha: 32 }));
  await writeFile(join(dir, 'adapter_model.safetensors'), weights);
  return dir;
}

const models = async (via?: Client): Promise<{ id: string; [k: string]: unknown }[]> =>
  (
    (await call(cluster.url, 'GET', '/v1/models', via === undefined ? {} : { via })).body as {
      data: { id: string }[];
    }
  ).data;

function expectError(answer: Answer, status: number, param: string | null): string {
  expect(answer.status).toBe(status);
  const error = (answer.body as { error: { code: number; param: string | null; message: string } })
    .error;
  expect(error.code).toBe(status);
  expect(error.param).toBe(param);
  return error.message;
}

describe('in-memory weight transfer', () => {
  it('joins the broadcaster (recorded, in /metrics), then updates weights with weight_dir null', async () => {
    // prime-rl's NCCL body: no session_id.
    const body = {
      host: '10.0.0.7',
      port: 29501,
      timeout: 1200,
      rank_offset: 0,
      inference_world_size: 8,
      quantize_in_weight_transfer: false,
    };
    expect(await post(cluster, '/init_broadcaster', body)).toEqual({
      status: 200,
      body: { status: 'ok' },
    });
    const metrics = (await call(cluster.url, 'GET', '/metrics')).body as string;
    expect(metrics).toMatch(
      /ringserve_weight_broadcaster_info\{[^}]*address="10\.0\.0\.7:29501",ranks="0\+8",session="default"\} 1/,
    );
    const before = cluster.engineStat(STAT_WEIGHT_VERSION);
    const seeded = genBody(12, 5);
    const old = choice(await generate(cluster.url, seeded)).tokenIds;
    const updated = await post(cluster, '/update_weights', { weight_dir: null });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({ status: 'ok', weight_version: before + 1 });
    expect(cluster.engineStat(STAT_WEIGHT_VERSION)).toBe(before + 1);
    expect(choice(await generate(cluster.url, seeded)).tokenIds).not.toEqual(old);
  });

  it('refuses a broadcaster body it cannot join with, naming the field', async () => {
    expectError(await post(cluster, '/init_broadcaster', { port: 1 }), 400, 'host');
    const base = { host: 'h', port: 29501, rank_offset: 0, inference_world_size: 2 };
    for (const [field, value] of [
      ['port', 0],
      ['port', 70_000],
      ['rank_offset', -1],
      ['inference_world_size', 0],
      ['timeout', 'soon'],
      ['session_id', 3],
    ] as const) {
      expectError(
        await post(cluster, '/init_broadcaster', { ...base, [field]: value }),
        400,
        field,
      );
    }
    const message = expectError(await post(cluster, '/init_broadcaster', [1]), 400, null);
    expect(message).toContain('host');
  });
});

describe('LoRA adapters', () => {
  it('loads one (prime-rl route), lists it on every API server, runs it by name on every route', async () => {
    const path = await adapter('r16-a32', 'step-0');
    expect(
      await post(cluster, '/load_lora_adapter', { lora_name: 'r16-a32', lora_path: path }),
    ).toEqual({ status: 200, body: { status: 'ok' } });
    for (const via of servers) {
      const cards = await models(via);
      expect(cards.map((c) => c.id)).toContain('r16-a32');
      expect(cards.find((c) => c.id === 'r16-a32')).toMatchObject({
        object: 'model',
        root: path,
        parent: cards[0]!.id,
        max_model_len: null,
      });
    }
    const body = genBody(16, 3);
    const base = choice(await generate(cluster.url, body)).tokenIds;
    const tuned = choice(await generate(cluster.url, { ...body, model: 'r16-a32' })).tokenIds;
    expect(tuned).toHaveLength(16);
    expect(tuned).not.toEqual(base);
    expect(choice(await generate(cluster.url, { ...body, model: 'r16-a32' })).tokenIds).toEqual(
      tuned,
    );
    const completion = await call(cluster.url, 'POST', '/v1/completions', {
      body: { model: 'r16-a32', prompt: [3, 1, 4, 1], max_tokens: 4, seed: 1 },
    });
    expect(completion.status).toBe(200);
    expect(completion.body).toMatchObject({ model: 'r16-a32' });
    const tokenized = await call(cluster.url, 'POST', '/tokenize', {
      body: { model: 'r16-a32', prompt: 'hello' },
    });
    expect(tokenized.status).toBe(200);
  });

  it('reloads the same name in place each step: new files, new outputs, same card', async () => {
    const path = await adapter('policy-1', 'a');
    await post(cluster, '/load_lora_adapter', { lora_name: 'policy', lora_path: path });
    const body = { ...genBody(16, 9), model: 'policy' };
    const first = choice(await generate(cluster.url, body)).tokenIds;
    const next = await adapter('policy-2', 'b');
    expect(
      (await post(cluster, '/load_lora_adapter', { lora_name: 'policy', lora_path: next })).status,
    ).toBe(200);
    expect(choice(await generate(cluster.url, body)).tokenIds).not.toEqual(first);
    const cards = (await models()).filter((c) => c.id === 'policy');
    expect(cards).toHaveLength(1);
    expect(cards[0]!.root).toBe(next);
    // vLLM's own route loads in place only when asked: a second load of the name is a 400.
    const again = await post(cluster, '/v1/load_lora_adapter', {
      lora_name: 'policy',
      lora_path: next,
    });
    expect(expectError(again, 400, 'lora_name')).toContain('already been loaded');
  });

  it('answers a path with no adapter and an unknown name 404, naming them', async () => {
    const missing = join(root, 'no-such-adapter');
    const answer = await post(cluster, '/load_lora_adapter', {
      lora_name: 'x',
      lora_path: missing,
    });
    expect(expectError(answer, 404, null)).toContain(`No adapter found for ${missing}`);
    expect((await models()).map((c) => c.id)).not.toContain('x');
    expectError(
      await post(cluster, '/load_lora_adapter', { lora_path: missing }),
      400,
      'lora_name',
    );
    expectError(await post(cluster, '/load_lora_adapter', { lora_name: 'x' }), 400, 'lora_path');
    const unknown = await post(cluster, '/v1/unload_lora_adapter', { lora_name: 'nobody' });
    expect(expectError(unknown, 404, null)).toContain("'nobody'");
    expectError(
      await post(cluster, '/inference/v1/generate', { ...genBody(2, 1), model: 'nobody' }),
      404,
      'model',
    );
  });

  it("unloads with vLLM's answer; the name is then unknown everywhere", async () => {
    const path = await adapter('short-lived', 'w');
    await post(cluster, '/v1/load_lora_adapter', { lora_name: 'short-lived', lora_path: path });
    const removed = await post(cluster, '/v1/unload_lora_adapter', { lora_name: 'short-lived' });
    expect(removed).toEqual({
      status: 200,
      body: "Success: LoRA adapter 'short-lived' removed successfully.",
    });
    for (const via of servers) {
      expect((await models(via)).map((c) => c.id)).not.toContain('short-lived');
    }
    const gone = await call(cluster.url, 'POST', '/v1/chat/completions', {
      body: { model: 'short-lived', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 },
    });
    expectError(gone, 404, 'model');
  });
});

describe('/inference/v1/generate as prime-rl runs it', () => {
  it('accepts max_tokens past the context and stops at max_model_len with finish_reason length', async () => {
    const tokenIds = Array.from({ length: 2000 }, (_, i) => (i * 13) % 900);
    const result = await generate(cluster.url, {
      token_ids: tokenIds,
      sampling_params: { max_tokens: 500, ignore_eos: true, seed: 1 },
    });
    expect(choice(result).finishReason).toBe('length');
    expect(choice(result).tokenIds).toHaveLength(48);
    // A prompt that leaves no room is still a 400 naming it.
    const full = await post(cluster, '/inference/v1/generate', {
      token_ids: new Array(2048).fill(1),
      sampling_params: { max_tokens: 1 },
    });
    expectError(full, 400, 'token_ids');
    // The OpenAI routes keep vLLM's 400.
    const openai = await call(cluster.url, 'POST', '/v1/completions', {
      body: { prompt: tokenIds, max_tokens: 500 },
    });
    expectError(openai, 400, 'max_tokens');
  });

  it('refuses features and free-form objects no answer could carry, before any engine work', async () => {
    expectError(
      await post(cluster, '/inference/v1/generate', { ...genBody(2, 1), features: {} }),
      400,
      'features',
    );
    const text = `{"token_ids":[1,2],"sampling_params":{"max_tokens":2},"kv_transfer_params":${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}}`;
    const res = await fetch(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: text,
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe(
      'kv_transfer_params',
    );
  });
});
