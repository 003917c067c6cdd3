import { describe, expect, it } from 'vitest';
import { requestBody, requestLength } from '../../bench/loadtest/load-plan.js';
import type { LoadSpec } from '../../bench/loadtest/messages.js';

const SPEC: LoadSpec = {
  url: 'http://127.0.0.1:1',
  path: '/inference/v1/generate',
  concurrency: 64,
  promptTokens: 512,
  meanTokens: 4096,
  sigma: 0.5,
  minTokens: 256,
  maxTokens: 16_384,
  promptIdCeiling: 151_000,
  accept: 'json',
  seed: 1,
  requestTimeoutMs: 1000,
  sampleBodies: 0,
  sampleDir: null,
};

describe('the load plan', () => {
  it('draws the same lengths for the same seed and others for another', () => {
    const a = Array.from({ length: 50 }, (_, i) => requestLength(SPEC, i));
    expect(Array.from({ length: 50 }, (_, i) => requestLength(SPEC, i))).toEqual(a);
    expect(
      Array.from({ length: 50 }, (_, i) => requestLength({ ...SPEC, seed: 2 }, i)),
    ).not.toEqual(a);
  });

  it('has the asked mean, spread and bounds', () => {
    const n = 20_000;
    const lengths = Array.from({ length: n }, (_, i) => requestLength(SPEC, i));
    const mean = lengths.reduce((x, y) => x + y, 0) / n;
    expect(Math.abs(mean - 4096) / 4096).toBeLessThan(0.03);
    expect(Math.min(...lengths)).toBeGreaterThanOrEqual(256);
    expect(Math.max(...lengths)).toBeLessThanOrEqual(16_384);
    // A log-normal with sigma 0.5: the median sits below the mean (mean * e^(-sigma^2/2) = 3615).
    const median = [...lengths].sort((x, y) => x - y)[n / 2] as number;
    expect(median).toBeGreaterThan(3400);
    expect(median).toBeLessThan(3850);
  });

  it('gives every request of sigma 0 the same length', () => {
    const fixed = { ...SPEC, sigma: 0, meanTokens: 16 };
    expect(new Set(Array.from({ length: 100 }, (_, i) => requestLength(fixed, i)))).toEqual(
      new Set([16]),
    );
  });

  it('builds a valid generate body with a distinct prompt per request', () => {
    const a = JSON.parse(requestBody(SPEC, 0, 1000));
    const b = JSON.parse(requestBody(SPEC, 1, 1000));
    expect(a.token_ids).toHaveLength(512);
    expect(a.token_ids.every((id: number) => Number.isInteger(id) && id >= 0 && id < 151_000)).toBe(
      true,
    );
    expect(a.token_ids).not.toEqual(b.token_ids);
    expect(a.sampling_params).toMatchObject({
      max_tokens: 1000,
      ignore_eos: true,
      logprobs: 0,
      top_p: 0.97,
      top_k: 512,
    });
    expect(a.sampling_params.seed).not.toBe(b.sampling_params.seed);
    expect(requestBody(SPEC, 0, 1000)).toBe(requestBody(SPEC, 0, 1000));
  });
});
