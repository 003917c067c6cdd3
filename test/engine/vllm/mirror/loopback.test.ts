import { afterEach, describe, expect, it } from 'vitest';
import {
  DEFAULT_VLLM_VERSION,
  type EngineCoreOutput,
  ERAS,
  type Era,
  eraAtLeast,
  FinishReason,
  OUTPUT_FIELDS,
  REQUEST_FIELDS,
  registrationKeysSent,
  type SamplingParams,
} from './codec.js';
import {
  logprobRow,
  maskRowAt,
  promptSum,
  rankAt,
  routedPositions,
  routingIds,
  tokenAt,
} from './engine.js';
import { closePairs, openPair } from './harness.js';

/** The mirror against itself over real ZMQ on loopback: MirrorFrontend <-> MirrorEngine. */

const VOCAB = 510;

afterEach(closePairs);

/** What the formulas say output `c` (c tokens sent before it, one token per step) holds. */
function expectFormula(
  o: EngineCoreOutput,
  c: number,
  prompt: number[],
  sp: SamplingParams,
  opts: { era: Era; layers: number; topk: number; experts: number },
): void {
  const t = tokenAt(promptSum(prompt), c, VOCAB);
  expect(o.new_token_ids).toEqual([t]);
  const row = logprobRow(t, c, sp.logprobs ?? 0, VOCAB);
  expect(o.new_logprobs).toMatchObject({
    tokenIds: [row.ids],
    logprobs: [row.logprobs],
    ranks: [rankAt(c)],
  });
  const positions = routedPositions(prompt.length, sp.routed_experts_prompt_start ?? 0, c, 1);
  expect(o.routed_experts).toEqual({
    rows: positions.length,
    layers: opts.layers,
    topk: opts.topk,
    wide: false,
    ids: routingIds(positions, opts.layers, opts.topk, opts.experts),
  });
  if (eraAtLeast(opts.era, '0.28'))
    expect(o.new_sampling_mask).toEqual({ rows: [maskRowAt(t, c, VOCAB)] });
  else expect('new_sampling_mask' in o).toBe(false);
  if (c === 0) {
    expect(o.prefill_stats).toMatchObject({
      num_prompt_tokens: prompt.length,
      num_cached_tokens: 0,
    });
    expect(o.events?.map((e) => e.type)).toEqual([1, 2]);
  } else {
    expect(o.prefill_stats).toBeNull();
    expect(o.events).toBeNull();
  }
}

describe.each(ERAS)('mirror loopback, era %s', (era) => {
  it('handshake: HELLO, init, every registration key of the era, READY', async () => {
    const { engine, frontend } = await openPair(era);
    expect(frontend.hello).toEqual({ status: 'HELLO', local: false, headless: true });
    expect(frontend.ready).toEqual({ status: 'READY', local: false, headless: true });
    expect(frontend.engineIdentity).toEqual(Buffer.from([0, 0]));
    const sent = registrationKeysSent(era, DEFAULT_VLLM_VERSION[era]);
    expect(Object.keys(frontend.registration!).sort()).toEqual([...sent].sort());
    expect(frontend.registration).toMatchObject({ vllm_version: DEFAULT_VLLM_VERSION[era] });
    expect(frontend.registrationEra).toBe(era);
    expect(engine.init?.addresses.inputs).toEqual(frontend.inputAddresses);
  });

  it('ADD -> one token a step from the formulas, with logprobs, routing, masks, stats', async () => {
    const layers = 2;
    const topk = 3;
    const { engine, frontend } = await openPair(era, {
      layers,
      topk,
      numExperts: 16,
      returnRoutedExperts: true,
      returnSamplingMask: true,
    });
    const prompt = [3, 5, 7, 11];
    const sp = {
      max_tokens: 5,
      logprobs: 2,
      temperature: 1,
      top_k: 20,
      routed_experts_prompt_start: 1,
    };
    const id = await frontend.add(era, { prompt_token_ids: prompt, sampling_params: sp });
    const outs = await frontend.finished(id);
    expect(outs).toHaveLength(5);
    for (const [c, o] of outs.entries()) {
      expectFormula(o, c, prompt, sp, { era, layers, topk, experts: 16 });
    }
    expect(outs.map((o) => o.finish_reason)).toEqual([null, null, null, null, FinishReason.LENGTH]);
    expect([...frontend.outputLengths]).toEqual([OUTPUT_FIELDS[era].length]);
    expect(engine.adds).toHaveLength(1);
    expect(engine.adds[0]!.length).toBe(REQUEST_FIELDS[era].length);
    expect(engine.adds[0]!.request.sampling_params).toEqual(sp);
    expect(engine.errors).toEqual([]);
    expect(frontend.errors).toEqual([]);
    expect(frontend.stats.length).toBeGreaterThanOrEqual(5);
    expect(frontend.stats[0]).toMatchObject({ num_running_reqs: 1, current_wave: 0 });
    expect(frontend.stats[0]!.prefix_cache_stats).toMatchObject({ requests: 1, queries: 4 });
  });

  it('UTILITY: a call id >= 2^63 echoed exactly; pause, resume, collective_rpc', async () => {
    const { engine, frontend } = await openPair(era);
    const paused = await frontend.call('is_scheduler_paused');
    expect(paused.call_id >= 2n ** 63n).toBe(true);
    expect(engine.calls[0]!.call_id).toBe(paused.call_id);
    expect(paused).toMatchObject({ failure_message: null, result: { value: false } });
    const top = 2n ** 64n - 1n;
    expect((await frontend.call('pause_scheduler', ['keep', false], { callId: top })).call_id).toBe(
      top,
    );
    expect((await frontend.call('is_scheduler_paused')).result).toEqual({ value: true });
    await frontend.call('resume_scheduler');
    expect(
      (await frontend.call('collective_rpc', ['update_weights', null, [], null])).result,
    ).toEqual({
      value: [null],
    });
    expect(engine.calls.map((c) => c.method)).toEqual([
      'is_scheduler_paused',
      'pause_scheduler',
      'is_scheduler_paused',
      'resume_scheduler',
      'collective_rpc',
    ]);
    expect(engine.calls[1]!.args).toEqual(['keep', false]);
  });

  it('ABORT: the request gets no more output, the others run on', async () => {
    const { engine, frontend } = await openPair(era);
    const sp = { max_tokens: 100_000 };
    const a = await frontend.add(era, { prompt_token_ids: [1, 2], sampling_params: sp });
    const b = await frontend.add(era, { prompt_token_ids: [3], sampling_params: sp });
    await frontend.until(() => frontend.outputsOf(a).length >= 2, 'two outputs of a');
    await frontend.abort([a]);
    await frontend.until(() => engine.aborts.length === 1, 'the abort');
    // Outputs of a sent before the abort may still be on the way: let b run 3 steps, then count.
    const more = async (n: number) => {
      const at = frontend.outputsOf(b).length;
      await frontend.until(() => frontend.outputsOf(b).length >= at + n, `${n} more outputs of b`);
    };
    await more(3);
    const held = frontend.outputsOf(a).length;
    await more(4);
    expect(frontend.outputsOf(a)).toHaveLength(held);
    expect(engine.aborts).toEqual([a]);
    expect(engine.running).toBe(1);
    expect(frontend.tokensOf(a)).toEqual(
      Array.from({ length: held }, (_, i) => tokenAt(promptSum([1, 2]), i, VOCAB)),
    );
  });
});
