/**
 * ringserve's vLLM codec (src/engine/vllm/) against the independent mirror (mirror/, written from
 * vLLM's structs, importing nothing of src/), message kind by message kind, every layout, both
 * ways: what one encodes the other decodes to the same values, with vLLM's element counts. The
 * mirror's bytes are its own, so a misreading shared by the codec and its old golden vectors (a
 * field at the wrong index) fails here.
 */
import { describe, expect, it } from 'vitest';
import {
  decodeAbort,
  decodeAdd,
  decodeHandshake,
  decodeInit,
  decodeRegistration,
  decodeUtility,
  encodeAbort,
  encodeAdd,
  encodeHandshake,
  encodeInit,
  encodeRegistration,
  encodeUtility,
  encodeUtilityReply,
  getVllmLayout,
  guessLayout,
  OutputRecord,
  OutputsEncoder,
  OutputsReader,
  type OutputView,
  type RegistrationValues,
  type VllmAddRequest,
} from '../../../src/engine/vllm/index.js';
import { decodeKvParams, encodeKvParams } from '../../../src/engine/vllm/kv-params.js';
import { encodeMessage } from '../../../src/engine/vllm/zmtp.js';
import * as m from './mirror/codec.js';
import { registrationFor } from './mirror/engine-registration.js';

const BIG_CALL_ID = 2n ** 63n + 12_345n;

/** One output as ringserve's reader saw it, copied out of the reused view. */
interface Seen {
  id: string;
  tokens: number[];
  logprobs: number[] | null;
  top: number[];
  ranks: number[];
  finish: number;
  stop: number;
  cached: number | null;
  routed: number[] | null;
  masks: number[][] | null;
  /** kv_transfer_params, from the bytes the reader kept. */
  kv: Record<string, unknown> | null;
}

function seen(o: OutputView): Seen {
  const k = o.tokenCount;
  const w = o.logprobWidth - 1;
  let masks: number[][] | null = null;
  if (o.hasMask) {
    masks = [];
    let at = 0;
    for (let t = 0; t < k; t++) {
      const n = o.maskCounts[t]!;
      masks.push(Array.from(o.maskIds.subarray(at, at + n)));
      at += n;
    }
  }
  const routedBytes = o.routedData.subarray(o.routedOffset, o.routedOffset + o.routedLength);
  const kvBytes = o.body.subarray(o.kvParamsOffset, o.kvParamsOffset + o.kvParamsLength);
  return {
    kv: o.kvParamsLength === 0 ? null : decodeKvParams(kvBytes, 'kv'),
    id: o.requestId(),
    tokens: Array.from(o.tokenIds.subarray(0, k)),
    logprobs: o.hasLogprobs ? Array.from(o.logprobs.subarray(0, k)) : null,
    top: o.hasLogprobs ? Array.from(o.topIds.subarray(0, k * w)) : [],
    ranks: o.hasLogprobs ? Array.from(o.ranks.subarray(0, k)) : [],
    finish: o.finishReason,
    stop: o.stopReason,
    cached: o.hasPrefillStats ? o.numCachedTokens : null,
    routed: o.hasRoutedExperts ? Array.from(routedBytes) : null,
    masks,
  };
}

/** Two outputs of `era` as the mirror writes them: a first one of two tokens, a last one. */
function mirrorOutputs(era: m.Era): m.EngineCoreOutput[] {
  const masks = m.eraAtLeast(era, '0.28');
  return [
    {
      request_id: 'req-a',
      new_token_ids: [11, 12],
      new_logprobs: {
        tokenIds: [
          [11, 40, 41],
          [12, 42, 43],
        ],
        logprobs: [
          [-0.5, -0.25, -1],
          [-0.75, -0.5, -2],
        ],
        ranks: [2, 1],
      },
      prefill_stats: {
        num_prompt_tokens: 3,
        num_computed_tokens: 1,
        num_cached_tokens: 2,
        num_local_cached_tokens: 2,
        num_external_cached_tokens: 0,
      },
      routed_experts: {
        rows: 4,
        layers: 2,
        topk: 2,
        wide: false,
        ids: Array.from({ length: 16 }, (_, i) => i),
      },
      new_sampling_mask: masks
        ? {
            rows: [
              [11, 30],
              [12, 31, 32],
            ],
          }
        : null,
      kv_transfer_params: { do_remote_decode: true },
      ec_transfer_params: m.eraAtLeast(era, '0.26') ? { encoder: 1 } : undefined,
      trace_headers: { traceparent: 'x' },
    },
    {
      request_id: 'req-b',
      new_token_ids: [7],
      finish_reason: m.FinishReason.STOP,
      stop_reason: 5,
      routed_experts: { rows: 1, layers: 2, topk: 2, wide: false, ids: [9, 8, 7, 6] },
      new_sampling_mask: masks ? { rows: [[7]] } : null,
    },
  ];
}

describe.each(m.ERAS)('layout %s', (era) => {
  const layout = getVllmLayout(era);

  it("the mirror's EngineCoreOutput count names this layout", () => {
    expect(layout.output).toHaveLength(m.OUTPUT_FIELDS[era].length);
    expect([...layout.output]).toEqual([...m.OUTPUT_FIELDS[era]]);
    expect([...layout.request]).toEqual([...m.REQUEST_FIELDS[era]]);
  });

  it('outputs written by the mirror: ringserve reads them (auto detects the layout from a wrong guess)', () => {
    const frames = m.encodeOutputs(era, {
      outputs: mirrorOutputs(era),
      scheduler_stats: {
        num_running_reqs: 2,
        num_waiting_reqs: 1,
        step_counter: 9,
        current_wave: 0,
        kv_cache_usage: 0.5,
        prefix_cache_stats: {
          reset: false,
          requests: 1,
          queries: 30,
          hits: 20,
          preempted_requests: 0,
          preempted_queries: 0,
          preempted_hits: 0,
        },
        kv_cache_eviction_events: [],
      },
      timestamp: 12.5,
    });
    const guess = getVllmLayout(era === '0.22' ? '0.33' : '0.22');
    const reader = new OutputsReader(guess, 'auto');
    const outs: Seen[] = [];
    const stats: number[] = [];
    reader.read(frames, {
      output: (o) => outs.push(seen(o)),
      outputFailed: (_o, e) => {
        throw e;
      },
      schedulerStats: (s) =>
        stats.push(
          s.numRunningReqs,
          s.numWaitingReqs,
          s.kvCacheUsage,
          s.stepCounter,
          s.prefixQueries,
          s.prefixHits,
        ),
    });
    expect(reader.layout.name).toBe(era);
    expect(stats).toEqual([2, 1, 0.5, 9, 30, 20]);
    const masks = m.eraAtLeast(era, '0.28');
    expect(outs).toEqual([
      {
        id: 'req-a',
        tokens: [11, 12],
        logprobs: [-0.5, -0.75],
        top: [40, 41, 42, 43],
        ranks: [2, 1],
        finish: -1,
        stop: -1,
        cached: 2,
        routed: Array.from({ length: 16 }, (_, i) => i),
        masks: masks
          ? [
              [11, 30],
              [12, 31, 32],
            ]
          : null,
        kv: { do_remote_decode: true },
      },
      {
        id: 'req-b',
        tokens: [7],
        logprobs: null,
        top: [],
        ranks: [],
        finish: 0,
        stop: 5,
        cached: null,
        routed: [9, 8, 7, 6],
        masks: masks ? [[7]] : null,
        kv: null,
      },
    ]);
  });

  it('outputs written by ringserve (the headless engine): the mirror reads them with this layout', () => {
    const e = new OutputsEncoder(layout);
    const o = new OutputRecord();
    o.requestId = 'r-1';
    o.tokenIds = Int32Array.from([21, 22]);
    o.tokenCount = 2;
    o.logprobs = Float32Array.from([-0.5, -1.5]);
    o.ranks = Int32Array.from([1, 3]);
    o.topWidth = 2;
    o.topIds = Int32Array.from([21, 50, 51, 52]);
    o.topLogprobs = Float32Array.from([-0.5, -2, -1, -1.25]);
    o.finishReason = 1;
    o.prefill = {
      numPromptTokens: 4,
      numComputedTokens: 4,
      numCachedTokens: 0,
      numLocalCachedTokens: 0,
      numExternalCachedTokens: 0,
    };
    // 3 rows of 48 layers x 8: 1,152 bytes, an aux frame at vLLM's 256-byte threshold.
    o.routedBytes = Uint8Array.from({ length: 3 * 48 * 8 }, (_, i) => i % 128);
    o.routedRows = 3;
    o.routedLayers = 48;
    o.routedTopk = 8;
    if (layout.output.includes('new_sampling_mask')) {
      o.maskCounts = Int32Array.from([2, 1]);
      o.maskIds = Int32Array.from([21, 9, 22]);
      o.maskIdCount = 3;
    }
    o.kvTransferParams = { do_remote_prefill: true, remote_block_ids: [[4, 5]], remote_port: 5600 };
    e.begin(0, 1);
    e.output(o);
    const stats = {
      numRunningReqs: 1,
      numWaitingReqs: 0,
      kvCacheUsage: 0.25,
      prefixRequests: 1,
      prefixQueries: 4,
      prefixHits: 0,
      stepCounter: 3,
    };
    const frames = e.end(stats, 2.5, null);
    expect(frames.length).toBe(2);
    // The headless engine's step path writes the same message straight into its wire bytes.
    e.begin(0, 1);
    e.output(o);
    expect(e.endWire(stats, 2.5).equals(encodeMessage(frames))).toBe(true);
    const d = m.decodeOutputs(frames);
    expect(d.length).toBe(8);
    expect(d.outputLengths).toEqual([m.OUTPUT_FIELDS[era].length]);
    const out = d.message.outputs[0]!;
    expect(out.request_id).toBe('r-1');
    expect(out.new_token_ids).toEqual([21, 22]);
    expect(out.new_logprobs?.tokenIds).toEqual([
      [21, 21, 50],
      [22, 51, 52],
    ]);
    expect(out.new_logprobs?.logprobs).toEqual([
      [-0.5, -0.5, -2],
      [-1.5, -1, -1.25],
    ]);
    expect(out.new_logprobs?.ranks).toEqual([1, 3]);
    expect(out.finish_reason).toBe(1);
    expect(out.prefill_stats?.num_prompt_tokens).toBe(4);
    expect(out.routed_experts?.rows).toBe(3);
    expect(out.kv_transfer_params).toEqual(o.kvTransferParams);
    expect(out.routed_experts?.ids.slice(0, 3)).toEqual([0, 1, 2]);
    if (layout.output.includes('new_sampling_mask')) {
      expect(out.new_sampling_mask?.rows).toEqual([[21, 9], [22]]);
    }
    // The keys vLLM's Rust frontend and SMG require of scheduler_stats are all there.
    const s = d.message.scheduler_stats!;
    expect([s.num_running_reqs, s.step_counter, s.current_wave, s.kv_cache_usage]).toEqual([
      1, 3, 0, 0.25,
    ]);
    expect(s.prefix_cache_stats.preempted_hits).toBe(0);
  });

  it("ADD both ways, at this layout's length", () => {
    const req: VllmAddRequest = {
      requestId: 'add-1',
      promptTokenIds: [5, 6, 7],
      params: {
        maxTokens: 9,
        temperature: 0.75,
        topK: 20,
        seed: 4,
        logprobs: 2,
        eosTokenId: 999,
        stopTokenIds: [998],
        allStopTokenIds: [998, 999],
        routedExpertsPromptStart: 1,
      },
      arrivalTime: 100.5,
      cacheSalt: 'salt',
      priority: 2,
      clientIndex: 0,
    };
    // A prefill leg's kv_transfer_params (vLLM's toy proxy), in extra_args as vLLM reads them.
    const kv = { do_remote_decode: true, remote_block_ids: null, remote_port: null, ratio: 0.5 };
    req.params.kvTransferParams = encodeKvParams(kv);
    const payload = encodeAdd(layout, req);
    const d = m.decodeAdd(era, payload);
    expect(d.length).toBe(m.REQUEST_FIELDS[era].length);
    expect(d.request).toMatchObject({
      request_id: 'add-1',
      prompt_token_ids: [5, 6, 7],
      cache_salt: 'salt',
      priority: 2,
      client_index: 0,
      arrival_time: 100.5,
    });
    expect(d.request.sampling_params).toMatchObject({
      max_tokens: 9,
      temperature: 0.75,
      top_k: 20,
      seed: 4,
      logprobs: 2,
      _eos_token_id: 999,
      stop_token_ids: [998],
      routed_experts_prompt_start: 1,
      extra_args: { kv_transfer_params: kv },
    });
    const [type, back] = m.encodeAdd(era, { ...d.request, request_id: 'add-2' });
    expect(Array.from(type!)).toEqual([0]);
    const r = decodeAdd(layout, back!);
    expect(r.requestId).toBe('add-2');
    expect(Array.from(r.promptTokenIds)).toEqual([5, 6, 7]);
    expect(r.params).toMatchObject({
      maxTokens: 9,
      temperature: 0.75,
      topK: 20,
      seed: 4,
      logprobs: 2,
      eosTokenId: 999,
      routedExpertsPromptStart: 1,
    });
    expect(decodeKvParams(r.params.kvTransferParams!, 'kv')).toEqual(kv);
    // Bytes that are not one plain map are never sent (vLLM's input thread would die of them).
    req.params.kvTransferParams = Uint8Array.from([0x91, 0x01]);
    expect(() => encodeAdd(layout, req)).toThrow(/kv_transfer_params/);
  });

  it('registration both ways; the bridge tells this layout from what the engine registers with', () => {
    const values: RegistrationValues = {
      maxModelLen: 4096,
      numGpuBlocks: 100,
      blockSize: 16,
      dpStatsAddress: null,
      dtype: 'bfloat16',
      vllmVersion: `${layout.release}+ringserve`,
      worldSize: 1,
      dataParallelSize: 1,
      dataParallelRank: 0,
      maxNumSeqs: 128,
      maxNumBatchedTokens: 4096,
      supportsLora: false,
      maxLoras: 0,
      kvCacheSizeTokens: 1600,
      instanceId: 'i-1',
    };
    const mine = m.decodeRegistration(era, encodeRegistration(layout, values));
    expect(m.registrationEra(mine)).toBe(era);
    expect(mine.max_model_len).toBe(4096);
    for (const version of [m.DEFAULT_VLLM_VERSION[era], '0.1.dev15911+gec7aafc02']) {
      const theirs = registrationFor({
        era,
        vllmVersion: version,
        maxModelLen: 2048,
        numGpuBlocks: 50,
        blockSize: 16,
        rank: 0,
        overrides: {},
      });
      const reg = decodeRegistration(m.encodeRegistration(theirs));
      expect(reg.maxModelLen).toBe(2048);
      const guess = guessLayout(reg).layout.name;
      // From keys alone 0.23-0.25 and 0.26-0.27 register alike: the first output tells them apart.
      expect(guess).toBe(
        era === '0.22' && version.startsWith('0.1') && reg.keys.includes('block_size')
          ? '0.26'
          : era,
      );
    }
  });

  it('utility calls: a 64-bit call id is echoed exactly', () => {
    const [, call] = m.encodeUtilityCall({
      client_index: 0,
      call_id: BIG_CALL_ID,
      method: 'is_scheduler_paused',
      args: [],
    });
    const u = decodeUtility(call!);
    expect(u.callId).toBe(BIG_CALL_ID);
    const reply = m.decodeOutputs(
      encodeUtilityReply(layout, 0, { callId: u.callId, failure: null, result: false }, 1),
    );
    expect(reply.message.utility_output).toEqual({
      call_id: BIG_CALL_ID,
      failure_message: null,
      result: { value: false },
    });
    const rpc = m.decodeUtilityCall(
      encodeUtility({
        clientIndex: 0,
        callId: 7,
        method: 'collective_rpc',
        args: ['update_weights_from_path', null, ['/w'], null],
      }),
    );
    expect(rpc).toEqual({
      client_index: 0,
      call_id: 7n,
      method: 'collective_rpc',
      args: ['update_weights_from_path', null, ['/w'], null],
    });
    const failed = m.encodeOutputs(era, {
      utility_output: { call_id: 3n, failure_message: 'Call to x method failed: no', result: null },
    });
    const got: unknown[] = [];
    new OutputsReader(layout).read(failed, {
      output() {},
      utility: (id, f, r) => got.push(id, f, r),
    });
    expect(got).toEqual([3, 'Call to x method failed: no', null]);
  });
});

describe('handshake and ABORT, both ways', () => {
  it('HELLO, READY and the init message', () => {
    const hello = m.decodeStatus(
      encodeHandshake({ status: 'HELLO', local: false, headless: true, parallelConfigHash: null }),
    );
    expect(hello).toMatchObject({ status: 'HELLO', local: false, headless: true });
    expect(
      decodeHandshake(m.encodeStatus({ status: 'READY', local: false, headless: true })),
    ).toMatchObject({ status: 'READY', headless: true });
    const init = m.decodeInit(
      encodeInit({ inputs: ['tcp://127.0.0.1:1'], outputs: ['tcp://127.0.0.1:2'] }),
    );
    expect(init.addresses.inputs).toEqual(['tcp://127.0.0.1:1']);
    expect(init.addresses.coordinator_input).toBeNull();
    expect(init.parallel_config).toEqual({});
    const back = decodeInit(
      m.encodeInit({
        addresses: { ...init.addresses, outputs: ['tcp://h:3'] },
        parallel_config: {},
      }),
    );
    expect(back).toEqual({
      inputs: ['tcp://127.0.0.1:1'],
      outputs: ['tcp://h:3'],
      parallelConfig: null,
    });
  });

  it('ABORT', () => {
    expect(m.decodeAbort(encodeAbort(['a', 'b']))).toEqual(['a', 'b']);
    expect(decodeAbort(m.encodeAbort(['c'])[1]!)).toEqual(['c']);
  });
});
