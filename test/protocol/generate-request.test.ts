import { pack, unpack } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { RingserveError } from '../../src/errors.js';
import {
  type GenerateRequestOptions,
  MAX_N,
  parseGenerateRequest,
} from '../../src/protocol/generate-request.js';
import { MAX_STOP_STRINGS, STOP_BYTES_LIMIT } from '../../src/protocol/stop-strings.js';

const OPTS: GenerateRequestOptions = {
  vocabSize: 1000,
  maxModelLen: 64,
  defaultReturnSamplingMask: false,
  defaultReturnRoutedExperts: false,
};

const PRIORITY_OPTS: GenerateRequestOptions = { ...OPTS, priorityScheduling: true };

const base = (sp: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) => ({
  token_ids: [1, 2, 3],
  sampling_params: sp,
  ...extra,
});

/** The 400 that parsing `body` throws, checked for code, status and param. */
function rejection(body: unknown, param: string | null, opts = OPTS): RingserveError {
  try {
    parseGenerateRequest(body, opts);
  } catch (err) {
    expect(err).toBeInstanceOf(RingserveError);
    const e = err as RingserveError;
    expect(e.statusCode).toBe(400);
    expect(e.param).toBe(param);
    return e;
  }
  throw new Error(`accepted ${JSON.stringify(body)}`);
}

describe('parseGenerateRequest: defaults', () => {
  it('normalizes a minimal body with the contract defaults', () => {
    const r = parseGenerateRequest(base(), OPTS);
    expect(r.promptTokenIds).toEqual(Int32Array.from([1, 2, 3]));
    expect(r).toMatchObject({
      requestId: null,
      model: null,
      stream: false,
      includeUsage: false,
      continuousUsageStats: false,
      cacheSalt: null,
      priority: 0,
      kvTransferParams: null,
      packed: null,
      n: 1,
      stop: [],
      detokenize: true,
      skipSpecialTokens: true,
      includeStopStrInOutput: false,
    });
    expect(r.params).toEqual({
      temperature: 1,
      topP: 1,
      topK: 0,
      minP: 0,
      seed: null,
      maxTokens: 61,
      minTokens: 0,
      stopTokenIds: new Int32Array(0),
      ignoreEos: false,
      presencePenalty: 0,
      frequencyPenalty: 0,
      repetitionPenalty: 1,
      logprobs: false,
      topLogprobs: 0,
      promptLogprobs: -1,
      returnSamplingMask: false,
      returnRoutedExperts: false,
      routedExpertsPromptStart: 0,
    });
  });

  it('takes the server-wide defaults for the two switches, and the request overrides them', () => {
    const on = { ...OPTS, defaultReturnSamplingMask: true, defaultReturnRoutedExperts: true };
    expect(parseGenerateRequest(base(), on).params).toMatchObject({
      returnSamplingMask: true,
      returnRoutedExperts: true,
    });
    const off = parseGenerateRequest(
      base({ return_sampling_mask: false, return_routed_experts: null }),
      on,
    );
    expect(off.params.returnSamplingMask).toBe(false);
    expect(off.params.returnRoutedExperts).toBe(true);
  });

  it('treats null like absent everywhere', () => {
    const nulls = Object.fromEntries(
      [
        'temperature',
        'top_p',
        'top_k',
        'min_p',
        'seed',
        'max_tokens',
        'min_tokens',
        'stop',
        'stop_token_ids',
        'ignore_eos',
        'logprobs',
        'prompt_logprobs',
        'detokenize',
        'n',
        'skip_special_tokens',
        'include_stop_str_in_output',
        'presence_penalty',
        'frequency_penalty',
        'repetition_penalty',
        'routed_experts_prompt_start',
      ].map((k) => [k, null]),
    );
    const top = {
      request_id: null,
      model: null,
      stream: null,
      stream_options: null,
      cache_salt: null,
      priority: null,
      kv_transfer_params: null,
      packed: null,
    };
    expect(parseGenerateRequest(base(nulls, top), OPTS)).toEqual(
      parseGenerateRequest(base(), OPTS),
    );
  });

  it('ignores unknown fields at both levels', () => {
    const r = parseGenerateRequest(
      base({ best_of: 3, guided_json: {} }, { messages: [], foo: 1 }),
      OPTS,
    );
    expect(r.params.maxTokens).toBe(61);
  });
});

describe('parseGenerateRequest: values', () => {
  it('reads every field', () => {
    const r = parseGenerateRequest(
      {
        token_ids: [0, 999],
        request_id: 'abc',
        model: 'sim-tiny',
        stream: true,
        stream_options: { include_usage: true, continuous_usage_stats: true },
        cache_salt: 'salt',
        priority: -5,
        kv_transfer_params: { do_remote_prefill: true },
        packed: false,
        sampling_params: {
          n: 1,
          temperature: 0,
          top_p: 0.97,
          top_k: 512,
          min_p: 0.05,
          seed: 1234,
          max_tokens: 10,
          min_tokens: 2,
          stop: ['</s>', '\n\n'],
          stop_token_ids: [7, 8],
          ignore_eos: true,
          logprobs: 0,
          prompt_logprobs: null,
          detokenize: false,
          skip_special_tokens: false,
          include_stop_str_in_output: true,
          presence_penalty: -2,
          frequency_penalty: 2,
          repetition_penalty: 1.1,
          routed_experts_prompt_start: 1,
          return_sampling_mask: true,
          return_routed_experts: true,
        },
      },
      PRIORITY_OPTS,
    );
    expect(r).toMatchObject({
      requestId: 'abc',
      model: 'sim-tiny',
      stream: true,
      includeUsage: true,
      continuousUsageStats: true,
      cacheSalt: 'salt',
      priority: -5,
      kvTransferParams: { do_remote_prefill: true },
      packed: false,
      n: 1,
      stop: ['</s>', '\n\n'],
      detokenize: false,
      skipSpecialTokens: false,
      includeStopStrInOutput: true,
    });
    expect(parseGenerateRequest(base({ n: 4 }), OPTS).n).toBe(4);
    expect(r.params).toEqual({
      temperature: 0,
      topP: 0.97,
      topK: 512,
      minP: 0.05,
      seed: 1234,
      maxTokens: 10,
      minTokens: 2,
      stopTokenIds: Int32Array.from([7, 8]),
      ignoreEos: true,
      presencePenalty: -2,
      frequencyPenalty: 2,
      repetitionPenalty: 1.1,
      logprobs: true,
      topLogprobs: 0,
      promptLogprobs: -1,
      returnSamplingMask: true,
      returnRoutedExperts: true,
      routedExpertsPromptStart: 1,
    });
  });

  it('maps the special values: top_k -1, seed -1, logprobs true/false, a single stop string', () => {
    const p = (sp: Record<string, unknown>) => parseGenerateRequest(base(sp), OPTS);
    expect(p({ top_k: -1 }).params.topK).toBe(0);
    expect(p({ top_k: 0 }).params.topK).toBe(0);
    expect(p({ top_k: 5000 }).params.topK).toBe(1000); // beyond the vocab keeps all of it
    expect(p({ seed: -1 }).params.seed).toBeNull();
    expect(p({ seed: 0 }).params.seed).toBe(0);
    expect(p({ seed: 2 ** 53 - 1 }).params.seed).toBe(2 ** 53 - 1);
    expect(p({ logprobs: true }).params).toMatchObject({ logprobs: true, topLogprobs: 1 });
    expect(p({ logprobs: false }).params).toMatchObject({ logprobs: false, topLogprobs: 0 });
    expect(p({ logprobs: null }).params).toMatchObject({ logprobs: false, topLogprobs: 0 });
    expect(p({ logprobs: 0 }).params).toMatchObject({ logprobs: true, topLogprobs: 0 });
    expect(p({ logprobs: 20 }).params).toMatchObject({ logprobs: true, topLogprobs: 20 });
    expect(p({}).params.promptLogprobs).toBe(-1);
    expect(p({ stop: 'END' }).stop).toEqual(['END']);
    expect(p({ max_tokens: 61 }).params.maxTokens).toBe(61);
    expect(p({ max_tokens: 5, min_tokens: 5 }).params.minTokens).toBe(5);
    expect(p({ temperature: 2, top_p: 1e-9, min_p: 1 }).params.temperature).toBe(2);
  });

  it('accepts a msgpack body, including int64 values that msgpackr decodes as bigint', () => {
    const body = unpack(
      pack(base({ seed: 2n ** 40n, max_tokens: 3n }, { priority: 1n })),
    ) as unknown;
    const r = parseGenerateRequest(body, PRIORITY_OPTS);
    expect(r.params.seed).toBe(2 ** 40);
    expect(r.params.maxTokens).toBe(3);
    expect(r.priority).toBe(1);
    rejection(unpack(pack(base({ seed: 2n ** 60n }))), 'sampling_params.seed');
    rejection({ token_ids: [1n, 2n ** 62n], sampling_params: {} }, 'token_ids[1]');
  });
});

describe('parseGenerateRequest: 400s naming the field', () => {
  it('rejects a body that is not an object', () => {
    for (const body of [null, [], 'x', 3, new Uint8Array(2)]) {
      const e = rejection(body, null);
      expect(e.code).toBe('RS_ERR_REQ_INVALID_BODY');
    }
  });

  it('checks token_ids: presence, type, length, each id', () => {
    expect(rejection({ sampling_params: {} }, 'token_ids').message).toBe('token_ids: is required');
    rejection({ token_ids: '1 2', sampling_params: {} }, 'token_ids');
    rejection({ token_ids: { 0: 1 }, sampling_params: {} }, 'token_ids');
    expect(rejection({ token_ids: [], sampling_params: {} }, 'token_ids').message).toContain(
      'at least 1',
    );
    expect(
      rejection({ token_ids: [1, 2, 3, 1000], sampling_params: {} }, 'token_ids[3]').message,
    ).toBe('token_ids[3]: must be in [0, 1000), got 1000');
    rejection({ token_ids: [-1], sampling_params: {} }, 'token_ids[0]');
    expect(rejection({ token_ids: [1, 2.5], sampling_params: {} }, 'token_ids[1]').message).toBe(
      'token_ids[1]: must be an integer, got 2.5',
    );
    rejection({ token_ids: [1, '2'], sampling_params: {} }, 'token_ids[1]');
    rejection({ token_ids: [1, null], sampling_params: {} }, 'token_ids[1]');
    // A hole in a sparse array reads as undefined.
    const sparse = [1, 2, 3];
    delete sparse[1];
    rejection({ token_ids: sparse, sampling_params: {} }, 'token_ids[1]');
    const tooLong = new Array(64).fill(1);
    expect(rejection({ token_ids: tooLong, sampling_params: {} }, 'token_ids').message).toContain(
      'no room to generate',
    );
  });

  it('requires sampling_params to be an object', () => {
    expect(rejection({ token_ids: [1] }, 'sampling_params').message).toBe(
      'sampling_params: is required',
    );
    rejection({ token_ids: [1], sampling_params: [] }, 'sampling_params');
    rejection({ token_ids: [1], sampling_params: 'greedy' }, 'sampling_params');
  });

  it.each([
    ['n', 0],
    ['n', MAX_N + 1],
    ['n', 1.5],
    ['n', '2'],
    ['temperature', -0.1],
    ['temperature', 2.01],
    ['temperature', 'hot'],
    ['temperature', true],
    ['top_p', 0],
    ['top_p', 1.0001],
    ['top_p', -1],
    ['top_k', -2],
    ['top_k', 1.5],
    ['top_k', 2 ** 31],
    ['min_p', -0.01],
    ['min_p', 1.01],
    ['seed', 1.5],
    ['seed', 2 ** 53],
    ['seed', 'abc'],
    ['max_tokens', 0],
    ['max_tokens', -1],
    ['max_tokens', 3.5],
    ['min_tokens', -1],
    ['min_tokens', 62],
    ['stop', 3],
    ['stop', ''],
    ['stop', { a: 1 }],
    ['stop_token_ids', 5],
    ['stop_token_ids', '5'],
    ['ignore_eos', 1],
    ['ignore_eos', 'true'],
    ['logprobs', -1],
    ['logprobs', 21],
    ['logprobs', 0.5],
    ['logprobs', 'yes'],
    ['prompt_logprobs', -1],
    ['prompt_logprobs', 21],
    ['prompt_logprobs', true],
    ['detokenize', 0],
    ['skip_special_tokens', 'no'],
    ['include_stop_str_in_output', []],
    ['presence_penalty', 2.5],
    ['presence_penalty', -2.5],
    ['frequency_penalty', 3],
    ['repetition_penalty', 0],
    ['repetition_penalty', -1],
    ['repetition_penalty', 'x'],
    ['routed_experts_prompt_start', -1],
    ['routed_experts_prompt_start', 4],
    ['return_sampling_mask', 1],
    ['return_routed_experts', 'true'],
  ])('rejects sampling_params.%s = %j', (key, value) => {
    const e = rejection(base({ [key]: value }), `sampling_params.${key}`);
    expect(e.message.startsWith(`sampling_params.${key}: `)).toBe(true);
  });

  it('rejects non-finite numbers as numbers', () => {
    rejection(base({ temperature: Number.NaN }), 'sampling_params.temperature');
    rejection(base({ top_p: Number.POSITIVE_INFINITY }), 'sampling_params.top_p');
  });

  it('names array elements of stop and stop_token_ids', () => {
    expect(rejection(base({ stop: ['a', ''] }), 'sampling_params.stop[1]').message).toBe(
      'sampling_params.stop[1]: must not be an empty string',
    );
    rejection(base({ stop: ['a', 3] }), 'sampling_params.stop[1]');
    rejection(base({ stop_token_ids: [1, 1000] }), 'sampling_params.stop_token_ids[1]');
    rejection(base({ stop_token_ids: [1, 'x'] }), 'sampling_params.stop_token_ids[1]');
  });

  it('cuts max_tokens past max_model_len to the room left (the completion ends at the context)', () => {
    const p = (sp: Record<string, unknown>) => parseGenerateRequest(base(sp), OPTS);
    expect(p({ max_tokens: 62 }).params.maxTokens).toBe(61);
    expect(p({ max_tokens: 2 ** 31 - 1 }).params.maxTokens).toBe(61);
    expect(p({ max_tokens: 62, min_tokens: 61 }).params.minTokens).toBe(61);
    rejection(base({ max_tokens: 62, min_tokens: 62 }), 'sampling_params.min_tokens');
    // Only a prompt that leaves no room is refused.
    rejection({ token_ids: new Array(64).fill(1), sampling_params: {} }, 'token_ids');
    expect(
      rejection(base({ max_tokens: 5, min_tokens: 6 }), 'sampling_params.min_tokens').message,
    ).toBe('sampling_params.min_tokens: must be in [0, 5], got 6');
  });

  it.each([
    ['request_id', 5],
    ['request_id', ''],
    ['request_id', 'x'.repeat(1025)],
    ['model', 3],
    ['stream', 'yes'],
    ['cache_salt', ''],
    ['cache_salt', 'x'.repeat(1025)],
    ['cache_salt', 7],
    ['priority', 1.5],
    ['priority', 2 ** 31],
    ['kv_transfer_params', 'x'],
    ['kv_transfer_params', [1]],
    ['features', {}],
    ['features', { mm_hashes: ['x'] }],
    ['packed', 'false'],
    ['stream_options', 'x'],
  ])('rejects top-level %s = %j', (key, value) => {
    rejection(base({}, { stream: key === 'stream_options', [key]: value }), key);
  });

  it('checks stream_options members, and refuses them without stream', () => {
    rejection(
      base({}, { stream: true, stream_options: { include_usage: 1 } }),
      'stream_options.include_usage',
    );
    rejection(
      base({}, { stream: true, stream_options: { continuous_usage_stats: 'y' } }),
      'stream_options.continuous_usage_stats',
    );
    expect(
      rejection(base({}, { stream_options: { include_usage: true } }), 'stream_options').message,
    ).toBe('stream_options: is only allowed when stream is true');
  });

  it('refuses what this server cannot honour, naming the field', () => {
    expect(rejection(base({ n: 2 }, { stream: true }), 'sampling_params.n').message).toContain(
      'without stream only',
    );
    for (const value of [0, 1, 5]) {
      expect(
        rejection(
          base({ prompt_logprobs: value }, { stream: true }),
          'sampling_params.prompt_logprobs',
        ).message,
      ).toContain('without stream only');
      expect(
        parseGenerateRequest(base({ prompt_logprobs: value }), OPTS).params.promptLogprobs,
      ).toBe(value);
    }
    expect(rejection(base({}, { priority: 3 }), 'priority').message).toContain(
      '--scheduling-policy priority',
    );
    expect(parseGenerateRequest(base({}, { priority: 3 }), PRIORITY_OPTS).priority).toBe(3);
    expect(parseGenerateRequest(base({}, { priority: 0 }), OPTS).priority).toBe(0);
  });

  it('holds stop strings to what the output side can store: count, total bytes', () => {
    const stop = (v: unknown) => parseGenerateRequest(base({ stop: v }), OPTS).stop;
    expect(stop(new Array(MAX_STOP_STRINGS).fill('a'))).toHaveLength(MAX_STOP_STRINGS);
    expect(
      rejection(base({ stop: new Array(MAX_STOP_STRINGS + 1).fill('a') }), 'sampling_params.stop')
        .message,
    ).toContain(`at most ${MAX_STOP_STRINGS} stop strings`);
    expect(stop(['é'.repeat(STOP_BYTES_LIMIT / 2)])).toHaveLength(1);
    expect(
      rejection(base({ stop: ['é'.repeat(STOP_BYTES_LIMIT / 2), 'x'] }), 'sampling_params.stop')
        .message,
    ).toContain('1024 UTF-8 bytes');
    rejection(base({ stop: 'x'.repeat(STOP_BYTES_LIMIT + 1) }), 'sampling_params.stop');
  });

  it('shows a long bad string shortened in the message', () => {
    const e = rejection(base({ temperature: 'x'.repeat(500) }), 'sampling_params.temperature');
    expect(e.message.length).toBeLessThan(120);
  });
});

describe('parseGenerateRequest: free-form kv_transfer_params', () => {
  const nested = (depth: number): Record<string, unknown> => {
    let v: Record<string, unknown> = { leaf: 1 };
    for (let i = 1; i < depth; i++) v = { a: v };
    return v;
  };

  it('bounds the depth at parse time, with no recursion a deep value could exhaust', () => {
    expect(parseGenerateRequest(base({}, { kv_transfer_params: nested(32) }), OPTS)).toBeTruthy();
    for (const depth of [33, 5000, 200_000]) {
      const e = rejection(base({}, { kv_transfer_params: nested(depth) }), 'kv_transfer_params');
      expect(e.message).toContain('deeper than 32');
    }
    let arrays: unknown = 1;
    for (let i = 0; i < 100_000; i++) arrays = [arrays];
    rejection(base({}, { kv_transfer_params: { x: arrays } }), 'kv_transfer_params');
  });

  it('bounds the number of values', () => {
    const wide = { list: new Array(10_001).fill(0) };
    expect(
      rejection(base({}, { kv_transfer_params: wide }), 'kv_transfer_params').message,
    ).toContain('more than 10000 values');
  });

  it('carries msgpack integers within 2^53 as numbers and refuses those beyond, naming the path', () => {
    const ok = unpack(pack(base({}, { kv_transfer_params: { n: [2n ** 40n] } }))) as unknown;
    expect(parseGenerateRequest(ok, OPTS).kvTransferParams).toEqual({ n: [2 ** 40] });
    const big = unpack(pack(base({}, { kv_transfer_params: { a: { b: 2n ** 60n } } }))) as unknown;
    expect(rejection(big, 'kv_transfer_params.a.b').message).toContain('2^53');
    const list = unpack(
      pack(base({}, { kv_transfer_params: { a: [1, -(2n ** 63n)] } })),
    ) as unknown;
    rejection(list, 'kv_transfer_params.a[1]');
  });

  it('refuses values no JSON answer could carry back', () => {
    rejection(base({}, { kv_transfer_params: { x: Number.NaN } }), 'kv_transfer_params.x');
    rejection(base({}, { kv_transfer_params: { x: new Date(0) } }), 'kv_transfer_params.x');
    rejection(base({}, { kv_transfer_params: { x: new Map() } }), 'kv_transfer_params.x');
    const bytes = { x: new Uint8Array([1, 2]) };
    expect(
      parseGenerateRequest(base({}, { kv_transfer_params: bytes }), OPTS).kvTransferParams,
    ).toBe(bytes);
  });
});
