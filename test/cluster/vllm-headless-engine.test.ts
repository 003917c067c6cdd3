import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { buildConfig } from '../../src/config.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import { FinishReason } from '../../src/wire/types.js';
import { RequestType } from '../engine/vllm/mirror/codec.js';
import { ERAS, type Era, OUTPUT_FIELDS, REGISTRATION_KEYS } from '../engine/vllm/mirror/eras.js';
import { EngineProcess, type SeenOutput, TestFrontend } from './vllm-test-frontend.js';

/**
 * `ringserve engine --vllm-protocol` as a headless vLLM engine, driven over real ZMQ on loopback
 * by an independent frontend (vllm-test-frontend.ts over the mirror, written from vLLM's structs):
 * the handshake and registration of every layout, ADD -> outputs identical to the simulator's own
 * (tokens, logprobs with top candidates and ranks, stock sampling masks, routing rows), ABORT ->
 * nothing more, the utility calls with 64-bit call ids, ENGINE_CORE_DEAD on a fatal request, and
 * the exits.
 */

let frontend: TestFrontend | null = null;
let engine: EngineProcess | null = null;

afterEach(async () => {
  await engine?.stop();
  frontend?.close();
  engine = null;
  frontend = null;
});

/**
 * Steps of 50 ms (tiny's 1 ms at --speedup 0.02): a 3000-token request runs ~150 s, so the abort,
 * pause or duplicate a test sends reaches it while it runs even if this process is held up a second
 * or two (at --speedup 2 it ran under a second and could end first on a loaded machine).
 */
const SLOW = '0.02';

async function start(
  extra: string[] = [],
  era: Era = '0.33',
): Promise<{ f: TestFrontend; e: EngineProcess }> {
  const f = new TestFrontend(era);
  frontend = f;
  await f.bind();
  const e = new EngineProcess(f.handshakePort, extra);
  engine = e;
  await f.runHandshake();
  return { f, e };
}

/** The same request through an in-process SimEngine, as the default (ring) path runs it. */
function direct(
  prompt: number[],
  seed: number,
  maxTokens: number,
  { ignoreEos = true, lengthProfile = 'rl', model = 'tiny', topK = 0, topLogprobs = 0 } = {},
) {
  const c = buildConfig({ model, maxSpeed: true });
  const sim = new SimEngine({ preset: model, seed: c.seed, maxSpeed: true, lengthProfile });
  sim.add({
    server: 0,
    slot: 0,
    promptTokenIds: Int32Array.from(prompt),
    params: {
      temperature: 1,
      topP: 0.9,
      topK,
      minP: 0,
      seed,
      maxTokens,
      minTokens: 0,
      stopTokenIds: new Int32Array(0),
      ignoreEos,
      presencePenalty: 0,
      frequencyPenalty: 0,
      repetitionPenalty: 1,
      logprobs: true,
      topLogprobs,
      promptLogprobs: -1,
      returnSamplingMask: true,
      returnRoutedExperts: true,
      routedExpertsPromptStart: 0,
    },
    priority: 0,
    cacheSalt: null,
    arrivalTimeMs: 0,
  });
  const out = sim.newStepOutputs();
  const tokens: number[] = [];
  const logprobs: number[] = [];
  const routing: number[] = [];
  const masks: number[][] = [];
  const ranks: number[] = [];
  const lpRows: number[][] = [];
  let finish = FinishReason.None;
  let stop = -1;
  for (let finished = false; !finished; ) {
    out.clear();
    sim.step(out);
    for (let i = 0; i < out.count; i++) {
      const rows = out.routingRows[i] as number;
      const at = (out.routingStart[i] as number) * out.routingRowWidth;
      routing.push(...out.routing.subarray(at, at + rows * out.routingRowWidth));
      if ((out.token[i] as number) >= 0) {
        tokens.push(out.token[i] as number);
        logprobs.push(out.logprob[i] as number);
        const m = out.maskStart[i] as number;
        masks.push(Array.from(out.maskIds.subarray(m, m + (out.maskCount[i] as number))));
        ranks.push(out.rank[i] as number);
        const t = out.topStart[i] as number;
        lpRows.push([out.logprob[i] as number, ...out.topLogprobs.subarray(t, t + topLogprobs)]);
      }
      if (out.finish[i] !== FinishReason.None) {
        finished = true;
        finish = out.finish[i] as FinishReason;
        stop = out.stopTokenId[i] as number;
      }
    }
  }
  return { tokens, logprobs, routing, masks, ranks, rows: lpRows, finish, stop };
}

/**
 * Routing rows as vLLM shapes them ([rows, hidden layers, topk]) minus the leading dense layer
 * (tiny: 4 hidden layers, layer 0 dense, top-4; GLM-4.5-Air: 46, layer 0 dense, top-8).
 */
function moeRows(outputs: SeenOutput[], hiddenLayers = 4, topk = 4): number[] {
  const rows: number[] = [];
  const width = hiddenLayers * topk;
  for (const o of outputs) {
    if (o.routed === null) continue;
    expect(o.routedLayers).toBe(hiddenLayers);
    for (let r = 0; r < o.routedRows; r++) {
      const row = o.routed.subarray(r * width, (r + 1) * width);
      expect(row.subarray(0, topk).every((id) => id === 0)).toBe(true);
      rows.push(...row.subarray(topk));
    }
  }
  return rows;
}

describe('ringserve engine --vllm-protocol', () => {
  it('runs vLLM handshake: HELLO from identity 00 00, init, the newest registration, READY', async () => {
    const { f } = await start();
    expect(f.helloIdentity).toEqual(Buffer.from([0, 0]));
    expect(f.hello).toMatchObject({ status: 'HELLO', local: false, headless: true });
    // The mirror refused it unless every key the 0.33 dataclass requires is there, typed.
    const reg = f.registration!;
    for (const key of REGISTRATION_KEYS['0.33'].required) expect(reg).toHaveProperty(key);
    expect(reg).toMatchObject({
      max_model_len: 4096,
      num_gpu_blocks: 2048,
      block_size: 16,
      dtype: 'bfloat16',
      vllm_version: '0.33.0+ringserve',
      data_parallel_size: 1,
      supports_lora: false,
    });
    expect(f.mirror.registrationEra).toBe('0.33');
    expect(f.ready?.status).toBe('READY');
  });

  it.each(ERAS)(
    "--vllm-version %s: that series' registration and EngineCoreOutput length",
    async (era) => {
      const { f } = await start(['--max-speed', '--vllm-version', era], era);
      expect(f.mirror.registrationEra).toBe(era === '0.22' ? '0.22' : era);
      await f.add({
        requestId: `r-${era}`,
        params: { maxTokens: 2, ignoreEos: true, logprobs: 1 },
      });
      const outs = await f.finished(`r-${era}`);
      expect(outs.flatMap((o) => o.tokens)).toHaveLength(2);
      expect([...f.mirror.outputLengths]).toEqual([OUTPUT_FIELDS[era].length]);
    },
  );

  it('an ADD gives the same tokens, logprobs (top candidates, ranks), masks and routing rows as the simulator directly', async () => {
    const { f } = await start([
      '--max-speed',
      '--enable-return-routed-experts',
      '--enable-return-sampling-mask',
    ]);
    const prompt = [11, 12, 13, 14, 15, 16, 17];
    await f.add({
      requestId: 'req-a',
      promptTokenIds: prompt,
      params: { maxTokens: 12, topP: 0.9, topK: 50, seed: 1234, ignoreEos: true, logprobs: 3 },
    });
    const outs = await f.finished('req-a');
    const want = direct(prompt, 1234, 12, { topK: 50, topLogprobs: 3 });
    expect(outs.flatMap((o) => o.tokens)).toEqual(want.tokens);
    expect(outs.flatMap((o) => o.logprobs ?? [])).toEqual(want.logprobs);
    // LogprobsLists: k + 1 columns, the sampled token's logprob first, ranks >= 1.
    expect(outs.flatMap((o) => o.logprobRows ?? [])).toEqual(want.rows);
    expect(outs.flatMap((o) => o.ranks ?? [])).toEqual(want.ranks);
    expect(want.ranks.every((r) => r >= 1)).toBe(true);
    // Stock new_sampling_mask rows, one per token.
    expect(outs.flatMap((o) => o.masks ?? [])).toEqual(want.masks);
    // Prompt rows 0..P-1 with the first token, then one row per forwarded position: P + 10 rows
    // for 12 tokens (the last token is never forwarded).
    expect(outs[0]?.routedRows).toBe(prompt.length);
    expect(moeRows(outs)).toEqual(want.routing.slice(0, (prompt.length + 11) * 12));
    expect(outs[0]?.prefill).toEqual({ prompt: prompt.length, cached: 0 });
    expect(outs.slice(1).every((o) => o.prefill === null)).toBe(true);
    expect(outs.at(-1)?.finish).toBe(1); // LENGTH
  });

  it('with masks on, greedy sampling ends with finish_reason ERROR, as vLLM refuses it', async () => {
    const { f } = await start(['--max-speed', '--enable-return-sampling-mask']);
    await f.add({ requestId: 'greedy', params: { maxTokens: 3, temperature: 0, topK: 5 } });
    const outs = await f.finished('greedy');
    expect(outs).toHaveLength(1);
    expect(outs[0]).toMatchObject({ finish: 3, tokens: [] });
  });

  it('GLM-4.5-Air: rows of 368 bytes travel in aux frames and match the simulator directly', async () => {
    const { f } = await start([
      '--model',
      'glm-4.5-air',
      '--max-speed',
      '--enable-return-routed-experts',
    ]);
    const prompt = [1000, 2000, 3000, 4000, 5000];
    await f.add({
      requestId: 'glm',
      promptTokenIds: prompt,
      params: { maxTokens: 5, seed: 77, ignoreEos: true, logprobs: 0, topP: 0.9 },
    });
    const outs = await f.finished('glm');
    const want = direct(prompt, 77, 5, { model: 'glm-4.5-air' });
    expect(outs.flatMap((o) => o.tokens)).toEqual(want.tokens);
    expect(outs.flatMap((o) => o.logprobs ?? [])).toEqual(want.logprobs);
    expect(moeRows(outs, 46, 8)).toEqual(want.routing.slice(0, (prompt.length + 4) * 45 * 8));
  });

  it('EOS ends a request with finish_reason STOP, the same token as the simulator directly', async () => {
    const { f } = await start(['--max-speed', '--length-profile', 'chat']);
    const prompt = [21, 22, 23];
    await f.add({
      requestId: 'eos',
      promptTokenIds: prompt,
      params: { maxTokens: 2000, seed: 99, topP: 0.9, eosTokenId: 999, logprobs: 0 },
    });
    const outs = await f.finished('eos');
    const want = direct(prompt, 99, 2000, { ignoreEos: false, lengthProfile: 'chat' });
    expect(want.finish).toBe(FinishReason.Stop);
    expect(outs.flatMap((o) => o.tokens)).toEqual(want.tokens);
    expect(outs.at(-1)).toMatchObject({ finish: 0, stop: want.stop });
    expect(outs.flatMap((o) => o.routed ?? [])).toEqual([]); // routing off by default, as vLLM
  });

  it('the same prompt again hits the prefix cache and gives the same tokens', async () => {
    const { f } = await start(['--max-speed', '--enable-return-routed-experts']);
    const prompt = Array.from({ length: 40 }, (_, i) => 100 + i);
    const params = { maxTokens: 6, seed: 5, ignoreEos: true, logprobs: 0 };
    await f.add({ requestId: 'p1', promptTokenIds: prompt, params });
    const first = await f.finished('p1');
    await f.add({ requestId: 'p2', promptTokenIds: prompt, params });
    const second = await f.finished('p2');
    expect(second[0]?.prefill?.cached).toBeGreaterThan(0);
    expect(second.flatMap((o) => o.tokens)).toEqual(first.flatMap((o) => o.tokens));
    expect(second.flatMap((o) => o.logprobs ?? [])).toEqual(first.flatMap((o) => o.logprobs ?? []));
    expect(moeRows(second)).toEqual(moeRows(first));
  });

  it('pause wait answers once the running request finished; an ADD meanwhile waits for resume', async () => {
    const { f } = await start(['--speedup', '4']);
    await f.add({ requestId: 'w1', params: { maxTokens: 30, ignoreEos: true } });
    await f.waitFor((e) => e.kind === 'output' && e.output.id === 'w1');
    const paused = f.call('pause_scheduler', ['wait', false]);
    await f.add({ requestId: 'w2', params: { maxTokens: 2, ignoreEos: true } });
    expect((await paused).failure).toBeNull();
    const last = f.outputsOf('w1').at(-1);
    expect(last?.finish).toBe(1);
    expect(last?.tokens).toHaveLength(1);
    expect((await f.call('is_scheduler_paused', [])).result).toBe(true);
    expect(f.outputsOf('w2')).toEqual([]);
    await f.call('resume_scheduler', []);
    expect((await f.finished('w2')).flatMap((o) => o.tokens)).toHaveLength(2);
  });

  it('an ADD that decodes but cannot run ends with finish_reason ERROR', async () => {
    const { f } = await start(['--max-speed']);
    await f.add({ requestId: 'too-long', promptTokenIds: [1, 2], params: { maxTokens: 5000 } });
    const outs = await f.finished('too-long');
    expect(outs).toHaveLength(1);
    expect(outs[0]).toMatchObject({ finish: 3, tokens: [] });
  });

  it('a malformed message is dropped and the engine keeps serving', async () => {
    const { f } = await start(['--max-speed']);
    await f.sendRaw(RequestType.ADD, Buffer.from([0x93, 0xc3, 0xc3, 0xc3]));
    await f.add({ requestId: 'after', params: { maxTokens: 2, ignoreEos: true } });
    expect((await f.finished('after')).flatMap((o) => o.tokens)).toHaveLength(2);
  });

  it('ABORT: no output for the aborted request after the abort was read', async () => {
    const { f } = await start(['--speedup', SLOW]);
    await f.add({ requestId: 'long', params: { maxTokens: 3000, ignoreEos: true } });
    await f.waitFor((e) => e.kind === 'output' && e.output.id === 'long');
    await f.abort(['long', 'unknown-id']);
    // Inputs are read in order and outputs pushed in order: after this answer, nothing of 'long'.
    await f.call('is_scheduler_paused', []);
    const seen = f.events.length;
    await f.add({ requestId: 'next', params: { maxTokens: 3, ignoreEos: true } });
    await f.finished('next');
    const later = f.events.slice(seen).filter((e) => e.kind === 'output' && e.output.id === 'long');
    expect(later).toEqual([]);
    expect(f.outputsOf('long').every((o) => o.finish === -1)).toBe(true);
  });

  it('pause keep / is_scheduler_paused / resume, reset_prefix_cache, an unknown method', async () => {
    const { f } = await start(['--max-speed']);
    const paused = await f.call('pause_scheduler', ['keep', false]);
    expect(paused).toMatchObject({ failure: null, result: null });
    expect(paused.callId >= 2n ** 63n).toBe(true); // echoed exactly, as a uint64
    expect((await f.call('is_scheduler_paused', [])).result).toBe(true);
    await f.add({ requestId: 'held', params: { maxTokens: 2, ignoreEos: true } });
    await f.call('reset_prefix_cache', []);
    expect(f.outputsOf('held')).toEqual([]);
    expect((await f.call('resume_scheduler', [])).failure).toBeNull();
    expect((await f.call('is_scheduler_paused', [])).result).toBe(false);
    expect((await f.finished('held')).flatMap((o) => o.tokens)).toHaveLength(2);
    expect((await f.call('reset_prefix_cache', [])).result).toBe(true);
    const unknown = await f.call('no_such_method', [1]);
    expect(unknown.failure).toBe(
      "Call to no_such_method method failed: 'EngineCoreProc' object has no attribute 'no_such_method'",
    );
    expect(unknown.result).toBeNull();
  });

  it('pause abort ends running requests with finish_reason ABORT before answering', async () => {
    const { f } = await start(['--speedup', SLOW]);
    await f.add({ requestId: 'run', params: { maxTokens: 3000, ignoreEos: true } });
    await f.waitFor((e) => e.kind === 'output' && e.output.id === 'run');
    const answer = await f.call('pause_scheduler', ['abort', true]);
    expect(answer.failure).toBeNull();
    const at = f.events.findIndex((e) => e.kind === 'utility');
    const aborted = f.events.findIndex(
      (e) => e.kind === 'output' && e.output.id === 'run' && e.output.finish === 2,
    );
    expect(aborted).toBeGreaterThanOrEqual(0);
    expect(aborted).toBeLessThan(at);
    expect((await f.call('is_scheduler_paused', [])).result).toBe(true);
  });

  it('collective_rpc: update_weights_from_path reads the manifest; the weight-transfer sequence', async () => {
    const { f } = await start(['--max-speed']);
    const dir = mkdtempSync(join(tmpdir(), 'rs-weights-'));
    try {
      writeFileSync(join(dir, 'ringserve-weights.json'), '{"version": 5}');
      const a = await f.call('collective_rpc', ['update_weights_from_path', null, [dir], null]);
      expect(a).toMatchObject({ failure: null, result: [5] });
      for (const m of ['init_weight_transfer_engine', 'start_weight_update']) {
        expect((await f.call('collective_rpc', [m, null, [], {}])).failure).toBeNull();
      }
      const u = await f.call('collective_rpc', ['update_weights', null, [], { update_info: {} }]);
      expect(u.result).toEqual([6]);
      expect(
        (await f.call('collective_rpc', ['finish_weight_update', null, [], null])).failure,
      ).toBeNull();
      const bad = await f.call('collective_rpc', ['frobnicate', null, [], null]);
      expect(bad.failure).toMatch(/^Call to collective_rpc method failed: /);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a duplicate live request id is fatal: ENGINE_CORE_DEAD, then exit 1', async () => {
    const { f, e } = await start(['--speedup', SLOW]);
    await f.add({ requestId: 'dup', params: { maxTokens: 3000, ignoreEos: true } });
    await f.waitFor((ev) => ev.kind === 'output' && ev.output.id === 'dup');
    await f.add({ requestId: 'dup' });
    await f.waitFor((ev) => ev.kind === 'dead');
    expect(await e.exited).toBe(1);
  });

  it('exits 0 on SIGTERM, and when the frontend is gone (logged)', async () => {
    const first = await start(['--max-speed']);
    expect(await first.e.stop()).toBe(0);
    first.f.close();
    const { f, e } = await start(['--max-speed']);
    f.close();
    frontend = null;
    expect(await e.exited).toBe(0);
    expect(e.log()).toMatch(/frontend is gone/);
  });
});
