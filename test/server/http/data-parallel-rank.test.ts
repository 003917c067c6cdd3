/**
 * vLLM's `X-data-parallel-rank` header (src/server/main/http/data-parallel-rank.ts): absent is no
 * rank; an integer in [0, --data-parallel-size) is the rank; anything else is the coded 400 naming
 * the header. The coordinator puts the rank into the ADD of every choice of every prompt (n
 * fan-out, an OpenAI completion's batched prompts), and no rank as null.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { RingserveError } from '../../../src/errors.js';
import { parseGenerateRequest } from '../../../src/protocol/generate-request.js';
import { parseCompletionBody } from '../../../src/protocol/openai-completion-request.js';
import { toGenerateRequest } from '../../../src/protocol/openai-request.js';
import {
  DP_RANK_FIELD,
  DP_RANK_HEADER,
  dataParallelRank,
} from '../../../src/server/main/http/data-parallel-rank.js';
import {
  type CoordinatorRig,
  FakeReply,
  generateBody,
  startCoordinatorRig,
} from '../coordinator-rig.js';

/** The coded error a header value gets, or a failure when it is accepted. */
function refusal(header: string | string[], size: number): RingserveError {
  try {
    dataParallelRank(header, size);
  } catch (error) {
    expect(error).toBeInstanceOf(RingserveError);
    return error as RingserveError;
  }
  throw new Error(`${JSON.stringify(header)} was accepted with size ${size}`);
}

describe('the X-data-parallel-rank header', () => {
  it('is read under its lower-cased name, as Node keys every header', () => {
    expect(DP_RANK_HEADER).toBe('x-data-parallel-rank');
    expect(DP_RANK_FIELD.toLowerCase()).toBe(DP_RANK_HEADER);
  });

  it('absent: no rank', () => {
    expect(dataParallelRank(undefined, 1)).toBeNull();
    expect(dataParallelRank(undefined, 4)).toBeNull();
  });

  it('takes every rank in [0, --data-parallel-size)', () => {
    expect(dataParallelRank('0', 1)).toBe(0);
    expect(dataParallelRank('0', 4)).toBe(0);
    expect(dataParallelRank('3', 4)).toBe(3); // N - 1
    expect(dataParallelRank('255', 256)).toBe(255);
  });

  it("parses as vLLM's int() does: surrounding whitespace, a sign, leading zeros", () => {
    expect(dataParallelRank(' 1', 2)).toBe(1);
    expect(dataParallelRank('1 ', 2)).toBe(1);
    expect(dataParallelRank('+1', 2)).toBe(1);
    expect(dataParallelRank('01', 2)).toBe(1);
    expect(Object.is(dataParallelRank('-0', 2), 0)).toBe(true);
  });

  it('refuses a rank outside [0, size) with the coded 400 naming the header', () => {
    for (const [value, size] of [
      ['1', 1], // N on a size-1 cluster
      ['4', 4], // N
      ['-1', 4],
      ['99999999', 4],
    ] as const) {
      const e = refusal(value, size);
      expect(e.code).toBe('RS_ERR_REQ_INVALID_FIELD');
      expect(e.statusCode).toBe(400);
      expect(e.param).toBe('X-data-parallel-rank');
      expect(e.message).toContain(`is out of range [0, ${size})`);
      expect(e.message).toContain(`--data-parallel-size ${size}`);
    }
  });

  it('refuses what is not an integer with the coded 400 naming the header', () => {
    for (const value of ['abc', '1.5', '', ' ', '1e0', '0x1', '1_0', '1 2', '12345678901', '½']) {
      const e = refusal(value, 4);
      expect(e.code, value).toBe('RS_ERR_REQ_INVALID_FIELD');
      expect(e.statusCode).toBe(400);
      expect(e.param).toBe('X-data-parallel-rank');
      expect(e.message).toContain('must be an integer in [0, 4)');
    }
    expect(refusal('abc', 4).message).toContain('got "abc"');
    // Sent twice: two values are no one rank.
    expect(refusal('0, 1', 4).param).toBe('X-data-parallel-rank');
    expect(refusal(['0', '1'], 4).param).toBe('X-data-parallel-rank');
  });
});

const GENERATE_OPTIONS = {
  vocabSize: 1000,
  maxModelLen: 4096,
  defaultReturnSamplingMask: false,
  defaultReturnRoutedExperts: false,
};

describe('the rank in the ADD records', () => {
  let rig: CoordinatorRig;
  afterEach(async () => {
    await rig?.close();
  });

  it('goes into every choice of an n > 1 request; none is null', () => {
    rig = startCoordinatorRig();
    const parse = (id: string) =>
      parseGenerateRequest(generateBody({ n: 3 }, { request_id: id }), GENERATE_OPTIONS);
    rig.coordinator.submit(parse('pinned'), new FakeReply(), 'packed', undefined, null, 1);
    expect(rig.engine.adds.map((a) => a.dataParallelRank)).toEqual([1, 1, 1]);
    rig.coordinator.submit(parse('free'), new FakeReply(), 'packed');
    expect(rig.engine.adds.slice(3).map((a) => a.dataParallelRank)).toEqual([null, null, null]);
  });

  it('goes into every choice of every prompt of a batched OpenAI completion', () => {
    rig = startCoordinatorRig();
    const opts = { vocabSize: 1000, maxModelLen: 4096, maxLogprobs: 20 };
    const body = parseCompletionBody(
      {
        model: 'sim-tiny',
        prompt: [
          [5, 6, 7],
          [8, 9],
        ],
        n: 2,
        max_tokens: 4,
      },
      opts,
    );
    if (body.prompt.kind !== 'ids') throw new Error('expected token-id prompts');
    const request = toGenerateRequest(
      body.common,
      { kind: 'completion', prompts: body.prompt.ids, echo: null },
      'prompt',
      opts,
    );
    rig.coordinator.submit(request, new FakeReply(), 'completion', 'batched', null, 0);
    const adds = rig.engine.adds;
    expect(adds.map((a) => Array.from(a.promptTokenIds))).toEqual([
      [5, 6, 7],
      [5, 6, 7],
      [8, 9],
      [8, 9],
    ]);
    expect(adds.map((a) => a.dataParallelRank)).toEqual([0, 0, 0, 0]);
  });
});
