import { describe, expect, it } from 'vitest';
import {
  BodyTail,
  completionTokensJson,
  completionTokensMsgpack,
  TAIL_BYTES,
} from '../../bench/loadtest/response-tail.js';
import { encodeGenerateResponse } from '../../src/protocol/generate-response.js';
import { stringifyGenerateResponse } from '../../src/protocol/response-object.js';
import { makeChoice, makeResponse } from '../protocol/columns-fixture.js';

/** Feeds `body` to a fresh tail in chunks of `size` bytes. */
function tailOf(body: Buffer, size: number): Buffer {
  const tail = new BodyTail();
  for (let at = 0; at < body.length; at += size) tail.push(body.subarray(at, at + size));
  return Buffer.from(tail.bytes());
}

describe('BodyTail', () => {
  it('keeps exactly the last TAIL_BYTES bytes whatever the chunking', () => {
    const body = Buffer.from(Array.from({ length: 5000 }, (_, i) => i % 251));
    const want = body.subarray(body.length - TAIL_BYTES);
    for (const size of [1, 7, 100, TAIL_BYTES - 1, TAIL_BYTES, TAIL_BYTES + 3, 4096, 5000]) {
      expect(tailOf(body, size).equals(want), `chunks of ${size}`).toBe(true);
    }
  });

  it('holds a body shorter than its capacity whole, and forgets it on reset', () => {
    const tail = new BodyTail();
    tail.push(Buffer.from('abc'));
    tail.push(Buffer.from('de'));
    expect(tail.bytes().toString()).toBe('abcde');
    tail.reset();
    expect(tail.bytes().length).toBe(0);
    tail.push(Buffer.from('xyz'));
    expect(tail.bytes().toString()).toBe('xyz');
  });
});

describe('completion_tokens from the tail', () => {
  for (const completion of [1, 127, 128, 255, 256, 4096, 65_535, 70_000]) {
    it(`reads ${completion} from every response form the server writes`, () => {
      const choice = makeChoice({
        promptLen: 8,
        completion,
        mask: true,
        routing: true,
        seed: completion,
      });
      const res = makeResponse([choice], 8);
      for (const form of ['packed', 'legacy'] as const) {
        const body = encodeGenerateResponse(res, form);
        expect(completionTokensJson(tailOf(body, 65_536)), form).toBe(completion);
      }
      // The inline baseline's JSON.stringify path.
      const stringified = Buffer.from(stringifyGenerateResponse(res, true));
      expect(completionTokensJson(tailOf(stringified, 1000))).toBe(completion);
      const msgpack = encodeGenerateResponse(res, 'msgpack');
      expect(completionTokensMsgpack(tailOf(msgpack, 4096))).toBe(completion);
    });
  }

  it('answers -1 when the key is missing, cut or of the other form', () => {
    expect(completionTokensJson(Buffer.from('{"usage":null}'))).toBe(-1);
    expect(completionTokensJson(Buffer.from('"completion_tokens":'))).toBe(-1);
    expect(completionTokensJson(Buffer.from('"completion_tokens": 12}'))).toBe(12);
    expect(completionTokensMsgpack(Buffer.from('"completion_tokens":12'))).toBe(-1);
    const cut = Buffer.concat([
      Buffer.from([0xb1]),
      Buffer.from('completion_tokens'),
      Buffer.from([0xcd, 1]),
    ]);
    expect(completionTokensMsgpack(cut)).toBe(-1);
  });
});
