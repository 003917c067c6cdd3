/**
 * The top-level `prompt_logprobs` of a generate answer in every form: the byte writers against the
 * objects oracle, vLLM's list with each dict in Python's key order (checked on the JSON text, since
 * JSON.parse reorders integer keys), the packed float32 array, msgpack's bin, missing positions,
 * and the client's decoder of both forms.
 */
import { unpack } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { decodePromptLogprobs } from '../../src/client/prompt-logprobs.js';
import { encodeGenerateResponse } from '../../src/protocol/generate-response.js';
import type { PromptLogprobColumns } from '../../src/protocol/response-columns.js';
import { stringifyGenerateResponse } from '../../src/protocol/response-object.js';
import { makeChoice, makeResponse } from './columns-fixture.js';

const PROMPT = [4, 5, 7, 3];

/** k = 2 over a 4-token prompt: the prompt token at entry 0, then the two best. */
const COLUMNS: PromptLogprobColumns = {
  promptLength: 4,
  positions: 3,
  width: 3,
  // Position 1: the prompt token 5 is the second best (it comes again at entry 2).
  // Position 2: 7 is the fourth best, outside the two. Position 3: 3 is the best.
  ids: Int32Array.from([5, 9, 5, 7, 1, 2, 3, 3, 8]),
  logprobs: Float32Array.from([-1.5, -0.25, -1.5, -3, -0.5, -1, -0.125, -0.125, -2.5]),
  ranks: Int32Array.from([2, 1, 2, 4, 1, 2, 1, 1, 2]),
};

function response(prompt: PromptLogprobColumns | null) {
  return makeResponse(
    [makeChoice({ completion: 1, promptLen: PROMPT.length, seed: 3 })],
    PROMPT.length,
    {
      promptLogprobs: prompt,
    },
  );
}

const LEGACY_TEXT =
  '[null,' +
  '{"5":{"logprob":-1.5,"rank":2,"decoded_token":null},"9":{"logprob":-0.25,"rank":1,"decoded_token":null}},' +
  '{"7":{"logprob":-3,"rank":4,"decoded_token":null},"1":{"logprob":-0.5,"rank":1,"decoded_token":null},' +
  '"2":{"logprob":-1,"rank":2,"decoded_token":null}},' +
  '{"3":{"logprob":-0.125,"rank":1,"decoded_token":null},"8":{"logprob":-2.5,"rank":2,"decoded_token":null}}]';

function packedFloats(v: { data: string | Uint8Array; shape: number[]; dtype: string }) {
  expect(v.dtype).toBe('float32');
  const bytes = typeof v.data === 'string' ? Buffer.from(v.data, 'base64') : Buffer.from(v.data);
  expect(bytes.length).toBe(4 * v.shape[0]!);
  return Array.from(new Float32Array(new Uint8Array(bytes).buffer));
}

describe('prompt_logprobs in the answer', () => {
  it("legacy: vLLM's list, null first, each dict with the prompt token's key first", () => {
    const text = encodeGenerateResponse(response(COLUMNS), 'legacy').toString();
    expect(text).toContain(`"prompt_logprobs":${LEGACY_TEXT},"kv_transfer_params"`);
    // The objects oracle writes the same text (its own Map-ordered dicts, spliced in).
    expect(stringifyGenerateResponse(response(COLUMNS), true)).toContain(LEGACY_TEXT);
  });

  it("packed and msgpack: the prompt tokens' float32 logprobs, -9999 at position 0", () => {
    const json = JSON.parse(encodeGenerateResponse(response(COLUMNS), 'packed').toString());
    expect(json.prompt_logprobs.shape).toEqual([4]);
    expect(packedFloats(json.prompt_logprobs)).toEqual([-9999, -1.5, -3, -0.125]);
    expect(JSON.parse(stringifyGenerateResponse(response(COLUMNS), false))).toEqual(json);
    const mp = unpack(encodeGenerateResponse(response(COLUMNS), 'msgpack')) as {
      prompt_logprobs: { data: Uint8Array; shape: number[]; dtype: string };
    };
    expect(mp.prompt_logprobs.data).toBeInstanceOf(Uint8Array);
    expect(packedFloats(mp.prompt_logprobs)).toEqual([-9999, -1.5, -3, -0.125]);
  });

  it('null when not asked, in every form', () => {
    for (const form of ['packed', 'legacy'] as const)
      expect(
        JSON.parse(encodeGenerateResponse(response(null), form).toString()).prompt_logprobs,
      ).toBeNull();
    expect(
      (unpack(encodeGenerateResponse(response(null), 'msgpack')) as Record<string, unknown>)
        .prompt_logprobs,
    ).toBeNull();
  });

  it('positions the engine did not send are missing: null in the list, -9999 packed', () => {
    const part: PromptLogprobColumns = {
      ...COLUMNS,
      positions: 1,
      ids: COLUMNS.ids.slice(0, 3),
      logprobs: COLUMNS.logprobs.slice(0, 3),
      ranks: COLUMNS.ranks.slice(0, 3),
    };
    const legacy = JSON.parse(encodeGenerateResponse(response(part), 'legacy').toString());
    expect(legacy.prompt_logprobs).toHaveLength(4);
    expect(legacy.prompt_logprobs[0]).toBeNull();
    expect(Object.keys(legacy.prompt_logprobs[1]).sort()).toEqual(['5', '9']);
    expect(legacy.prompt_logprobs.slice(2)).toEqual([null, null]);
    const packed = JSON.parse(encodeGenerateResponse(response(part), 'packed').toString());
    expect(packedFloats(packed.prompt_logprobs)).toEqual([-9999, -1.5, -9999, -9999]);
  });

  it('floors -inf and NaN at -9999, and refuses columns that disagree', () => {
    const odd = { ...COLUMNS, logprobs: COLUMNS.logprobs.slice() };
    odd.logprobs[0] = Number.NEGATIVE_INFINITY;
    odd.logprobs[3] = Number.NaN;
    const packed = JSON.parse(encodeGenerateResponse(response(odd), 'packed').toString());
    expect(packedFloats(packed.prompt_logprobs)).toEqual([-9999, -9999, -9999, -0.125]);
    const legacy = encodeGenerateResponse(response(odd), 'legacy').toString();
    expect(legacy).toContain('{"5":{"logprob":-1.5,"rank":2'); // entry 2's value: the last one
    expect(legacy).toContain('{"7":{"logprob":-9999,"rank":4');
    const short = { ...COLUMNS, ids: COLUMNS.ids.slice(1) };
    expect(() => encodeGenerateResponse(response(short), 'packed')).toThrow(/8 ids/);
    const long = { ...COLUMNS, promptLength: 3 };
    expect(() => encodeGenerateResponse(response(long), 'legacy')).toThrow(/3 positions/);
  });
});

describe('decodePromptLogprobs (the client)', () => {
  it('reads the legacy list by rank back into the engine columns', () => {
    const body = JSON.parse(encodeGenerateResponse(response(COLUMNS), 'legacy').toString());
    expect(decodePromptLogprobs(body.prompt_logprobs, PROMPT, 2)).toEqual(COLUMNS);
  });

  it('reads the packed array as width-1 columns of the prompt ids', () => {
    const body = JSON.parse(encodeGenerateResponse(response(COLUMNS), 'packed').toString());
    const d = decodePromptLogprobs(body.prompt_logprobs, PROMPT, 2)!;
    expect(d.width).toBe(1);
    expect(Array.from(d.ids)).toEqual([5, 7, 3]);
    expect(Array.from(d.logprobs)).toEqual([-1.5, -3, -0.125]);
    expect(decodePromptLogprobs(null, PROMPT, 2)).toBeNull();
  });

  it('refuses a list that does not fit the prompt, naming where', () => {
    expect(() => decodePromptLogprobs([null, {}], PROMPT, 1)).toThrow(/2 entries for 4 tokens/);
    expect(() =>
      decodePromptLogprobs([null, { 9: { logprob: -1, rank: 1 } }, null, null], PROMPT, 1),
    ).toThrow(/\[1\].*prompt token 5/);
  });
});
