import { unpack } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import {
  type DecodedChoice,
  decodeGenerateBody,
  type GenerateResult,
} from '../../src/client/decode.js';
import { checkInvariants } from '../../src/client/invariants.js';
import {
  CONTENT_TYPE,
  encodeGenerateResponse,
  GenerateResponseEncoder,
  type ResponseForm,
} from '../../src/protocol/generate-response.js';
import type {
  ChoiceColumns,
  GenerateResponseColumns,
} from '../../src/protocol/response-columns.js';
import { stringifyGenerateResponse } from '../../src/protocol/response-object.js';
import { makeChoice, makeResponse } from './columns-fixture.js';

const FORMS: ResponseForm[] = ['packed', 'legacy', 'msgpack'];

function decode(res: GenerateResponseColumns, form: ResponseForm): GenerateResult {
  return decodeGenerateBody(encodeGenerateResponse(res, form), CONTENT_TYPE[form]);
}

/** The decoded choice holds exactly the source columns. */
function expectSameArrays(d: DecodedChoice, c: ChoiceColumns): void {
  expect(d.index).toBe(c.index);
  expect(d.finishReason).toBe(c.finishReason);
  expect(d.stopReason).toBe(c.stopReason);
  expect(d.tokenIds).toEqual(Int32Array.from(c.tokenIds));
  expect(d.logprobs).toEqual(c.logprobs === null ? null : Float32Array.from(c.logprobs));
  if (c.maskCounts === null || c.maskIds === null) expect(d.mask).toBeNull();
  else
    expect(d.mask).toEqual({
      counts: Int32Array.from(c.maskCounts),
      ids: Int32Array.from(c.maskIds),
    });
  if (c.routing === null) expect(d.routedExperts).toBeNull();
  else {
    expect(d.routedExperts?.shape).toEqual([c.routing.rows, c.routing.layers, c.routing.topk]);
    expect(d.routedExperts?.start).toBe(c.routing.start);
    expect(Array.from(d.routedExperts?.data ?? [])).toEqual(Array.from(c.routing.data));
  }
  expect(d.weightVersions).toEqual(
    c.weightVersions === null ? null : Int32Array.from(c.weightVersions),
  );
}

describe('generate response: the contract example', () => {
  const choice: ChoiceColumns = {
    index: 0,
    tokenIds: Int32Array.from([11, 42, 3]),
    logprobs: Float32Array.from([-0.5, -1.25, -0.125]),
    maskCounts: Int32Array.from([1, 3, 1]),
    maskIds: Int32Array.from([11, 11, 42, 7, 3]),
    routing: {
      data: Uint8Array.from({ length: 20 }, (_, i) => i),
      rows: 5,
      layers: 2,
      topk: 2,
      start: 0,
    },
    weightVersions: null,
    finishReason: 'stop',
    stopReason: null,
  };
  const res = makeResponse([choice], 3);

  it('writes the packed form byte-compatible with the contract', () => {
    const body = JSON.parse(encodeGenerateResponse(res, 'packed').toString()) as Record<
      string,
      unknown
    >;
    expect(Object.keys(body)).toEqual([
      'request_id',
      'model',
      'created',
      'choices',
      'usage',
      'prompt_logprobs',
      'kv_transfer_params',
    ]);
    expect(body).toEqual({
      request_id: 'generate-tokens-abc',
      model: 'sim-qwen3-30b-a3b',
      created: 1764400000,
      choices: [
        {
          index: 0,
          finish_reason: 'stop',
          stop_reason: null,
          logprobs: null,
          token_ids: [11, 42, 3],
          completion_logprobs: { data: 'AAAAvwAAoL8AAAC+', shape: [3], dtype: 'float32' },
          sampling_mask: {
            ids: { data: 'CwAAAAsAAAAqAAAABwAAAAMAAAA=', shape: [5], dtype: 'int32' },
            counts: { data: 'AQAAAAMAAAABAAAA', shape: [3], dtype: 'int32' },
          },
          routed_experts: {
            data: Buffer.from(choice.routing!.data).toString('base64'),
            shape: [5, 2, 2],
            dtype: 'uint8',
            start: 0,
          },
        },
      ],
      usage: {
        prompt_tokens: 3,
        completion_tokens: 3,
        total_tokens: 6,
        prompt_tokens_details: null,
      },
      prompt_logprobs: null,
      kv_transfer_params: null,
    });
    const c0 = (body.choices as Record<string, unknown>[])[0] as Record<string, unknown>;
    expect(Object.keys(c0)).toEqual([
      'index',
      'finish_reason',
      'stop_reason',
      'logprobs',
      'token_ids',
      'completion_logprobs',
      'sampling_mask',
      'routed_experts',
    ]);
  });

  it('writes the legacy form with per-token logprob objects and int[][] masks', () => {
    const body = JSON.parse(encodeGenerateResponse(res, 'legacy').toString()) as {
      choices: Record<string, unknown>[];
    };
    const c0 = body.choices[0] as Record<string, unknown>;
    expect(c0).not.toHaveProperty('completion_logprobs');
    expect(c0.logprobs).toEqual({
      content: [
        // vLLM's legacy top_logprobs with k = 0: the sampled token alone.
        ...[
          [11, -0.5],
          [42, -1.25],
          [3, -0.125],
        ].map(([id, lp]) => ({
          token: `token_id:${id}`,
          logprob: lp,
          top_logprobs: [{ token: `token_id:${id}`, logprob: lp, bytes: null }],
          bytes: null,
        })),
      ],
    });
    expect(c0.sampling_mask).toEqual([[11], [11, 42, 7], [3]]);
    expect(c0.token_ids).toEqual([11, 42, 3]);
  });

  it('writes the msgpack form with bins and token_ids as an int32 packed array', () => {
    const body = unpack(encodeGenerateResponse(res, 'msgpack')) as {
      choices: Record<string, { data: Uint8Array; dtype: string; shape: number[] }>[];
    };
    const c0 = body.choices[0]!;
    expect(c0.token_ids?.dtype).toBe('int32');
    expect(c0.token_ids?.shape).toEqual([3]);
    expect(c0.token_ids?.data).toBeInstanceOf(Uint8Array);
    expect(Buffer.from(c0.completion_logprobs!.data).toString('base64')).toBe('AAAAvwAAoL8AAAC+');
    expect(body).toMatchObject({
      request_id: 'generate-tokens-abc',
      prompt_logprobs: null,
      kv_transfer_params: null,
    });
  });

  it('is what JSON.stringify of the straightforward object gives, for the packed form', () => {
    expect(JSON.parse(encodeGenerateResponse(res, 'packed').toString())).toEqual(
      JSON.parse(stringifyGenerateResponse(res, false)),
    );
  });
});

describe('generate response: all forms decode to identical arrays', () => {
  const cases: Array<[string, Parameters<typeof makeChoice>[0]]> = [
    ['everything', { promptLen: 50, completion: 400, seed: 3 }],
    [
      'nothing asked',
      { promptLen: 5, completion: 20, logprobs: false, mask: false, routing: false, seed: 4 },
    ],
    ['only logprobs', { promptLen: 5, completion: 20, mask: false, routing: false, seed: 5 }],
    ['uint16 routing', { promptLen: 9, completion: 30, experts: 512, seed: 6 }],
    [
      'prompt rows skipped',
      { promptLen: 40, completion: 10, routedExpertsPromptStart: 30, seed: 7 },
    ],
    ['weight versions', { promptLen: 4, completion: 16, weightVersions: true, seed: 8 }],
    [
      'shared memory views',
      { promptLen: 7, completion: 70, shared: true, weightVersions: true, seed: 9 },
    ],
    ['empty completion', { promptLen: 3, completion: 0, seed: 10 }],
  ];

  it.each(cases)('%s', (_name, options) => {
    const choice = makeChoice(options);
    const res = makeResponse([choice], options.promptLen);
    const decoded = FORMS.map((form) => decode(res, form));
    for (const d of decoded) {
      expect(d.requestId).toBe('generate-tokens-abc');
      expect(d.usage).toEqual({
        promptTokens: options.promptLen,
        completionTokens: options.completion,
        totalTokens: options.promptLen + options.completion,
        cachedTokens: null,
      });
      expectSameArrays(d.choices[0]!, choice);
      checkInvariants(d, options.promptLen);
    }
    expect(decoded[1]).toEqual(decoded[0]);
    expect(decoded[2]).toEqual(decoded[0]);
  });

  it('handles several choices, stop reasons, cached tokens and kv_transfer_params', () => {
    const a = {
      ...makeChoice({ promptLen: 6, completion: 12, index: 0, seed: 11 }),
      finishReason: 'stop' as const,
      stopReason: 151645,
    };
    const b = {
      ...makeChoice({ promptLen: 6, completion: 5, index: 1, seed: 12 }),
      finishReason: 'stop' as const,
      stopReason: '</answer>\n"',
    };
    const c = {
      ...makeChoice({ promptLen: 6, completion: 0, index: 2, seed: 13 }),
      finishReason: 'abort' as const,
    };
    const res = makeResponse([a, b, c], 6, {
      usage: { promptTokens: 6, completionTokens: 17, cachedTokens: 4 },
      kvTransferParams: { remote_host: 'ü-host', remote_port: 5600, ids: [1, 2] },
      requestId: 'id with "quotes" and ü',
    });
    const decoded = FORMS.map((form) => decode(res, form));
    for (const d of decoded) {
      expect(d.requestId).toBe('generate-tokens-id with "quotes" and ü');
      expect(d.usage?.cachedTokens).toBe(4);
      expect(d.kvTransferParams).toEqual({ remote_host: 'ü-host', remote_port: 5600, ids: [1, 2] });
      expect(d.choices.map((x) => x.stopReason)).toEqual([151645, '</answer>\n"', null]);
      expect(d.choices.map((x) => x.finishReason)).toEqual(['stop', 'stop', 'abort']);
      for (const [i, src] of [a, b, c].entries()) expectSameArrays(d.choices[i]!, src);
      checkInvariants(d, 6);
    }
  });

  it('narrows uint16 routing to uint8 when every id fits, and keeps uint16 otherwise', () => {
    const rows = 4;
    const fits = Uint16Array.from({ length: rows * 2 }, (_, i) => i * 30); // max 210
    const wide = Uint16Array.from(fits, (v, i) => (i === 3 ? 300 : v));
    const dtypeOf = (data: Uint16Array): string => {
      const choice = {
        ...makeChoice({ promptLen: 2, completion: 3, routing: false }),
        routing: { data, rows, layers: 1, topk: 2, start: 0 },
      };
      const body = JSON.parse(
        encodeGenerateResponse(makeResponse([choice], 2), 'packed').toString(),
      );
      return body.choices[0].routed_experts.dtype as string;
    };
    expect(dtypeOf(fits)).toBe('uint8');
    expect(dtypeOf(wide)).toBe('uint16');
  });

  it('legacy JSON holds the same values as the object-built legacy response', () => {
    const choice = makeChoice({ promptLen: 10, completion: 200, seed: 21, weightVersions: true });
    const res = makeResponse([choice], 10);
    const fromWriter = JSON.parse(encodeGenerateResponse(res, 'legacy').toString());
    const fromObjects = JSON.parse(stringifyGenerateResponse(res, true));
    // Logprob text differs (shortest float32 text vs. all double digits); the float32 values agree.
    type Entry = { logprob: number; top_logprobs: { logprob: number }[] };
    const f32 = (body: { choices: { logprobs: { content: Entry[] } }[] }) => {
      for (const entry of body.choices[0]!.logprobs.content) {
        entry.logprob = Math.fround(entry.logprob);
        for (const t of entry.top_logprobs) t.logprob = Math.fround(t.logprob);
      }
      return body;
    };
    expect(f32(fromWriter)).toEqual(f32(fromObjects));
    // The writer's text is the shorter one.
    expect(encodeGenerateResponse(res, 'legacy').length).toBeLessThan(
      stringifyGenerateResponse(res, true).length,
    );
  });

  it('an encoder reused across responses of different sizes gives the same bytes as a fresh one', () => {
    const encoder = new GenerateResponseEncoder();
    for (const [i, n] of [3000, 10, 500, 0, 1200].entries()) {
      const res = makeResponse([makeChoice({ promptLen: 8, completion: n, seed: 30 + i })], 8);
      for (const form of FORMS)
        expect(encoder.encode(res, form).equals(encodeGenerateResponse(res, form))).toBe(true);
    }
  });

  it('refuses inconsistent columns with RS_ERR_PROTOCOL_BAD_COLUMNS', () => {
    const good = makeChoice({ promptLen: 4, completion: 6, seed: 40 });
    const bad: ChoiceColumns[] = [
      { ...good, logprobs: new Float32Array(5) },
      { ...good, maskCounts: new Int32Array(6) },
      { ...good, maskIds: null },
      { ...good, routing: { ...good.routing!, rows: good.routing!.rows + 1 } },
      { ...good, weightVersions: new Int32Array(2) },
    ];
    for (const choice of bad) {
      for (const form of FORMS) {
        expect(() => encodeGenerateResponse(makeResponse([choice], 4), form)).toThrow(
          expect.objectContaining({ code: 'RS_ERR_PROTOCOL_BAD_COLUMNS' }),
        );
      }
    }
  });

  it('msgpack is smaller than packed JSON, which is much smaller than legacy', () => {
    const res = makeResponse([makeChoice({ promptLen: 100, completion: 2000, seed: 50 })], 100);
    const [packed, legacy, msgpack] = FORMS.map((form) => encodeGenerateResponse(res, form).length);
    expect(msgpack!).toBeLessThan(packed!);
    expect(packed!).toBeLessThan(legacy!);
  });
});
