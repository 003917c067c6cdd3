import { afterEach, describe, expect, it } from 'vitest';
import {
  encodeAdd,
  FinishReason,
  MirrorDecodeError,
  pack,
  RequestType,
  type SamplingParams,
} from './codec.js';
import {
  logprobRow,
  maskRowAt,
  promptLogprobRow,
  promptRankAt,
  promptSum,
  rankAt,
  routedPositions,
  routingIds,
  tokenAt,
} from './engine.js';
import { closePairs, openPair, openUnconnected } from './harness.js';

/** The mirror engine's behaviour past the happy path, era by era where it differs. */

const VOCAB = 510;
const PROMPT = [4, 9, 16];
const S = promptSum(PROMPT);
const tok = (i: number) => tokenAt(S, i, VOCAB);

afterEach(closePairs);

describe('mirror engine: stopping, as vLLM check_stop', () => {
  it('STOP on _eos_token_id (stop_reason nil), on a stop token (stop_reason the id), not before min_tokens', async () => {
    const { frontend } = await openPair('0.29');
    const add = (sp: SamplingParams) =>
      frontend.add('0.29', { prompt_token_ids: PROMPT, sampling_params: sp });
    const eos = await add({ max_tokens: 50, _eos_token_id: tok(2) });
    const stop = await add({ max_tokens: 50, stop_token_ids: [tok(3)] });
    const masked = await add({ max_tokens: 5, _eos_token_id: tok(0), min_tokens: 2 });
    const atMin = await add({ max_tokens: 50, stop_token_ids: [tok(1)], min_tokens: 2 });
    const ignored = await add({ max_tokens: 4, _eos_token_id: tok(1), ignore_eos: true });
    const noMax = await add({ max_tokens: null });
    const last = async (id: string) => (await frontend.finished(id)).at(-1)!;
    expect(await last(eos)).toMatchObject({ finish_reason: FinishReason.STOP, stop_reason: null });
    expect(frontend.tokensOf(eos)).toEqual([tok(0), tok(1), tok(2)]);
    expect(await last(stop)).toMatchObject({
      finish_reason: FinishReason.STOP,
      stop_reason: tok(3),
    });
    expect(frontend.tokensOf(stop)).toHaveLength(4);
    // tok(0) is EOS, but min_tokens 2 hides it; a stop token at the 2nd token counts.
    expect(await last(masked)).toMatchObject({ finish_reason: FinishReason.LENGTH });
    expect(frontend.tokensOf(masked)).toHaveLength(5);
    expect(await last(atMin)).toMatchObject({
      finish_reason: FinishReason.STOP,
      stop_reason: tok(1),
    });
    expect(frontend.tokensOf(atMin)).toHaveLength(2);
    expect(await last(ignored)).toMatchObject({ finish_reason: FinishReason.LENGTH });
    expect(frontend.tokensOf(ignored)).toHaveLength(4);
    expect(await last(noMax)).toMatchObject({
      finish_reason: FinishReason.ERROR,
      new_token_ids: [],
    });
  });

  it('LENGTH at max_model_len, before EOS on the same token', async () => {
    const { frontend } = await openPair('0.22', { maxModelLen: PROMPT.length + 3 });
    const id = await frontend.add('0.22', {
      prompt_token_ids: PROMPT,
      sampling_params: { max_tokens: 100, _eos_token_id: tok(2) },
    });
    const outs = await frontend.finished(id);
    expect(frontend.tokensOf(id)).toEqual([tok(0), tok(1), tok(2)]);
    expect(outs.at(-1)?.finish_reason).toBe(FinishReason.LENGTH);
  });
});

describe('mirror engine: engine-wide options', () => {
  it('several tokens a step: routing rows P+C-1.., masks in CSR rows, logprob rows per token', async () => {
    const { frontend } = await openPair('0.28', {
      tokensPerStep: 3,
      returnRoutedExperts: true,
      returnSamplingMask: true,
      layers: 1,
      topk: 2,
    });
    const id = await frontend.add('0.28', {
      prompt_token_ids: PROMPT,
      sampling_params: { max_tokens: 7, logprobs: 0, top_k: 50 },
    });
    const outs = await frontend.finished(id);
    expect(outs.map((o) => o.new_token_ids.length)).toEqual([1, 3, 3]);
    let c = 0;
    for (const o of outs) {
      const k = o.new_token_ids.length;
      const positions = routedPositions(PROMPT.length, 0, c, k);
      expect(o.routed_experts?.ids).toEqual(routingIds(positions, 1, 2, 16));
      const is = Array.from({ length: k }, (_, j) => c + j);
      expect(o.new_sampling_mask?.rows).toEqual(is.map((i) => maskRowAt(tok(i), i, VOCAB)));
      expect(o.new_logprobs?.tokenIds).toEqual(is.map((i) => [tok(i)]));
      expect(o.new_logprobs?.ranks).toEqual(is.map(rankAt));
      c += k;
    }
    expect(frontend.tokensOf(id)).toEqual(Array.from({ length: 7 }, (_, i) => tok(i)));
  });

  it('> 256 experts: routing goes out as <u2; a step-wide logprobs width, as vLLM', async () => {
    const { engine, frontend } = await openPair('0.26', {
      numExperts: 300,
      returnRoutedExperts: true,
      stepWideLogprobs: true,
      layers: 100,
    });
    const sp = (logprobs: number | null) => ({ max_tokens: 2, logprobs });
    // Paused, so that the three start in the same step.
    await frontend.call('pause_scheduler', ['keep', false]);
    const narrow = await frontend.add('0.26', { prompt_token_ids: PROMPT, sampling_params: sp(1) });
    const wide = await frontend.add('0.26', { prompt_token_ids: PROMPT, sampling_params: sp(4) });
    const none = await frontend.add('0.26', {
      prompt_token_ids: PROMPT,
      sampling_params: sp(null),
    });
    await frontend.until(() => engine.adds.length === 3, 'three ADDs');
    await frontend.call('resume_scheduler');
    const [n] = await frontend.finished(narrow);
    await frontend.finished(wide);
    const [x] = await frontend.finished(none);
    expect(n!.routed_experts).toMatchObject({ wide: true, rows: 3, layers: 100 });
    expect(Math.max(...n!.routed_experts!.ids)).toBeGreaterThan(255);
    expect(n!.new_logprobs?.tokenIds[0]).toEqual(logprobRow(tok(0), 0, 4, VOCAB).ids);
    expect(x!.new_logprobs).toBeNull();
    expect(x!.routed_experts).not.toBeNull();
  });

  it('with masks on, a request vLLM would refuse (top_k 0, temperature 0) is recorded', async () => {
    const { engine, frontend } = await openPair('0.33', { returnSamplingMask: true });
    const sp = (s: SamplingParams) => ({ prompt_token_ids: PROMPT, sampling_params: s });
    await frontend.finished(await frontend.add('0.33', sp({ max_tokens: 1, top_k: 5 })));
    await frontend.finished(await frontend.add('0.33', sp({ max_tokens: 1 })));
    await frontend.finished(
      await frontend.add('0.33', sp({ max_tokens: 1, top_k: 5, temperature: 0 })),
    );
    expect(engine.errors.map((e) => e.message)).toEqual([
      'request mirror-1: temperature 1, top_k 0: vLLM refuses it with sampling masks on',
      'request mirror-2: temperature 0, top_k 5: vLLM refuses it with sampling masks on',
    ]);
  });

  it('masks only from era 0.28: a 0.26 engine with the option on sends none', async () => {
    const { frontend } = await openPair('0.26', { returnSamplingMask: true });
    const id = await frontend.add('0.26', {
      prompt_token_ids: PROMPT,
      sampling_params: { max_tokens: 1 },
    });
    const [o] = await frontend.finished(id);
    expect('new_sampling_mask' in o!).toBe(false);
  });

  it('two clients: outputs and utility replies go to the socket of client_index', async () => {
    const { frontend } = await openPair('0.33', {}, { era: '0.33', clients: 2 });
    const id = await frontend.add('0.33', {
      prompt_token_ids: PROMPT,
      client_index: 1,
      sampling_params: { max_tokens: 2 },
    });
    await frontend.finished(id);
    const reply = await frontend.call('reset_prefix_cache', [], { client: 1 });
    expect(reply.result).toEqual({ value: true });
    const clients = frontend.received
      .filter((r) => r.decoded.message.outputs.length > 0 || r.decoded.message.utility_output)
      .map((r) => r.client);
    expect(new Set(clients)).toEqual(new Set([1]));
  });
});

describe('mirror engine: prompt_logprobs', () => {
  const prompt = [4, 9, 16, 25, 36, 49, 64];
  const rowsOf = (k: number, from: number, to: number) => {
    const positions = Array.from({ length: to - from }, (_, r) => from + r);
    const rows = positions.map((p) => promptLogprobRow(prompt[p]!, p, k, VOCAB));
    return {
      tokenIds: rows.map((r) => r.ids),
      logprobs: rows.map((r) => r.logprobs),
      ranks: positions.map(promptRankAt),
      idsDtype: 'int32',
      ranksDtype: 'int32',
    };
  };

  it('positions 1..P-1 in the first output with tokens; the frontend assembles them as vLLM', async () => {
    const { frontend } = await openPair('0.33');
    const id = await frontend.add('0.33', {
      prompt_token_ids: prompt,
      sampling_params: { max_tokens: 2, prompt_logprobs: 3 },
    });
    const outs = await frontend.finished(id);
    expect(outs.map((o) => o.new_token_ids.length)).toEqual([1, 1]);
    expect(outs[0]?.new_prompt_logprobs_tensors).toEqual(rowsOf(3, 1, prompt.length));
    expect(outs[1]?.new_prompt_logprobs_tensors).toBeNull();
    const positions = frontend.promptLogprobsOf(id)!;
    expect(positions).toHaveLength(prompt.length);
    expect(positions[0]).toBeNull();
    const row = promptLogprobRow(prompt[2]!, 2, 3, VOCAB);
    expect(positions[2]).toEqual(
      row.ids.map((tokenId, e) => ({
        tokenId,
        logprob: row.logprobs[e],
        rank: e === 0 ? promptRankAt(2) : e,
      })),
    );
  });

  it('in chunks without tokens when told (older vLLM); a narrower engine width is cut to it', async () => {
    const { frontend } = await openPair('0.22', {
      promptLogprobsChunk: 2,
      promptLogprobsTopK: 4,
      promptLogprobsDtype: 'int64',
    });
    const id = await frontend.add('0.22', {
      prompt_token_ids: prompt,
      sampling_params: { max_tokens: 1, prompt_logprobs: 1 },
    });
    const outs = await frontend.finished(id);
    expect(outs.map((o) => o.new_token_ids.length)).toEqual([0, 0, 1]);
    expect(outs.map((o) => o.new_prompt_logprobs_tensors?.tokenIds.length)).toEqual([2, 2, 2]);
    expect(outs[1]?.new_prompt_logprobs_tensors).toEqual({
      ...rowsOf(4, 3, 5),
      idsDtype: 'int64',
      ranksDtype: 'int64',
    });
    // The engine computed 4 candidates; vLLM's frontend keeps 1 + prompt_logprobs of each row.
    const positions = frontend.promptLogprobsOf(id)!;
    expect(positions.map((p) => p?.length ?? 0)).toEqual([0, 2, 2, 2, 2, 2, 2]);
  });
});

describe('mirror engine: pause modes', () => {
  it("'keep' freezes, 'abort' finishes everything with ABORT, 'wait' answers once drained", async () => {
    const { engine, frontend } = await openPair('0.28');
    const long = { max_tokens: 100_000 };
    const a = await frontend.add('0.28', { prompt_token_ids: PROMPT, sampling_params: long });
    await frontend.until(() => frontend.outputsOf(a).length > 0, 'first output');
    await frontend.call('pause_scheduler', ['keep', false]);
    const frozen = frontend.outputsOf(a).length;
    await new Promise((r) => setTimeout(r, 20));
    expect(frontend.outputsOf(a)).toHaveLength(frozen);
    await frontend.call('resume_scheduler');
    await frontend.until(() => frontend.outputsOf(a).length > frozen, 'output after resume');
    await frontend.call('pause_scheduler', ['abort', true]);
    const outs = await frontend.finished(a);
    expect(outs.at(-1)).toMatchObject({ finish_reason: FinishReason.ABORT, new_token_ids: [] });
    expect(engine.running).toBe(0);
    const queued = await frontend.add('0.28', { prompt_token_ids: PROMPT, sampling_params: long });
    await frontend.until(() => engine.adds.length === 2, 'the second ADD');
    expect(engine.waiting).toBe(1);
    await frontend.call('resume_scheduler');
    await frontend.until(() => frontend.outputsOf(queued).length > 0, 'the queued request runs');
    const short = await frontend.add('0.28', {
      prompt_token_ids: PROMPT,
      sampling_params: { max_tokens: 5 },
    });
    await frontend.until(() => frontend.outputsOf(short).length > 0, 'the short request runs');
    await frontend.abort([queued]);
    const waited = await frontend.call('pause_scheduler', ['wait', false]);
    expect(waited.result).toEqual({ value: null });
    expect(frontend.outputsOf(short).at(-1)?.finish_reason).toBe(FinishReason.LENGTH);
    expect(engine.paused).toBe('wait');
  });

  it('an unknown method fails with the text vLLM sends; the call id still echoes', async () => {
    const { frontend } = await openPair('0.22');
    const r = await frontend.call('no_such_method', [], { callId: 2n ** 63n + 1n });
    expect(r).toEqual({
      call_id: 2n ** 63n + 1n,
      failure_message:
        "Call to no_such_method method failed: 'EngineCoreProc' object has no attribute 'no_such_method'",
      result: null,
    });
  });
});

describe('mirror engine: failures', () => {
  it('dieLoudly sends ENGINE_CORE_DEAD; close() sends nothing', async () => {
    const loud = await openPair('0.29');
    await loud.engine.dieLoudly();
    await loud.frontend.until(() => loud.frontend.dead, 'ENGINE_CORE_DEAD');
    const quiet = await openPair('0.29');
    const id = await quiet.frontend.add('0.29', {
      prompt_token_ids: PROMPT,
      sampling_params: { max_tokens: 1e5 },
    });
    await quiet.frontend.until(() => quiet.frontend.outputsOf(id).length > 0, 'an output');
    quiet.engine.close();
    const settle = () => new Promise((r) => setTimeout(r, 20));
    await settle(); // what was sent before close() may still be arriving
    const seen = quiet.frontend.received.length;
    await settle();
    expect(quiet.frontend.received.length).toBe(seen);
    expect(quiet.frontend.dead).toBe(false);
  });

  it('sendRaw injects malformed messages; the frontend records them and goes on', async () => {
    const { engine, frontend } = await openPair('0.26');
    await engine.sendRaw([Buffer.from([0xc1])]);
    await engine.sendRaw([pack([0, [['r', 'not tokens']], null, 0, null, null, null, null])]);
    await frontend.until(() => frontend.errors.length === 2, 'two decode errors');
    expect(frontend.errors[1]).toBeInstanceOf(MirrorDecodeError);
    expect(frontend.errors[1]!.message).toMatch(/new_token_ids: expected array/);
    const r = await frontend.call('is_scheduler_paused');
    expect(r.result).toEqual({ value: false });
  });

  it('records what it cannot take: a bad type byte, a bad ADD, a duplicate live id', async () => {
    const { engine, frontend } = await openPair('0.33', { returnRoutedExperts: true });
    await frontend.sendRaw([Buffer.from([9]), pack([])]);
    await frontend.sendRaw([Buffer.from([RequestType.ADD]), pack(['x', [1]])]);
    const sp = { max_tokens: 100_000 };
    await frontend.add('0.33', {
      request_id: 'dup',
      prompt_token_ids: PROMPT,
      sampling_params: sp,
    });
    await frontend.add('0.33', {
      request_id: 'dup',
      prompt_token_ids: PROMPT,
      sampling_params: sp,
    });
    const bad = { prompt_token_ids: [1], sampling_params: { routed_experts_prompt_start: 1 } };
    const badId = await frontend.add('0.33', bad);
    await frontend.until(() => engine.errors.length === 4, 'four engine errors');
    expect(engine.errors.map((e) => e.message)).toEqual([
      'request type byte 9',
      'EngineCoreRequest: 2 elements, < 9',
      'request dup is already live',
      `request ${badId}: routed_experts_prompt_start 1 >= 1`,
    ]);
    const [type, payload] = encodeAdd('0.33', {
      request_id: 'ok',
      prompt_token_ids: PROMPT,
      mm_features: null,
      sampling_params: { max_tokens: 1 },
      pooling_params: null,
      arrival_time: 1,
      lora_request: null,
      cache_salt: null,
      data_parallel_rank: null,
    });
    await frontend.sendRaw([type!, payload!]);
    expect((await frontend.finished('ok')).at(-1)?.finish_reason).toBe(FinishReason.LENGTH);
  });
});

describe('mirror handshake variants', () => {
  it('a 0.25.1 engine of era 0.22 sends 10 keys (read as the 0.26 set); rank 3 is identity 03 00', async () => {
    const { engine, frontend } = await openPair('0.22', { vllmVersion: '0.25.1', rank: 3 });
    expect(Object.keys(frontend.registration!)).toHaveLength(10);
    expect(frontend.registrationEra).toBe('0.26');
    expect(frontend.engineIdentity).toEqual(Buffer.from([3, 0]));
    expect(engine.registration).toEqual(frontend.registration);
  });

  it('an era 0.26 frontend refuses a registration without block_size', async () => {
    const { engine, frontend } = await openUnconnected('0.26', {
      registration: { block_size: undefined },
    });
    const [eng, fe] = await Promise.allSettled([
      engine.connect(frontend.handshakeAddress),
      frontend.runHandshake(),
    ]);
    expect(eng.status).toBe('fulfilled');
    expect(fe.status).toBe('rejected');
    expect(String((fe as PromiseRejectedResult).reason)).toMatch(/missing required block_size/);
  });
});
