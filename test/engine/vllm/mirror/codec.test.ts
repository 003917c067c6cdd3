import { describe, expect, it } from 'vitest';
import {
  DEFAULT_VLLM_VERSION,
  decodeAbort,
  decodeAdd,
  decodeInit,
  decodeOutputs,
  decodeRegistration,
  decodeStartDpWave,
  decodeStatus,
  decodeUtilityCall,
  type EngineCoreOutput,
  type EngineCoreRequest,
  ERAS,
  type Era,
  encodeAbort,
  encodeAdd,
  encodeInit,
  encodeOutputs,
  encodeRegistration,
  encodeStartDpWave,
  encodeStatus,
  encodeUtilityCall,
  eraAtLeast,
  eraOfOutputLength,
  MirrorDecodeError,
  OUTPUT_FIELDS,
  outputLayoutFor,
  pack,
  REGISTRATION_KEYS,
  REQUEST_FIELDS,
  registrationEra,
  registrationKeysSent,
  type SchedulerStats,
  unpack,
} from './codec.js';
import { registrationFor } from './engine-registration.js';

/** An output with every field of `era` away from its default, and arrays big enough for aux frames. */
function fullOutput(era: Era): EngineCoreOutput {
  const rows = 40;
  const o: EngineCoreOutput = {
    request_id: 'req-1',
    new_token_ids: Array.from({ length: rows }, (_, i) => i + 1),
    new_logprobs: {
      tokenIds: Array.from({ length: rows }, (_, i) => [i + 1, 7, 8]),
      logprobs: Array.from({ length: rows }, (_, i) => [-i / 16, -0.5, -0.75]),
      ranks: Array.from({ length: rows }, (_, i) => (i % 3) + 1),
      idsDtype: '<i4',
      ranksDtype: '<i8',
    },
    new_prompt_logprobs_tensors: {
      tokenIds: Array.from({ length: rows }, (_, i) => [i + 4, 5]),
      logprobs: Array.from({ length: rows }, (_, i) => [-i / 8, -1]),
      ranks: Array.from({ length: rows }, (_, i) => (i % 4) + 1),
      idsDtype: 'int64',
      ranksDtype: 'int32',
    },
    pooling_output: { dtype: '<f4', shape: [2], values: [0.5, 1.5] },
    finish_reason: 1,
    stop_reason: 'STOP',
    events: [
      { type: 1, timestamp: 10.5 },
      { type: 2, timestamp: 11 },
    ],
    kv_transfer_params: { do_remote_decode: true, remote_block_ids: [1, 2], ratio: 0.5 },
    trace_headers: { traceparent: '00-abc-01' },
    prefill_stats: { num_prompt_tokens: 7, num_cached_tokens: 0 },
    routed_experts: { rows: 2, layers: 2, topk: 2, wide: true, ids: [0, 300, 2, 3, 4, 5, 6, 7] },
    num_nans_in_logits: 2,
  };
  if (eraAtLeast(era, '0.26')) o.ec_transfer_params = { ec: 'x' };
  if (eraAtLeast(era, '0.28')) {
    o.mm_cache_miss_hashes = ['h1', 'h2'];
    o.new_sampling_mask = { rows: [[1, 2, 40], [3], Array.from({ length: 70 }, (_, i) => i)] };
  }
  if (eraAtLeast(era, '0.29')) o.spec_decode_metrics = { num_spec_tokens: 3, histogram: [1, 0] };
  if (eraAtLeast(era, '0.33')) {
    o.prompt_token_id_logprobs = { dtype: 'float32', shape: [1, 2], values: [-0.5, -2] };
  }
  return o;
}

const STATS: SchedulerStats = {
  num_running_reqs: 2,
  num_waiting_reqs: 1,
  step_counter: 9,
  current_wave: 0,
  kv_cache_usage: 0,
  prefix_cache_stats: {
    reset: false,
    requests: 1,
    queries: 7,
    hits: 0,
    preempted_requests: 0,
    preempted_queries: 0,
    preempted_hits: 0,
  },
  kv_cache_eviction_events: [
    { lifetime_seconds: 1.5, idle_seconds: 0, reuse_gaps_seconds: [0.25] },
  ],
  perf_stats: null,
};

function fullRequest(era: Era): EngineCoreRequest {
  const r: EngineCoreRequest = {
    request_id: 'r-9',
    prompt_token_ids: [1, 2, 3],
    mm_features: null,
    sampling_params: {
      max_tokens: 8,
      temperature: 1,
      top_p: 0.9,
      top_k: 20,
      seed: 7,
      logprobs: 2,
      stop_token_ids: [9],
      _eos_token_id: 2,
      _all_stop_token_ids: [2, 9],
      routed_experts_prompt_start: 1,
      extra_args: { kv_transfer_params: { do_remote_prefill: false } },
    },
    pooling_params: null,
    arrival_time: 1700000000.25,
    lora_request: ['adapter', 1, '/lora'],
    cache_salt: 'salt',
    data_parallel_rank: 0,
    prompt_embeds: { dtype: 'float32', shape: [1, 2], values: [0.5, -0.5] },
    prompt_is_token_ids: [true, true, true],
    client_index: 1,
    current_wave: 3,
    priority: -1,
    trace_headers: { traceparent: 'x' },
    resumable: true,
    external_req_id: 'ext',
    reasoning_ended: false,
    reasoning_parser_kwargs: { chat_template_kwargs: { thinking: true } },
    abort_immediately: true,
  };
  if (eraAtLeast(era, '0.28')) r.session_id = 'session';
  if (eraAtLeast(era, '0.33')) r.kv_hints = { protocol_version: '1', message_id: 'm', actions: [] };
  return r;
}

describe.each(ERAS)('mirror codec, era %s', (era) => {
  it('round-trips an EngineCoreOutputs with every output field, by era and by length', () => {
    const o = fullOutput(era);
    const frames = encodeOutputs(era, {
      engine_index: 1,
      outputs: [o, { request_id: 'b', new_token_ids: [] }],
      scheduler_stats: STATS,
      timestamp: 12.5,
      finished_requests: ['x'],
    });
    expect(frames.length).toBeGreaterThan(1); // 40x3 int32 logprob ids are 480 bytes: an aux frame
    for (const decoded of [decodeOutputs(frames, era), decodeOutputs(frames)]) {
      const n = OUTPUT_FIELDS[era].length;
      expect(decoded.length).toBe(8);
      expect(decoded.outputLengths).toEqual([n, n]);
      const [first, second] = decoded.message.outputs;
      expect(first).toEqual(o);
      expect(Object.keys(first!)).toEqual(OUTPUT_FIELDS[era]);
      expect(second).toMatchObject({ request_id: 'b', new_token_ids: [], num_nans_in_logits: 0 });
      expect(second!.finish_reason).toBeNull();
      expect(decoded.message.scheduler_stats).toEqual(STATS);
      expect(decoded.message).toMatchObject({ engine_index: 1, timestamp: 12.5 });
      expect(decoded.message.finished_requests).toEqual(['x']);
    }
  });

  it('round-trips an ADD of exactly the era length, and reads short and long ones as msgspec', () => {
    const r = fullRequest(era);
    const frames = encodeAdd(era, r);
    expect(frames[0]).toEqual(Buffer.from([0]));
    const add = decodeAdd(era, frames[1]!, frames.slice(2));
    expect(add.length).toBe(REQUEST_FIELDS[era].length);
    expect(add.request).toEqual(r);
    const short = pack((unpack(frames[1]!) as unknown[]).slice(0, 9));
    const d = decodeAdd(era, short).request;
    expect(d).toMatchObject({ request_id: 'r-9', client_index: 0, priority: 0, resumable: false });
    expect(d.trace_headers).toBeNull();
    const long = pack([...(unpack(frames[1]!) as unknown[]), 'future']);
    expect(decodeAdd(era, long).length).toBe(REQUEST_FIELDS[era].length + 1);
    expect(() => decodeAdd(era, pack(['r', [1], null, null, null, 1.5]))).toThrow(/< 9/);
  });

  it('registration: an engine sends the era keys, the era frontend takes them', () => {
    const reg = registrationFor({
      era,
      vllmVersion: DEFAULT_VLLM_VERSION[era],
      maxModelLen: 4096,
      numGpuBlocks: 100,
      blockSize: 16,
      rank: 0,
      overrides: {},
    });
    const keys = REGISTRATION_KEYS[era];
    const sent = registrationKeysSent(era, DEFAULT_VLLM_VERSION[era]);
    expect(Object.keys(reg).sort()).toEqual([...sent].sort());
    for (const k of keys.required) expect(sent).toContain(k);
    const back = decodeRegistration(era, encodeRegistration(reg));
    expect(back).toEqual(reg);
    expect(registrationEra(back)).toBe(era);
    if (era !== '0.22') {
      const { block_size: _, ...without } = reg;
      expect(() => decodeRegistration(era, encodeRegistration(without))).toThrow(/block_size/);
    }
  });
});

describe('mirror codec, every era', () => {
  it('names the era of an EngineCoreOutput by its length, and picks a layout for any length', () => {
    expect(ERAS.map((e) => OUTPUT_FIELDS[e].length)).toEqual([13, 14, 16, 17, 18]);
    expect(ERAS.map((e) => REQUEST_FIELDS[e].length)).toEqual([20, 20, 21, 21, 22]);
    for (const era of ERAS) expect(eraOfOutputLength(OUTPUT_FIELDS[era].length)).toBe(era);
    expect(eraOfOutputLength(15)).toBeNull();
    expect([2, 13, 14, 15, 16, 17, 18, 19].map(outputLayoutFor)).toEqual([
      '0.22',
      '0.22',
      '0.26',
      '0.28',
      '0.28',
      '0.29',
      '0.33',
      '0.33',
    ]);
    expect(OUTPUT_FIELDS['0.22'][9]).toBe('trace_headers');
    expect(OUTPUT_FIELDS['0.26'][9]).toBe('ec_transfer_params');
  });

  it('a 0.23-0.25 engine sends 10 keys within era 0.22; a 0.22.x one 5', () => {
    expect(registrationKeysSent('0.22', '0.22.1')).toHaveLength(5);
    expect(registrationKeysSent('0.22', '0.25.1')).toHaveLength(10);
    expect(registrationKeysSent('0.33', '0.33.0')).toHaveLength(28);
  });

  it('checks types as msgspec does: a float is never an int, nil only where None is allowed', () => {
    const base = fullRequest('0.26');
    const body = unpack(encodeAdd('0.26', base)[1]!) as unknown[];
    const withField = (i: number, v: unknown) => pack(body.map((x, j) => (j === i ? v : x)));
    const sp = (extra: Record<string, unknown>) => withField(3, { max_tokens: 4, ...extra });
    expect(() => decodeAdd('0.26', withField(11, null))).toThrow(/client_index: expected int/);
    expect(() => decodeAdd('0.26', withField(5, null))).toThrow(/arrival_time/);
    expect(decodeAdd('0.26', withField(5, 17)).request.arrival_time).toBe(17);
    const asFloat = pack(body.map((x, j) => (j === 3 ? { max_tokens: 4.5 } : x)));
    expect(() => decodeAdd('0.26', asFloat)).toThrow(/max_tokens: expected int, got float/);
    expect(() => decodeAdd('0.26', sp({ ignore_eos: 1 }))).toThrow(/ignore_eos: expected bool/);
    expect(() => decodeAdd('0.26', sp({ top_p: 0 }))).toThrow(/top_p/);
    expect(() => decodeAdd('0.26', sp({ min_tokens: 9 }))).toThrow(/min_tokens/);
    expect(
      decodeAdd('0.26', sp({ temperature: 0, unknown_key: [1] })).request.sampling_params,
    ).toEqual({ max_tokens: 4, temperature: 0, unknown_key: [1] });
    expect(() => decodeAdd('0.26', withField(0, 5))).toThrow(MirrorDecodeError);
  });

  it('round-trips ABORT, UTILITY with a uint64 or negative call id, START_DP_WAVE', () => {
    const abort = encodeAbort(['a', 'b']);
    expect(abort[0]).toEqual(Buffer.from([1]));
    expect(decodeAbort(abort[1]!)).toEqual(['a', 'b']);
    for (const callId of [2n ** 64n - 1n, 2n ** 63n, 5n, -1n]) {
      const call = {
        client_index: 0,
        call_id: callId,
        method: 'collective_rpc',
        args: ['m', null],
      };
      const frames = encodeUtilityCall(call);
      expect(frames[0]).toEqual(Buffer.from([3]));
      expect(decodeUtilityCall(frames[1]!)).toEqual(call);
    }
    expect(decodeUtilityCall(pack([7, 'reset_prefix_cache', []]))).toMatchObject({
      client_index: 0,
      call_id: 7n,
    });
    const wave = encodeStartDpWave(4, null);
    expect(wave[0]).toEqual(Buffer.from([2]));
    expect(decodeStartDpWave(wave[1]!)).toEqual({ wave: 4, exclude: null });
  });

  it('round-trips utility replies: success, failure, unit', () => {
    const big = 2n ** 64n - 2n;
    const cases = [
      { call_id: big, failure_message: null, result: { value: [null] } },
      { call_id: -2n, failure_message: 'Call to x method failed: boom', result: null },
      { call_id: 3n, failure_message: null, result: { value: null } },
    ];
    for (const u of cases) {
      const m = decodeOutputs(encodeOutputs('0.29', { utility_output: u })).message;
      expect(m.utility_output).toEqual(u);
      expect(m.outputs).toEqual([]);
    }
  });

  it('round-trips HELLO, READY and the init', () => {
    const hello = { status: 'HELLO', local: false, headless: true } as const;
    expect(decodeStatus(encodeStatus(hello))).toEqual(hello);
    const ready = {
      status: 'READY',
      local: false,
      headless: true,
      parallel_config_hash: 'ab',
    } as const;
    expect(decodeStatus(encodeStatus(ready))).toEqual(ready);
    const init = {
      addresses: {
        inputs: ['tcp://127.0.0.1:1'],
        outputs: ['tcp://127.0.0.1:2'],
        coordinator_input: null,
        coordinator_output: null,
        frontend_stats_publish_address: null,
      },
      parallel_config: {},
    };
    expect(decodeInit(encodeInit(init))).toEqual(init);
    expect(() => decodeStatus(pack({ status: 'HI', local: false, headless: true }))).toThrow();
  });

  it('refuses what vLLM refuses in outputs: rank 0, pickle ext, a bad frame index, a bad dtype', () => {
    const bad = (o: Partial<EngineCoreOutput>) => () =>
      decodeOutputs(
        encodeOutputs('0.22', { outputs: [{ request_id: 'a', new_token_ids: [1], ...o }] }),
      );
    const lp = { tokenIds: [[1]], logprobs: [[-1]], ranks: [0] };
    expect(bad({ new_logprobs: lp })).toThrow(/rank >= 1/);
    expect(bad({ finish_reason: 5 })).toThrow(/FinishReason/);
    const tensorAtFrame9 = ['<f4', [1], 9];
    const output = [
      'a',
      [1],
      null,
      null,
      tensorAtFrame9,
      null,
      null,
      null,
      null,
      null,
      null,
      null,
      0,
    ];
    const body = pack([0, [output], null, 0, null, null, null, null]);
    expect(() => decodeOutputs([body])).toThrow(/frame 9/);
    const badStats = pack([0, [], { num_running_reqs: 1 }, 0, null, null, null, null]);
    expect(() => decodeOutputs([badStats])).toThrow(/missing num_waiting_reqs/);
  });
});
