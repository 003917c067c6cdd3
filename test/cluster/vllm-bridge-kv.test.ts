/**
 * kv_transfer_params through `serve --engine vllm`, against the independent mirror engine (written
 * from vLLM's definitions, test/engine/vllm/mirror/nixl.ts): a prefill-role instance hands the
 * engine vLLM's toy-proxy map in SamplingParams.extra_args and answers the engine's handle
 * unchanged, in every form and on both output paths; a decode instance hands the engine the handle
 * unchanged and places the routing rows of a decode that loaded the prompt from P - 1; free-form
 * params pass as they are; a request's params past 64 KiB are a 400, an engine's a failed request.
 */
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { type GenerateResult, generate } from '../../src/client/index.js';
import { expertAt, MirrorEngine } from '../engine/vllm/mirror/engine.js';
import type { MirrorNixl } from '../engine/vllm/mirror/nixl.js';
import { until } from '../until.js';
import type { Cluster } from './harness.js';
import { healthStatus, startBridgeCluster } from './vllm-engine-pair.js';

const PROMPT = Array.from({ length: 40 }, (_, i) => (i * 7 + 3) % 900);
const engines: MirrorEngine[] = [];

afterEach(() => {
  for (const e of engines.splice(0)) e.close();
});

const NIXL: MirrorNixl = {
  engineId: 'mirror-prefill',
  host: '10.1.2.3',
  port: 5601,
  blockSize: 16,
  pad: 0,
};

async function pair(args: string[], nixl: Partial<MirrorNixl> = {}) {
  const { cluster, endpoint } = await startBridgeCluster(['--model', 'tiny', ...args]);
  const engine = new MirrorEngine({
    era: '0.33',
    layers: 4,
    topk: 4,
    numExperts: 16,
    vocab: 1000,
    returnRoutedExperts: true,
    nixl: { ...NIXL, ...nixl },
  });
  engines.push(engine);
  await engine.connect(endpoint);
  await until(
    () => healthStatus(cluster),
    (status) => status === 200,
    { timeoutMs: 30_000 },
  );
  return { cluster, engine };
}

function body(maxTokens: number, kv?: unknown): Record<string, unknown> {
  return {
    token_ids: PROMPT,
    sampling_params: { max_tokens: maxTokens, seed: 1, return_routed_experts: true },
    ...(kv === undefined ? {} : { kv_transfer_params: kv }),
  };
}

/** The extra_args the engine decoded from the last ADD. */
function lastExtraArgs(engine: MirrorEngine): unknown {
  return engine.adds.at(-1)?.request.sampling_params?.extra_args ?? null;
}

async function post(cluster: Cluster, b: Record<string, unknown>) {
  const res = await request(`${cluster.url}/inference/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(b),
  });
  const json = (await res.body.json()) as { error?: { param: string | null; message: string } };
  return { status: res.statusCode, error: json.error ?? null };
}

const TOY_PROXY = {
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
};

describe.each(['workers', 'inline'])(
  'serve --engine vllm, kv_transfer_params (%s output)',
  (out) => {
    it("a prefill instance sends vLLM's toy-proxy map and answers the engine's handle as sent", async () => {
      const { cluster, engine } = await pair(['--role', 'prefill', '--output-processing', out]);
      const handle = {
        do_remote_prefill: true,
        do_remote_decode: false,
        remote_block_ids: [[100, 101, 102]],
        remote_engine_id: 'mirror-prefill',
        remote_host: '10.1.2.3',
        remote_port: 5601,
        tp_size: 1,
      };
      const answers: GenerateResult[] = [
        await generate(cluster.url, body(1)),
        await generate(cluster.url, body(1, { do_remote_decode: true, trace: 'x' })),
      ];
      expect(lastExtraArgs(engine)).toEqual({ kv_transfer_params: { ...TOY_PROXY, trace: 'x' } });
      answers.push(await generate(cluster.url, { ...body(1), packed: false }));
      if (out === 'workers') {
        answers.push(
          await generate(cluster.url, body(1), { accept: 'msgpack', bodyEncoding: 'msgpack' }),
        );
      }
      expect(engine.adds[0]!.request.sampling_params?.extra_args).toEqual({
        kv_transfer_params: TOY_PROXY,
      });
      for (const [i, a] of answers.entries()) {
        const id = engine.adds[i]!.request.request_id;
        expect(a.kvTransferParams).toEqual({ ...handle, remote_request_id: id });
      }
    });
  },
);

describe('serve --engine vllm --role decode, kv_transfer_params', () => {
  it('hands the engine the handle unchanged; rows of a loaded prompt start at P - 1', async () => {
    const { cluster, engine } = await pair(['--role', 'decode']);
    const handle = {
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_block_ids: [[100, 101, 102]],
      remote_engine_id: 'mirror-prefill',
      remote_request_id: 'abc-0-1-2',
      remote_host: '10.1.2.3',
      remote_port: 5601,
      tp_size: 1,
      remote_blocks_expiry_time: 1234.5,
    };
    const n = 5;
    const r = await generate(cluster.url, body(n, handle));
    expect(lastExtraArgs(engine)).toEqual({ kv_transfer_params: handle });
    expect(r.kvTransferParams).toBeNull();
    const c = r.choices[0]!.routedExperts!;
    const P = PROMPT.length;
    expect(c.start).toBe(P - 1);
    expect(c.shape).toEqual([n, 3, 4]);
    const want: number[] = [];
    for (let pos = P - 1; pos < P - 1 + n; pos++)
      for (let l = 1; l < 4; l++) for (let k = 0; k < 4; k++) want.push(expertAt(pos, l, k, 16));
    expect(Array.from(c.data)).toEqual(want);
    // No handle: no extra_args at all (vLLM's default), the prompt computed.
    const plain = await generate(cluster.url, body(n));
    expect(lastExtraArgs(engine)).toBeNull();
    expect(plain.choices[0]!.routedExperts!.start).toBe(0);
  });

  it('passes free-form params as they are; bounds both ways at 64 KiB', async () => {
    const { cluster, engine } = await pair([], { pad: 70_000 });
    const free = { nested: { list: [1, 2.5, 'x', null, true] }, n: -3 };
    await generate(cluster.url, body(2, free));
    expect(lastExtraArgs(engine)).toEqual({ kv_transfer_params: free });
    const adds = engine.adds.length;
    const big = await post(cluster, body(2, { blob: 'y'.repeat(70_000) }));
    expect(big.status).toBe(400);
    expect(big.error?.param).toBe('kv_transfer_params');
    expect(engine.adds).toHaveLength(adds);
    // The engine answers a 70,000-byte handle: that request fails, the next one runs.
    const failed = await post(cluster, body(1, { do_remote_decode: true }));
    expect(failed.status).toBe(500);
    expect(failed.error?.message).toMatch(/kv_transfer_params.*65536/);
    expect((await generate(cluster.url, body(3))).choices[0]!.tokenIds).toHaveLength(3);
  });
});
