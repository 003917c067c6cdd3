/**
 * 1P1D through `ringserve router` against a colocated instance with the same seeds: identical token
 * ids, logprobs, masks and routing (rows = P + C - 1, merged start 0) at concurrency 1 (10 prompts
 * of 64..6,000 tokens) and 10 (20 prompts), under forced decode preemption (a decode instance of
 * 400 KV blocks, ten long completions at once), every answer form, a decode instance whose every
 * KV load fails, and a negative control: the merge without the position cut is caught as different.
 */
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { decodePromptLogprobs, generate, generateStream } from '../../src/client/index.js';
import { STAT_NUM_PREEMPTIONS } from '../../src/shm/layout.js';
import { type Cluster, startCluster } from './harness.js';
import {
  body,
  counterValue,
  differences,
  firstChoice,
  promptLengths,
  promptOf,
  startRouter,
} from './pd-helpers.js';

const COMMON = ['--model', 'tiny', '--max-speed', '--max-model-len', '8192'];

let colocated: Cluster;
let prefill: Cluster;
let decode: Cluster;
let routerUrl: string;

beforeAll(async () => {
  [colocated, prefill, decode] = await Promise.all([
    startCluster(COMMON),
    // Pins outlive their import here (nothing tells the prefill instance it was imported): a
    // short timeout keeps 20 long prompts from filling its pool.
    startCluster([...COMMON, '--role', 'prefill', '--kv-transfer-timeout-s', '3']),
    // 400 blocks of 16 = one 6,400-token sequence (the longest here: 6,000 + 256), and modelled
    // step times (not --max-speed), so that requests overlap on the decode instance and ten at
    // once must preempt.
    startCluster([
      ...['--model', 'tiny', '--max-model-len', '6400', '--num-gpu-blocks', '400'],
      ...['--role', 'decode'],
    ]),
  ]);
  routerUrl = (await startRouter([prefill.url], [decode.url])).url;
});

/** Sends every prompt through the router and to the colocated instance, `concurrency` at a time. */
async function compareAll(lengths: number[], concurrency: number, salt: string, maxTokens = 48) {
  const failures: string[] = [];
  let rows = 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < lengths.length; i = next++) {
      const prompt = promptOf(lengths[i] as number, i);
      const b = body(prompt, 1000 + i, `${salt}-${i}`, maxTokens);
      const [routed, colo] = await Promise.all([
        generate(routerUrl, b),
        generate(colocated.url, b),
      ]);
      const diff = differences(firstChoice(routed), firstChoice(colo), prompt.length);
      if (diff.length > 0)
        failures.push(`prompt ${i} (${prompt.length} tokens): ${diff.join(', ')}`);
      rows += firstChoice(routed).routedExperts?.shape[0] ?? 0;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { failures, rows, identical: lengths.length - failures.length };
}

describe('ringserve router, 1 prefill + 1 decode instance vs colocated', () => {
  it('is identical at concurrency 1: 10 prompts of 64..6,000 tokens', async () => {
    const { failures, identical, rows } = await compareAll(promptLengths(10), 1, randomUUID());
    console.log(
      `P/D identity, concurrency 1: ${identical}/10 identical, ${rows} routing rows checked`,
    );
    expect(failures).toEqual([]);
    // The decode instance imported the prompts' KV instead of computing it.
    const decodeMetrics = await (await fetch(`${decode.url}/metrics`)).text();
    expect(counterValue(decodeMetrics, 'vllm:external_prefix_cache_hits_total')).toBeGreaterThan(0);
  });

  it('is identical at concurrency 10 (20 prompts)', async () => {
    const before = decode.engineStat(STAT_NUM_PREEMPTIONS);
    // 256 tokens each: running requests cross block boundaries while the pool is full.
    const { failures, identical, rows } = await compareAll(
      promptLengths(20),
      10,
      randomUUID(),
      256,
    );
    const preemptions = decode.engineStat(STAT_NUM_PREEMPTIONS) - before;
    console.log(
      `P/D identity, concurrency 10: ${identical}/20 identical, ${preemptions} decode preemptions, ${rows} routing rows checked`,
    );
    expect(failures).toEqual([]);
  });

  it('is identical under forced decode preemption: 10 short prompts, 1,000-token completions', async () => {
    // Each admitted with a few blocks, then growing to ~75: ten at once outgrow the 400 blocks.
    const before = decode.engineStat(STAT_NUM_PREEMPTIONS);
    const lengths = Array.from({ length: 10 }, (_, i) => 100 + 20 * i);
    const { failures, identical, rows } = await compareAll(lengths, 10, randomUUID(), 1000);
    const preemptions = decode.engineStat(STAT_NUM_PREEMPTIONS) - before;
    console.log(
      `P/D identity, forced preemption: ${identical}/10 identical, ${preemptions} decode preemptions, ${rows} routing rows checked`,
    );
    expect(failures).toEqual([]);
    expect(preemptions).toBeGreaterThan(0);
  });

  it('answers the colocated contract in every form: legacy, msgpack, streaming (packed and legacy)', async () => {
    const prompt = promptOf(700, 99);
    const b = body(prompt, 7, randomUUID());
    const colo = firstChoice(await generate(colocated.url, b));
    const legacy = await generate(routerUrl, { ...b, packed: false });
    const msgpack = await generate(routerUrl, b, { accept: 'msgpack', bodyEncoding: 'msgpack' });
    const streamed = await generateStream(routerUrl, { ...b, stream: true }).collect();
    const streamedLegacy = await generateStream(routerUrl, {
      ...b,
      stream: true,
      packed: false,
    }).collect();
    for (const r of [legacy, msgpack, streamed, streamedLegacy]) {
      expect(differences(firstChoice(r), colo, prompt.length)).toEqual([]);
      expect(r.kvTransferParams).toBeNull();
    }
  });

  it("carries the prefill's prompt logprobs, packed and in vLLM's list, as colocated answers them", async () => {
    const prompt = promptOf(700, 77);
    const base = body(prompt, 3001, randomUUID());
    const b = { ...base, sampling_params: { ...base.sampling_params, prompt_logprobs: 3 } };
    for (const packed of [true, false]) {
      const [routed, colo] = await Promise.all([
        generate(routerUrl, { ...b, packed }),
        generate(colocated.url, { ...b, packed }),
      ]);
      expect(differences(firstChoice(routed), firstChoice(colo), prompt.length)).toEqual([]);
      const r = decodePromptLogprobs(routed.promptLogprobs, prompt, 3)!;
      expect(r.positions).toBe(prompt.length - 1);
      expect(r.width).toBe(packed ? 1 : 4);
      expect(r).toEqual(decodePromptLogprobs(colo.promptLogprobs, prompt, 3));
    }
    // Streamed, they would be lost: the router refuses before any instance works.
    const res = await fetch(`${routerUrl}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...b, stream: true }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe(
      'sampling_params.prompt_logprobs',
    );
  });

  it('a merge without the position cut is caught as different (negative control)', async () => {
    const prompt = promptOf(300, 5);
    const b = body(prompt, 11, randomUUID());
    const colo = firstChoice(await generate(colocated.url, b));
    // What the router does, by hand: prefill with one token, then decode with its handle.
    const sp = { ...b.sampling_params, max_tokens: 1 };
    const p = await generate(prefill.url, {
      ...b,
      sampling_params: sp,
      kv_transfer_params: { do_remote_decode: true },
    });
    const d = await generate(decode.url, { ...b, kv_transfer_params: p.kvTransferParams });
    const pr = firstChoice(p).routedExperts!;
    const dr = firstChoice(d).routedExperts!;
    expect(pr.start + pr.shape[0] - dr.start).toBe(1); // the one position both computed
    const naive = new Uint8Array(pr.data.length + dr.data.length);
    naive.set(pr.data);
    naive.set(dr.data, pr.data.length);
    const naiveChoice = {
      ...firstChoice(d),
      routedExperts: {
        ...dr,
        data: naive,
        shape: [pr.shape[0] + dr.shape[0], dr.shape[1], dr.shape[2]] as [number, number, number],
        start: 0,
      },
    };
    expect(differences(naiveChoice, colo, prompt.length)).toContain('routed_experts');
  });
});

describe('ringserve router with a decode instance whose every KV load fails', () => {
  it('recomputes on the decode side: still identical, rows from the prompt start', async () => {
    const failing = await startCluster([
      ...COMMON,
      '--role',
      'decode',
      '--kv-load-failure-rate',
      '1',
    ]);
    const router = await startRouter([prefill.url], [failing.url]);
    const salt = randomUUID();
    for (const [i, length] of [64, 1500, 4000].entries()) {
      const prompt = promptOf(length, 50 + i);
      const b = body(prompt, 2000 + i, `${salt}-${i}`);
      const [routed, colo] = await Promise.all([
        generate(router.url, b),
        generate(colocated.url, b),
      ]);
      expect(differences(firstChoice(routed), firstChoice(colo), prompt.length)).toEqual([]);
    }
    const metrics = await (await fetch(`${router.url}/metrics`)).text();
    expect(counterValue(metrics, 'ringserve_router_kv_imports_total{outcome="recomputed"}')).toBe(
      3,
    );
    const decodeMetrics = await (await fetch(`${failing.url}/metrics`)).text();
    expect(counterValue(decodeMetrics, 'vllm:nixl_num_failed_transfers_total')).toBe(3);
  });
});
