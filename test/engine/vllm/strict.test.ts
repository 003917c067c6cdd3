import { describe, expect, it } from 'vitest';
import {
  decodeAdd,
  decodeHandshake,
  decodeUtility,
  encodeAdd,
  getVllmLayout,
  type OutputView,
  readOutputs,
  type VllmAddRequest,
} from '../../../src/engine/vllm/index.js';
import { f64, hex, s } from './hex.js';

/** Decoders refuse what msgspec refuses, with a coded error naming the field; encoders validate. */

const L = getVllmLayout('0.22');

function codeAndParam(fn: () => unknown): [string, string | null] {
  try {
    fn();
  } catch (e) {
    const err = e as { code: string; param: string | null };
    return [err.code, err.param];
  }
  throw new Error('did not throw');
}

/** An ADD of `n` leading fields built by hand, `fields` replacing the defaults. */
function add(n: number, fields: Record<number, string> = {}): Buffer {
  const defaults = [
    s('r-1'),
    '92 01 02',
    'c0',
    `81 ${s('max_tokens')} 04`,
    'c0',
    f64(1),
    'c0',
    'c0',
    'c0',
    'c0',
    'c0',
    '00',
    '00',
    '00',
    'c0',
    'c2',
    'c0',
    'c0',
    'c0',
    'c2',
    '01',
    '02',
  ];
  const parts = defaults.slice(0, n).map((d, i) => fields[i] ?? d);
  return hex(n < 16 ? (0x90 | n).toString(16) : `dc00${n.toString(16).padStart(2, '0')}`, ...parts);
}

describe('ADD decoding (the engine side)', () => {
  it('accepts the 9 required fields alone, defaulting the rest', () => {
    const r = decodeAdd(L, add(9));
    expect(r.clientIndex).toBe(0);
    expect(r.priority).toBe(0);
    expect(r.params.maxTokens).toBe(4);
  });

  it('ignores extra trailing elements', () => {
    expect(decodeAdd(L, add(22)).requestId).toBe('r-1');
  });

  it('refuses fewer than 9 fields', () => {
    expect(codeAndParam(() => decodeAdd(L, add(8)))).toEqual([
      'RS_ERR_VLLM_DECODE',
      'EngineCoreRequest',
    ]);
  });

  it('a bool is not an int', () => {
    expect(codeAndParam(() => decodeAdd(L, add(12, { 11: 'c3' })))).toEqual([
      'RS_ERR_VLLM_DECODE',
      'client_index',
    ]);
  });

  it('a float is not an int, but an int is a float', () => {
    expect(codeAndParam(() => decodeAdd(L, add(14, { 13: f64(1) })))).toEqual([
      'RS_ERR_VLLM_DECODE',
      'priority',
    ]);
    expect(decodeAdd(L, add(9, { 5: '07' })).arrivalTime).toBe(7);
    expect(codeAndParam(() => decodeAdd(L, add(9, { 5: 'c3' })))).toEqual([
      'RS_ERR_VLLM_DECODE',
      'arrival_time',
    ]);
  });

  it('a float token id and a bool max_tokens are refused', () => {
    expect(codeAndParam(() => decodeAdd(L, add(9, { 1: `92 01 ${f64(2)}` })))[1]).toBe(
      'prompt_token_ids',
    );
    expect(codeAndParam(() => decodeAdd(L, add(9, { 3: `81 ${s('max_tokens')} c3` })))[1]).toBe(
      'sampling_params.max_tokens',
    );
  });

  it('validates SamplingParams with vLLM ranges', () => {
    const sp = `82 ${s('max_tokens')} 04 ${s('top_p')} ${f64(0)}`;
    expect(codeAndParam(() => decodeAdd(L, add(9, { 3: sp })))).toEqual([
      'RS_ERR_VLLM_BAD_FIELD',
      'sampling_params.top_p',
    ]);
  });

  it('refuses trailing bytes and a truncated message', () => {
    const ok = add(9);
    expect(codeAndParam(() => decodeAdd(L, Buffer.concat([ok, hex('00')])))[0]).toBe(
      'RS_ERR_VLLM_DECODE',
    );
    expect(codeAndParam(() => decodeAdd(L, ok.subarray(0, ok.length - 3)))[0]).toBe(
      'RS_ERR_VLLM_DECODE',
    );
  });

  it('refuses multimodal, LoRA and pooling requests', () => {
    expect(codeAndParam(() => decodeAdd(L, add(9, { 6: '80' })))).toEqual([
      'RS_ERR_VLLM_DECODE',
      'lora_request',
    ]);
  });
});

const GOOD: VllmAddRequest = {
  requestId: 'x',
  promptTokenIds: [1, 2, 3],
  params: { maxTokens: 4 },
  arrivalTime: 0,
  cacheSalt: null,
  priority: 0,
  clientIndex: 0,
};

describe('ADD encoding validates every field before a byte is written', () => {
  const cases: [string, Partial<VllmAddRequest>][] = [
    ['request_id', { requestId: '' }],
    ['prompt_token_ids', { promptTokenIds: [] }],
    ['prompt_token_ids[1]', { promptTokenIds: [1, 2.5] }],
    ['arrival_time', { arrivalTime: Number.NaN }],
    ['priority', { priority: 0.5 }],
    ['client_index', { clientIndex: -1 }],
    ['sampling_params.max_tokens', { params: { maxTokens: 0 } }],
    ['sampling_params.temperature', { params: { maxTokens: 1, temperature: -1 } }],
    ['sampling_params.top_p', { params: { maxTokens: 1, topP: 1.5 } }],
    ['sampling_params.top_k', { params: { maxTokens: 1, topK: -2 } }],
    ['sampling_params.min_p', { params: { maxTokens: 1, minP: 2 } }],
    ['sampling_params.presence_penalty', { params: { maxTokens: 1, presencePenalty: 3 } }],
    ['sampling_params.repetition_penalty', { params: { maxTokens: 1, repetitionPenalty: 0 } }],
    ['sampling_params.seed', { params: { maxTokens: 1, seed: 0.5 } }],
    ['sampling_params.min_tokens', { params: { maxTokens: 1, minTokens: 2 } }],
    ['sampling_params.stop_token_ids[0]', { params: { maxTokens: 1, stopTokenIds: [-1] } }],
    ['sampling_params.logprobs', { params: { maxTokens: 1, logprobs: -2 } }],
    [
      'sampling_params.routed_experts_prompt_start',
      { params: { maxTokens: 1, routedExpertsPromptStart: 3 } },
    ],
  ];
  for (const [field, change] of cases) {
    it(field, () => {
      expect(codeAndParam(() => encodeAdd(L, { ...GOOD, ...change }))).toEqual([
        'RS_ERR_VLLM_BAD_FIELD',
        field,
      ]);
    });
  }
});

/** The param of the error an output failed with (outputs-reader.ts isolates it), and its id. */
function outputFailure(body: Buffer, frames: Buffer[] = []): [string | null, string] {
  let seen: [string | null, string] | null = null;
  readOutputs(L, [body, ...frames], {
    output() {},
    outputFailed(o: OutputView, error: Error) {
      seen = [(error as unknown as { param: string | null }).param, o.requestId()];
    },
  });
  if (seen === null) throw new Error('no output failed');
  return seen;
}

/** A 0.22 EngineCoreOutput (13 fields) of request `r`, `routed` as its routed_experts. */
function output13(fields: Record<number, string>): Buffer {
  const d = [s('r'), '90', 'c0', 'c0', 'c0', 'c0', 'c0', 'c0', 'c0', 'c0', 'c0', 'c0', '00'];
  return hex('92 00 91 9d', ...d.map((v, i) => fields[i] ?? v));
}

describe('output decoding: a field vLLM would not send fails its request alone', () => {
  it('refuses an ndarray with an ext type other than 3 (vLLM refuses pickle)', () => {
    const ok = output13({});
    expect(() => readOutputs(L, [ok], { output() {} })).not.toThrow();
    const routed = `93 ${s('|u1')} 93 01 01 01 d401 07`;
    expect(outputFailure(output13({ 11: routed }))).toEqual(['routed_experts.data', 'r']);
  });

  it('refuses an aux frame index that is not in the message', () => {
    const routed = `93 ${s('|u1')} 93 01 01 01 01`;
    expect(outputFailure(output13({ 11: routed }))).toEqual(['routed_experts.data', 'r']);
  });

  it('refuses a float finish reason and an unknown one', () => {
    expect(outputFailure(output13({ 5: f64(1) }))[0]).toBe('finish_reason');
    expect(outputFailure(output13({ 5: '09' }))[0]).toBe('finish_reason');
  });

  it('a pinned layout refuses outputs of another element count', () => {
    const short = hex('92 00 91 92', s('r'), '90');
    expect(codeAndParam(() => readOutputs(L, [short], { output() {} }))[0]).toBe(
      'RS_ERR_VLLM_LAYOUT',
    );
  });
});

describe('other decoders', () => {
  it('handshake status must be HELLO or READY; utility args must be an array', () => {
    const hs = hex('81', s('status'), s('HI'));
    expect(codeAndParam(() => decodeHandshake(hs))[1]).toBe('handshake.status');
    const u = hex('94 00 01', s('m'), '80');
    expect(codeAndParam(() => decodeUtility(u))[1]).toBe('utility.args');
  });

  it('--vllm-version selects a layout; an unknown one is a config error naming the flag', () => {
    expect(getVllmLayout('0.22')).toBe(L);
    expect(getVllmLayout('0.33').output).toHaveLength(18);
    expect(codeAndParam(() => getVllmLayout('0.1'))).toEqual([
      'RS_ERR_CONFIG_INVALID',
      '--vllm-version',
    ]);
  });
});
