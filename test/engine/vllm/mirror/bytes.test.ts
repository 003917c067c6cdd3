import { describe, expect, it } from 'vitest';
import {
  decodeOutputs,
  decodeUtilityCall,
  encodeAdd,
  encodeOutputs,
  encodeStatus,
  encodeUtilityCall,
  unpack,
} from './codec.js';
import { f32le, f64hex, fixstr, hex, i32le, i64le } from './hex.js';

/**
 * Bytes assembled by hand from the msgpack spec and the era tables (eras.ts), independent of the
 * encoder: what a Python engine of each era puts on the wire for the same values.
 */
const NIL = 'c0';
/** EngineCoreOutputs tail after `outputs`: nil stats, timestamp 0.5, then four nils. */
const TAIL = `${NIL} ${f64hex(0.5)} ${NIL} ${NIL} ${NIL} ${NIL}`;
/** {"a": "b"} */
const TRACE = `81 ${fixstr('a')} ${fixstr('b')}`;

describe('mirror bytes, by hand', () => {
  it('0.22 EngineCoreOutput: 13 elements, trace_headers at index 9', () => {
    const frames = encodeOutputs('0.22', {
      outputs: [{ request_id: 'r', new_token_ids: [5], trace_headers: { a: 'b' } }],
      timestamp: 0.5,
    });
    const expected = hex(
      '98 00', // EngineCoreOutputs [8], engine_index 0
      '91 9d', // outputs [1], EngineCoreOutput fixarray of 13
      `${fixstr('r')} 91 05`, // 0 request_id, 1 new_token_ids [5]
      'c0 c0 c0 c0 c0 c0 c0', // 2 .. 8: logprobs .. kv_transfer_params
      TRACE, // 9 trace_headers
      'c0 c0 00', // 10 prefill_stats, 11 routed_experts, 12 num_nans_in_logits 0
      TAIL,
    );
    expect(frames).toEqual([expected]);
  });

  it('0.26 EngineCoreOutput: 14 elements, ec_transfer_params at 9 moves trace_headers to 10', () => {
    const frames = encodeOutputs('0.26', {
      outputs: [{ request_id: 'r', new_token_ids: [5], trace_headers: { a: 'b' } }],
      timestamp: 0.5,
    });
    const expected = hex(
      '98 00 91 9e', // fixarray of 14
      `${fixstr('r')} 91 05`,
      'c0 c0 c0 c0 c0 c0 c0', // 2 .. 8
      'c0', // 9 ec_transfer_params nil
      TRACE, // 10 trace_headers
      'c0 c0 00', // 11 prefill_stats, 12 routed_experts, 13 num_nans_in_logits
      TAIL,
    );
    expect(frames).toEqual([expected]);
    // The same bytes read with each era's eyes: index 9 is a different field.
    const raw = (unpack(expected) as unknown[][])[1]![0] as unknown[];
    expect(raw[9]).toBeNull();
    expect(raw[10]).toEqual({ a: 'b' });
    expect(decodeOutputs(frames).message.outputs[0]?.trace_headers).toEqual({ a: 'b' });
    // A 0.22 frontend reads trace_headers from index 9 (nil here) and fails on index 12, nil where
    // its num_nans_in_logits int is: msgspec would refuse the message the same way.
    expect(() => decodeOutputs(frames, '0.22')).toThrow(
      /num_nans_in_logits: expected int, got nil/,
    );
  });

  it('0.28: a 16-element output is an array16, new_sampling_mask at 15, offsets nil for one row', () => {
    const frames = encodeOutputs('0.28', {
      outputs: [{ request_id: 'r', new_token_ids: [7], new_sampling_mask: { rows: [[3, 7, 9]] } }],
      timestamp: 0.5,
    });
    const mask = `93 93 ${fixstr('<i4')} 91 03 c7 0c 03 ${i32le(3, 7, 9)} c0 c0`;
    const expected = hex(
      '98 00 91 dc 0010', // array16 of 16: fixarray stops at 15
      `${fixstr('r')} 91 07`,
      'c0 c0 c0 c0 c0 c0 c0 c0 c0 c0 c0 00 c0', // 2 .. 14 (13 num_nans_in_logits 0)
      mask, // 15 [token_ids <i4 [3] ext8(12) type 3, offsets nil, cu_num_generated_tokens nil]
      TAIL,
    );
    expect(frames).toEqual([expected]);
    const two = encodeOutputs('0.28', {
      outputs: [
        { request_id: 'r', new_token_ids: [1, 3], new_sampling_mask: { rows: [[1, 2], [3]] } },
      ],
      timestamp: 0.5,
    });
    const csr = `93 93 ${fixstr('<i4')} 91 03 c7 0c 03 ${i32le(1, 2, 3)} 93 ${fixstr('<i8')} 91 03 c7 18 03 ${i64le(0, 2, 3)} c0`;
    expect(two[0]!.includes(hex(csr))).toBe(true);
    expect(decodeOutputs(two).message.outputs[0]?.new_sampling_mask).toEqual({
      rows: [[1, 2], [3]],
    });
  });

  it('0.29 and 0.33 outputs are array16 of 17 and 18', () => {
    for (const [era, n] of [
      ['0.29', '11'],
      ['0.33', '12'],
    ] as const) {
      const [body] = encodeOutputs(era, { outputs: [{ request_id: 'r', new_token_ids: [] }] });
      expect(body!.subarray(0, 6).toString('hex')).toBe(`980091dc00${n}`);
    }
  });

  it('a uint64 call id: 0xcf and 8 bytes, out and echoed back', () => {
    const id = 0xfedcba9876543210n;
    const [type, payload] = encodeUtilityCall({
      client_index: 0,
      call_id: id,
      method: 'is_scheduler_paused',
      args: [],
    });
    expect(type).toEqual(hex('03'));
    expect(payload).toEqual(hex('94 00 cf fedcba9876543210', fixstr('is_scheduler_paused'), '90'));
    expect(decodeUtilityCall(payload!).call_id).toBe(id);
    const reply = encodeOutputs('0.22', {
      utility_output: { call_id: id, failure_message: null, result: { value: false } },
      timestamp: 0.5,
    });
    // [0, [], nil, 0.5, [call_id, nil, [nil, false]], nil, nil, nil]
    expect(reply).toEqual([
      hex('98 00 90 c0', f64hex(0.5), '93 cf fedcba9876543210 c0 92 c0 c2', 'c0 c0 c0'),
    ]);
    expect(decodeOutputs(reply).message.utility_output?.call_id).toBe(id);
  });

  it('ndarrays: |u1 routing inline as fixext, 256 bytes and more in an aux frame', () => {
    const [body] = encodeOutputs('0.22', {
      outputs: [
        {
          request_id: 'r',
          new_token_ids: [1],
          routed_experts: { rows: 1, layers: 1, topk: 2, wide: false, ids: [3, 4] },
        },
      ],
    });
    expect(body!.includes(hex(`93 ${fixstr('|u1')} 93 01 01 02 d5 03 03 04 00`))).toBe(true);
    const rows = (n: number) => ({
      tokenIds: Array.from({ length: n }, () => [1]),
      logprobs: Array.from({ length: n }, () => [-0.5]),
      ranks: Array.from({ length: n }, () => 1),
    });
    // 63 int32 ids are 252 bytes: inline (ext8). 64 are 256: frame 1, then logprobs frame 2.
    const inline = encodeOutputs('0.22', {
      outputs: [{ request_id: 'r', new_token_ids: [], new_logprobs: rows(63) }],
    });
    expect(inline[0]!.includes(hex(`93 ${fixstr('<i4')} 92 3f 01 c7 fc 03`))).toBe(true);
    const aux = encodeOutputs('0.22', {
      outputs: [{ request_id: 'r', new_token_ids: [], new_logprobs: rows(64) }],
    });
    expect(aux).toHaveLength(4);
    expect(aux[0]!.includes(hex(`93 ${fixstr('<i4')} 92 40 01 01`))).toBe(true);
    expect(aux[0]!.includes(hex(`93 ${fixstr('<f4')} 92 40 01 02`))).toBe(true);
    expect(aux[1]).toEqual(hex(i32le(...new Array(64).fill(1))));
    expect(aux[2]).toEqual(hex(f32le(...new Array(64).fill(-0.5))));
    expect(aux[3]).toEqual(hex(i64le(...new Array(64).fill(1)))); // ranks <i8: 512 bytes
  });

  it('HELLO, and an ADD whose temperature 1.0 stays a float64', () => {
    const hello = encodeStatus({ status: 'HELLO', local: false, headless: true });
    const map = `83 ${fixstr('status')} ${fixstr('HELLO')} ${fixstr('local')} c2 ${fixstr('headless')} c3`;
    expect(hello).toEqual(hex(map));
    const [type, payload] = encodeAdd('0.22', {
      request_id: 'a',
      prompt_token_ids: [1],
      mm_features: null,
      sampling_params: { temperature: 1, max_tokens: 4 },
      pooling_params: null,
      arrival_time: 2,
      lora_request: null,
      cache_salt: null,
      data_parallel_rank: null,
    });
    expect(type).toEqual(hex('00'));
    const sp = `82 ${fixstr('temperature')} ${f64hex(1)} ${fixstr('max_tokens')} 04`;
    const defaults = 'c0 c0 00 00 00 c0 c2 c0 c0 c0 c2'; // 9 .. 19
    expect(payload).toEqual(
      hex(`dc 0014 ${fixstr('a')} 91 01 c0 ${sp} c0 ${f64hex(2)} c0 c0 c0 ${defaults}`),
    );
  });
});
