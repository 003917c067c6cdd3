import { describe, expect, it } from 'vitest';
import { decodeGenerateBody, type GenerateResult } from '../../src/client/decode.js';
import { checkInvariants } from '../../src/client/invariants.js';
import { encodeGenerateResponse } from '../../src/protocol/generate-response.js';
import { makeChoice, makeResponse } from '../protocol/columns-fixture.js';

const PROMPT = 20;

function fresh(): GenerateResult {
  const choice = makeChoice({ promptLen: PROMPT, completion: 64, seed: 5, weightVersions: true });
  return decodeGenerateBody(
    encodeGenerateResponse(makeResponse([choice], PROMPT), 'packed'),
    'application/json',
  );
}

function violation(mutate: (r: GenerateResult) => void, pattern: RegExp): void {
  const r = fresh();
  mutate(r);
  expect(() => checkInvariants(r, PROMPT)).toThrow(
    expect.objectContaining({
      code: 'RS_ERR_CLIENT_INVARIANT',
      message: expect.stringMatching(pattern),
    }),
  );
}

describe('checkInvariants', () => {
  it('passes a well-formed answer', () => {
    expect(() => checkInvariants(fresh(), PROMPT)).not.toThrow();
  });

  it('catches each kind of violation', () => {
    const c = (r: GenerateResult) => r.choices[0]!;
    violation((r) => {
      c(r).logprobs = c(r).logprobs!.subarray(1);
    }, /63 logprobs for 64 tokens/);
    violation((r) => {
      c(r).logprobs![3] = 0.5;
    }, /logprob 0.5 at 3/);
    violation((r) => {
      c(r).logprobs![3] = Number.NaN;
    }, /logprob NaN/);
    violation((r) => {
      c(r).mask!.counts = c(r).mask!.counts.subarray(1);
    }, /63 mask counts/);
    violation((r) => {
      c(r).mask!.ids = c(r).mask!.ids.subarray(1);
    }, /mask/);
    violation((r) => {
      const { counts, ids } = c(r).mask!;
      let at = 0;
      for (let i = 0; i < counts.length; i++) {
        if (counts[i]! > 0) {
          for (let k = at; k < at + counts[i]!; k++) if (ids[k] === c(r).tokenIds[i]) ids[k] = -1;
          return;
        }
        at += counts[i]!;
      }
    }, /does not hold its sampled token/);
    violation((r) => {
      c(r).mask!.counts[0] = -1;
    }, /mask count -1/);
    violation((r) => {
      c(r).routedExperts!.start += 1;
    }, /routing start .*expected 20 \+ 64 - 1 - \d+ = /);
    violation((r) => {
      c(r).routedExperts!.shape[0] -= 1;
    }, /routing has/);
    violation((r) => {
      c(r).weightVersions = new Int32Array(3);
    }, /3 weight versions/);
    violation((r) => {
      c(r).finishReason = 'eos';
    }, /finish_reason eos/);
    violation((r) => {
      r.usage!.completionTokens = 63;
    }, /completion_tokens 63/);
    violation((r) => {
      r.usage!.promptTokens = 19;
    }, /prompt_tokens 19/);
    violation((r) => {
      r.usage!.totalTokens = 1;
    }, /total_tokens 1/);
  });

  it('checks the prompt length it is given against the routing start', () => {
    expect(() => checkInvariants(fresh(), PROMPT + 1)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_CLIENT_INVARIANT' }),
    );
  });
});
