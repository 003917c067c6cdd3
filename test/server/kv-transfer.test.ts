import { unpack } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { buildConfig } from '../../src/config.js';
import { RS_ERR_REQ_INVALID_FIELD } from '../../src/errors.js';
import { parseGenerateRequest } from '../../src/protocol/generate-request.js';
import { kvTransferFields } from '../../src/server/main/kv-transfer.js';

const OPTS = {
  vocabSize: 1000,
  maxModelLen: 4096,
  defaultReturnSamplingMask: false,
  defaultReturnRoutedExperts: false,
};
const prompt = [5, 6, 7, 8, 9];

function parse(extra: Record<string, unknown> = {}, tokens = prompt) {
  return parseGenerateRequest({ token_ids: tokens, sampling_params: {}, ...extra }, OPTS);
}

/** The handle a prefill instance answers for `tokens`. */
function handleFor(tokens = prompt, salt?: string): Record<string, unknown> {
  const request = parse(
    { kv_transfer_params: { do_remote_decode: true }, cache_salt: salt },
    tokens,
  );
  expect(kvTransferFields(request, 'r1', buildConfig({ model: 'tiny' }))).toEqual({
    pinKv: true,
    importKvTokens: 0,
    kvParams: null,
  });
  return request.kvTransferParams as Record<string, unknown>;
}

describe('kvTransferFields', () => {
  it('a prefill instance pins every request and answers a handle; a colocated one only when asked', () => {
    const prefill = buildConfig({ model: 'tiny', role: 'prefill' });
    const request = parse();
    expect(kvTransferFields(request, 'r1', prefill).pinKv).toBe(true);
    expect(request.kvTransferParams).toMatchObject({
      do_remote_prefill: true,
      remote_num_tokens: 5,
    });
    const both = buildConfig({ model: 'tiny' });
    expect(kvTransferFields(parse(), 'r2', both)).toEqual({
      pinKv: false,
      importKvTokens: 0,
      kvParams: null,
    });
  });

  it('a decode request with a live handle of its prompt imports it', () => {
    const decode = buildConfig({ model: 'tiny', role: 'decode' });
    const request = parse({ kv_transfer_params: handleFor() });
    expect(kvTransferFields(request, 'r1', decode)).toEqual({
      pinKv: false,
      importKvTokens: 5,
      kvParams: null,
    });
  });

  it('an expired handle, or one of another prompt or salt, is recomputed (no import)', () => {
    const decode = buildConfig({ model: 'tiny', role: 'decode' });
    const expired = { ...handleFor(), expires_at_ms: Date.now() - 1 };
    expect(
      kvTransferFields(parse({ kv_transfer_params: expired }), 'r', decode).importKvTokens,
    ).toBe(0);
    const other = parse({ kv_transfer_params: handleFor([5, 6, 7, 8, 10]) });
    expect(kvTransferFields(other, 'r', decode).importKvTokens).toBe(0);
    const salted = parse({ kv_transfer_params: handleFor(prompt, 'a') });
    expect(kvTransferFields(salted, 'r', decode).importKvTokens).toBe(0);
  });

  it('a malformed handle is a 400 naming the field', () => {
    const decode = buildConfig({ model: 'tiny', role: 'decode' });
    const bad = parse({ kv_transfer_params: { ...handleFor(), remote_num_tokens: 'x' } });
    expect(() => kvTransferFields(bad, 'r', decode)).toThrow(RS_ERR_REQ_INVALID_FIELD);
    expect(() => kvTransferFields(bad, 'r', decode)).toThrow(
      /kv_transfer_params\.remote_num_tokens/,
    );
  });
});

describe('kvTransferFields behind --engine vllm', () => {
  const vllm = (role: 'both' | 'prefill' | 'decode') =>
    buildConfig({ model: 'tiny', engine: 'vllm', role });

  it("a prefill leg hands the engine vLLM's toy-proxy map; the answer waits for the engine's", () => {
    for (const [role, kv] of [
      ['prefill', undefined],
      ['both', { do_remote_decode: true, trace: 'x' }],
    ] as const) {
      const request = parse(kv === undefined ? {} : { kv_transfer_params: kv });
      const fields = kvTransferFields(request, 'r1', vllm(role));
      expect(fields).toMatchObject({ pinKv: false, importKvTokens: 0 });
      expect(unpack(fields.kvParams!)).toEqual({
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        remote_host: null,
        remote_port: null,
        ...(kv === undefined ? {} : { trace: 'x' }),
      });
      expect(request.kvTransferParams).toBeNull();
    }
  });

  it('a decode request hands its params on unchanged; none, nothing; 64 KiB at most', () => {
    const handle = { do_remote_prefill: true, remote_block_ids: [[1, 2]], remote_port: 5600 };
    const fields = kvTransferFields(parse({ kv_transfer_params: handle }), 'r', vllm('decode'));
    expect(unpack(fields.kvParams!)).toEqual(handle);
    expect(kvTransferFields(parse(), 'r', vllm('decode')).kvParams).toBeNull();
    const big = parse({ kv_transfer_params: { pad: 'x'.repeat(70_000) } });
    expect(() => kvTransferFields(big, 'r', vllm('both'))).toThrow(RS_ERR_REQ_INVALID_FIELD);
  });
});
