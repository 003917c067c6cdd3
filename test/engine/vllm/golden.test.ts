import { describe, expect, it } from 'vitest';
import {
  decodeAbort,
  decodeAdd,
  decodeHandshake,
  decodeInit,
  decodeRegistration,
  decodeUtility,
  ENGINE_CORE_DEAD,
  encodeAbort,
  encodeAdd,
  encodeHandshake,
  encodeInit,
  encodeRegistration,
  encodeUtility,
  encodeUtilityReply,
  engineIdentity,
  DEFAULT_VLLM_LAYOUT as L,
  OutputRecord,
  OutputsEncoder,
  type OutputView,
  readOutputs,
  type VllmAddRequest,
} from '../../../src/engine/vllm/index.js';
import { f32le, f64, hex, i32le, s } from './hex.js';

/**
 * Golden byte vectors: every message kind encoded by the codec equals msgpack assembled by hand
 * from VLLM-ENGINE.md's field order (no second encoder involved), and decodes back to its input.
 */

describe('handshake messages', () => {
  it('HELLO and READY', () => {
    const hello = hex('83', s('status'), s('HELLO'), s('local'), 'c2', s('headless'), 'c3');
    const m = { status: 'HELLO', local: false, headless: true, parallelConfigHash: null } as const;
    expect(encodeHandshake(m)).toEqual(hello);
    expect(decodeHandshake(hello)).toEqual(m);
    const ready = hex('83', s('status'), s('READY'), s('local'), 'c2', s('headless'), 'c3');
    expect(encodeHandshake({ ...m, status: 'READY' })).toEqual(ready);
  });

  it('the engine identity of rank 0 and 1 is 2 bytes little-endian', () => {
    expect(engineIdentity(0)).toEqual(hex('0000'));
    expect(engineIdentity(1)).toEqual(hex('0100'));
  });

  it('init message', () => {
    const bytes = hex(
      '82',
      s('addresses'),
      '85',
      s('inputs'),
      '91',
      s('tcp://127.0.0.1:5001'),
      s('outputs'),
      '91',
      s('tcp://127.0.0.1:5002'),
      s('coordinator_input'),
      'c0',
      s('coordinator_output'),
      'c0',
      'be',
      Buffer.from('frontend_stats_publish_address').toString('hex'),
      'c0',
      s('parallel_config'),
      '80',
    );
    const m = { inputs: ['tcp://127.0.0.1:5001'], outputs: ['tcp://127.0.0.1:5002'] };
    expect(encodeInit(m)).toEqual(bytes);
    expect(decodeInit(bytes)).toEqual(m);
  });

  it('registration, with the sampling-mask key', () => {
    const bytes = hex(
      '85',
      s('max_model_len'),
      'cd1000',
      s('num_gpu_blocks'),
      'cd0800',
      s('dp_stats_address'),
      'c0',
      s('dtype'),
      s('bfloat16'),
      s('ringserve_sampling_masks'),
      'c3',
    );
    const m = {
      maxModelLen: 4096,
      numGpuBlocks: 2048,
      dpStatsAddress: null,
      dtype: 'bfloat16',
      samplingMasks: true,
      unknownKeys: [],
    };
    expect(encodeRegistration(L, m)).toEqual(bytes);
    expect(decodeRegistration(L, bytes)).toEqual(m);
  });

  it('a stock registration has no mask key; unknown keys are listed and ignored', () => {
    const bytes = hex(
      '85',
      s('max_model_len'),
      '10',
      s('num_gpu_blocks'),
      '00',
      s('dp_stats_address'),
      'c0',
      s('dtype'),
      'c0',
      s('new_key'),
      '01',
    );
    const m = decodeRegistration(L, bytes);
    expect(m.samplingMasks).toBe(false);
    expect(m.unknownKeys).toEqual(['new_key']);
  });
});

const ADD: VllmAddRequest = {
  requestId: 'r-1',
  promptTokenIds: [1, 200, 70000],
  params: {
    maxTokens: 8,
    temperature: 0.5,
    seed: 42,
    logprobs: 0,
    eosTokenId: 999,
    allStopTokenIds: [999],
  },
  arrivalTime: 1.5,
  cacheSalt: null,
  priority: 0,
  clientIndex: 0,
};

const ADD_BYTES = hex(
  'dc0014', // EngineCoreRequest: 20 fields
  s('r-1'),
  '93 01 ccc8 ce00011170', // prompt_token_ids
  'c0', // mm_features
  '86', // sampling_params: 6 keys, max_tokens always
  s('temperature'),
  f64(0.5),
  s('seed'),
  '2a',
  s('max_tokens'),
  '08',
  s('logprobs'),
  '00',
  s('_eos_token_id'),
  'cd03e7',
  s('_all_stop_token_ids'),
  '91 cd03e7',
  'c0', // pooling_params
  f64(1.5), // arrival_time
  'c0 c0 c0', // lora_request, cache_salt, data_parallel_rank
  'c0 c0', // prompt_embeds, prompt_is_token_ids
  '00 00 00', // client_index, current_wave, priority
  'c0 c2 c0 c0 c0 c2', // trace_headers, resumable, external_req_id, reasoning_*, abort_immediately
);

describe('input messages', () => {
  it('ADD', () => {
    expect(encodeAdd(L, ADD)).toEqual(ADD_BYTES);
    const back = decodeAdd(L, ADD_BYTES);
    expect(back.requestId).toBe('r-1');
    expect(Array.from(back.promptTokenIds)).toEqual([1, 200, 70000]);
    expect(back.params).toMatchObject({
      maxTokens: 8,
      temperature: 0.5,
      seed: 42,
      logprobs: 0,
      eosTokenId: 999,
      allStopTokenIds: [999],
      topP: 1,
      topK: 0,
      returnSamplingMask: false,
    });
    expect(back.arrivalTime).toBe(1.5);
  });

  it('ADD asking for sampling masks carries them in extra_args', () => {
    const bytes = encodeAdd(L, { ...ADD, params: { maxTokens: 1, returnSamplingMask: true } });
    const sp = hex(
      '82',
      s('max_tokens'),
      '01',
      s('extra_args'),
      '81',
      'be',
      Buffer.from('ringserve_return_sampling_mask').toString('hex'),
      'c3',
    );
    expect(bytes.includes(sp)).toBe(true);
    expect(decodeAdd(L, bytes).params.returnSamplingMask).toBe(true);
  });

  it('ABORT', () => {
    const bytes = hex('92', s('r-1'), s('r-2'));
    expect(encodeAbort(['r-1', 'r-2'])).toEqual(bytes);
    expect(decodeAbort(bytes)).toEqual(['r-1', 'r-2']);
  });

  it('UTILITY', () => {
    const bytes = hex('94 00 07', s('pause_scheduler'), '92', s('keep'), 'c2');
    const call = { clientIndex: 0, callId: 7, method: 'pause_scheduler', args: ['keep', false] };
    expect(encodeUtility(call)).toEqual(bytes);
    expect(decodeUtility(bytes)).toEqual(call);
  });

  it('UTILITY with a 2^53-1 call id and collective_rpc arguments', () => {
    const call = {
      clientIndex: 0,
      callId: 2 ** 53 - 1,
      method: 'collective_rpc',
      args: ['update_weights_from_path', null, ['/w/v2'], null],
    };
    const bytes = hex(
      '94 00 cf001fffffffffffff',
      s('collective_rpc'),
      '94',
      'b8',
      Buffer.from('update_weights_from_path').toString('hex'),
      'c0 91',
      s('/w/v2'),
      'c0',
    );
    expect(encodeUtility(call)).toEqual(bytes);
    expect(decodeUtility(bytes)).toEqual(call);
  });
});

/** What a sink saw, copied out of the reused view. */
interface Seen {
  id: string;
  tokens: number[];
  logprobs: number[] | null;
  width: number;
  finish: number;
  stop: number;
  prefill: number[] | null;
  routed: number[] | null;
  routedShape: number[];
  maskCounts: number[] | null;
  maskIds: number[] | null;
}

function collect(frames: Uint8Array[]) {
  const outputs: Seen[] = [];
  const utility: unknown[] = [];
  const stats: number[][] = [];
  let dead = false;
  readOutputs(L, frames, {
    output(o: OutputView) {
      outputs.push({
        id: o.requestId(),
        tokens: Array.from(o.tokenIds.subarray(0, o.tokenCount)),
        logprobs: o.hasLogprobs ? Array.from(o.logprobs.subarray(0, o.tokenCount)) : null,
        width: o.logprobWidth,
        finish: o.finishReason,
        stop: o.stopReason,
        prefill: o.hasPrefillStats
          ? [
              o.numPromptTokens,
              o.numComputedTokens,
              o.numCachedTokens,
              o.numLocalCachedTokens,
              o.numExternalCachedTokens,
            ]
          : null,
        routed: o.hasRoutedExperts
          ? Array.from(o.routedData.subarray(o.routedOffset, o.routedOffset + o.routedLength))
          : null,
        routedShape: [o.routedRows, o.routedLayers, o.routedTopk, o.routedWidth],
        maskCounts: o.hasMask ? Array.from(o.maskCounts.subarray(0, o.tokenCount)) : null,
        maskIds: o.hasMask ? Array.from(o.maskIds.subarray(0, o.maskIdCount)) : null,
      });
    },
    schedulerStats(st) {
      stats.push([st.numRunningReqs, st.numWaitingReqs, st.kvCacheUsage, st.prefixQueries]);
    },
    utility(callId, failure, result) {
      utility.push([callId, failure, result]);
    },
    engineDead() {
      dead = true;
    },
  });
  return { outputs, utility, stats, dead };
}

const OUTPUT_BYTES = hex(
  '98 00 91', // EngineCoreOutputs: engine_index 0, one output
  '9e', // EngineCoreOutput: 13 fields + the sampling-mask element
  s('r-1'),
  '91 05', // new_token_ids
  '94', // LogprobsLists
  `93 ${s('<i4')} 92 01 01 d603 ${i32le(5)}`,
  `93 ${s('<f4')} 92 01 01 d603 ${f32le(-0.25)}`,
  `93 ${s('<i8')} 91 01 d703 0000000000000000`,
  'c0',
  'c0 c0', // new_prompt_logprobs_tensors, pooling_output
  'c0 c0', // finish_reason, stop_reason
  'c0 c0 c0', // events, kv_transfer_params, trace_headers
  '85', // prefill_stats
  s('num_prompt_tokens'),
  '03',
  s('num_computed_tokens'),
  '03',
  s('num_cached_tokens'),
  '00',
  s('num_local_cached_tokens'),
  '00',
  s('num_external_cached_tokens'),
  '00',
  `93 ${s('|u1')} 93 02 02 02 d703 0102030405060708`, // routed_experts [2, 2, 2]
  '00', // num_nans_in_logits
  `92 93 ${s('<i4')} 91 01 d603 ${i32le(2)} 93 ${s('<i4')} 91 02 d703 ${i32le(3, 4)}`, // mask
  '84', // scheduler_stats
  s('num_running_reqs'),
  '01',
  s('num_waiting_reqs'),
  '00',
  s('kv_cache_usage'),
  f64(0.0625),
  s('prefix_cache_stats'),
  '84',
  s('reset'),
  'c2',
  s('requests'),
  '01',
  s('queries'),
  '03',
  s('hits'),
  '00',
  f64(2), // timestamp
  'c0 c0 c0 c0', // utility_output, finished_requests, wave_complete, start_wave
);

function oneOutput(): OutputRecord {
  const o = new OutputRecord();
  const tokens = Int32Array.of(5);
  o.requestId = 'r-1';
  o.tokenIds = tokens;
  o.tokenCount = 1;
  o.tokenBytes = new Uint8Array(tokens.buffer);
  o.logprobBytes = new Uint8Array(Float32Array.of(-0.25).buffer);
  o.prefill = {
    numPromptTokens: 3,
    numComputedTokens: 3,
    numCachedTokens: 0,
    numLocalCachedTokens: 0,
    numExternalCachedTokens: 0,
  };
  o.routedBytes = Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8);
  o.routedRows = 2;
  o.routedLayers = 2;
  o.routedTopk = 2;
  o.maskCountBytes = new Uint8Array(Int32Array.of(2).buffer);
  o.maskIdBytes = new Uint8Array(Int32Array.of(3, 4).buffer);
  o.maskIdCount = 2;
  return o;
}

describe('output messages', () => {
  it('EngineCoreOutputs with logprobs, prefill stats, routing rows and a sampling mask', () => {
    const e = new OutputsEncoder(L, true);
    e.begin(0, 1);
    e.output(oneOutput());
    const stats = {
      numRunningReqs: 1,
      numWaitingReqs: 0,
      kvCacheUsage: 0.0625,
      prefixRequests: 1,
      prefixQueries: 3,
      prefixHits: 0,
    };
    const frames = e.end(stats, 2, null);
    expect(frames).toEqual([OUTPUT_BYTES]);
    const seen = collect(frames);
    expect(seen.stats).toEqual([[1, 0, 0.0625, 3]]);
    expect(seen.outputs).toEqual([
      {
        id: 'r-1',
        tokens: [5],
        logprobs: [-0.25],
        width: 1,
        finish: -1,
        stop: -1,
        prefill: [3, 3, 0, 0, 0],
        routed: [1, 2, 3, 4, 5, 6, 7, 8],
        routedShape: [2, 2, 2, 1],
        maskCounts: [2],
        maskIds: [3, 4],
      },
    ]);
  });

  it('finish reason and stop reason, without the mask element for a stock layout', () => {
    const e = new OutputsEncoder(L, false);
    const o = new OutputRecord();
    o.requestId = 'r-2';
    o.finishReason = 0;
    o.stopReason = 998;
    e.begin(0, 1);
    e.output(o);
    const frames = e.end(null, 0, null);
    expect(frames[0]).toEqual(
      hex(
        '98 00 91 9d',
        s('r-2'),
        '90 c0 c0 c0 00 cd03e6 c0 c0 c0 c0 c0 00',
        'c0',
        f64(0),
        'c0 c0 c0 c0',
      ),
    );
    expect(collect(frames).outputs[0]).toMatchObject({ id: 'r-2', finish: 0, stop: 998 });
  });

  it('routing rows of 256 bytes or more travel in an aux frame referenced by index', () => {
    const e = new OutputsEncoder(L, false);
    const o = new OutputRecord();
    o.requestId = 'r-3';
    const rows = new Uint8Array(300).map((_, i) => i & 0xff);
    o.routedBytes = rows;
    o.routedRows = 25;
    o.routedLayers = 3;
    o.routedTopk = 4;
    e.begin(0, 1);
    e.output(o);
    const frames = e.end(null, 0, null);
    expect(frames).toHaveLength(2);
    expect(frames[1]).toEqual(Buffer.from(rows));
    expect(frames[0]?.includes(hex(s('|u1'), '93 19 03 04 01'))).toBe(true);
    const seen = collect(frames).outputs[0] as Seen;
    expect(seen.routed).toEqual(Array.from(rows));
    expect(seen.routedShape).toEqual([25, 3, 4, 1]);
  });

  it('a utility reply: success wraps the value, failure carries the message', () => {
    const ok = encodeUtilityReply(L, 0, { callId: 7, failure: null, result: true }, 1);
    expect(ok).toEqual([hex('98 00 90 c0', f64(1), '93 07 c0 92 c0 c3', 'c0 c0 c0')]);
    expect(collect(ok).utility).toEqual([[7, null, true]]);
    const msg = 'Call to foo method failed: no';
    const failed = encodeUtilityReply(L, 0, { callId: 8, failure: msg, result: null }, 1);
    expect(failed).toEqual([hex('98 00 90 c0', f64(1), '93 08', s(msg), 'c0', 'c0 c0 c0')]);
    expect(collect(failed).utility).toEqual([[8, msg, null]]);
  });

  it('ENGINE_CORE_DEAD is one frame of those ASCII bytes', () => {
    expect(ENGINE_CORE_DEAD).toEqual(Buffer.from('454e47494e455f434f52455f44454144', 'hex'));
    expect(collect([ENGINE_CORE_DEAD]).dead).toBe(true);
  });
});
