import { describe, expect, it } from 'vitest';
import { decodeGenerateBody } from '../../src/client/decode.js';
import { checkInvariants } from '../../src/client/invariants.js';
import { SseParser, StreamAccumulator } from '../../src/client/stream.js';
import { RS_ERR_ENGINE_DEAD } from '../../src/errors.js';
import { CONTENT_TYPE, encodeGenerateResponse } from '../../src/protocol/generate-response.js';
import { JsonWriter } from '../../src/protocol/json-writer.js';
import type { ChoiceColumns, UsageFigures } from '../../src/protocol/response-columns.js';
import {
  SSE_DONE,
  writeStreamChunk,
  writeStreamDone,
  writeStreamError,
  writeStreamUsageChunk,
} from '../../src/protocol/sse.js';
import { makeChoice, makeResponse } from './columns-fixture.js';

/**
 * Cut a finished choice into stream deltas the way the output worker does: the first delta carries
 * the prompt's routing rows (prefill) with the first token; each later one carries its new tokens
 * and one routing row per token forwarded since.
 */
function* deltas(c: ChoiceColumns, promptLen: number, sizes: number[]): Generator<ChoiceColumns> {
  const n = c.tokenIds.length;
  let at = 0;
  let maskAt = 0;
  let k = 0;
  while (at < n) {
    const take = Math.min(sizes[k++ % sizes.length] as number, n - at);
    const end = at + take;
    let maskEnd = maskAt;
    for (let i = at; i < end; i++) maskEnd += c.maskCounts?.[i] ?? 0;
    let routing: ChoiceColumns['routing'] = null;
    if (c.routing !== null) {
      const r = c.routing;
      // Rows up to the position before the newest token: absolute positions r.start .. promptLen + end - 2.
      const rowFrom = at === 0 ? 0 : promptLen + at - 1 - r.start;
      const rowTo = promptLen + end - 1 - r.start;
      const per = r.layers * r.topk;
      routing = {
        ...r,
        data: r.data.subarray(rowFrom * per, rowTo * per),
        rows: rowTo - rowFrom,
        start: r.start + rowFrom,
      };
    }
    yield {
      index: c.index,
      tokenIds: c.tokenIds.subarray(at, end),
      logprobs: c.logprobs?.subarray(at, end) ?? null,
      maskCounts: c.maskCounts?.subarray(at, end) ?? null,
      maskIds: c.maskIds?.subarray(maskAt, maskEnd) ?? null,
      routing,
      weightVersions: c.weightVersions?.subarray(at, end) ?? null,
      finishReason: end === n ? c.finishReason : null,
      stopReason: end === n ? c.stopReason : null,
    };
    at = end;
    maskAt = maskEnd;
  }
}

function streamBytes(
  c: ChoiceColumns,
  promptLen: number,
  legacy: boolean,
  sizes: number[],
  usage: UsageFigures | null,
): Buffer {
  const w = new JsonWriter(64);
  for (const d of deltas(c, promptLen, sizes)) {
    writeStreamChunk(
      w,
      { requestId: 'abc', model: 'sim-x', created: 7, choices: [d], usage: null },
      legacy,
    );
  }
  if (usage !== null) writeStreamUsageChunk(w, 'abc', 'sim-x', 7, usage);
  writeStreamDone(w);
  return w.finish();
}

/** Feed bytes to the parser in pieces of `piece` bytes (1 splits every multibyte character). */
function parseAll(
  bytes: Buffer,
  piece: number,
): { acc: StreamAccumulator; done: boolean; events: number } {
  const parser = new SseParser();
  const acc = new StreamAccumulator();
  let done = false;
  let events = 0;
  for (let i = 0; i < bytes.length; i += piece) {
    for (const e of parser.push(bytes.subarray(i, i + piece))) {
      if (e.kind === 'done') done = true;
      else {
        acc.push(e.json);
        events++;
      }
    }
  }
  expect(parser.leftover).toBe('');
  return { acc, done, events };
}

describe('SSE stream', () => {
  const promptLen = 12;
  const choice = {
    ...makeChoice({ promptLen, completion: 57, seed: 77, weightVersions: true, experts: 300 }),
    finishReason: 'stop' as const,
    stopReason: 'ü\n',
  };
  const usage = { promptTokens: promptLen, completionTokens: 57, cachedTokens: 8 };
  const whole = decodeGenerateBody(
    encodeGenerateResponse(
      makeResponse([choice], promptLen, { usage, model: 'sim-x', created: 7 }),
      'packed',
    ),
    CONTENT_TYPE.packed,
  );

  it.each([
    ['packed, 1-byte pieces', false, [1, 3, 7], 1],
    ['packed, whole', false, [5], 1 << 20],
    ['legacy, odd pieces', true, [2, 1], 13],
  ] as const)('concatenates to the non-streamed arrays (%s)', (_name, legacy, sizes, piece) => {
    const { acc, done, events } = parseAll(
      streamBytes(choice, promptLen, legacy, [...sizes], usage),
      piece,
    );
    expect(done).toBe(true);
    expect(events).toBeGreaterThan(5);
    const streamed = acc.result();
    expect(streamed.choices).toEqual(whole.choices);
    expect(streamed.usage).toEqual(whole.usage);
    expect(streamed.requestId).toBe('generate-tokens-abc');
    checkInvariants(streamed, promptLen);
  });

  it('writes the event shapes of the contract', () => {
    const bytes = streamBytes(choice, promptLen, false, [60], usage).toString();
    const events = bytes.split('\n\n').filter((e) => e !== '');
    expect(events).toHaveLength(3);
    const first = JSON.parse(events[0]!.slice('data: '.length));
    expect(Object.keys(first)).toEqual(['request_id', 'model', 'created', 'choices', 'usage']);
    expect(first.usage).toBeNull();
    expect(first.choices[0].finish_reason).toBe('stop');
    const last = JSON.parse(events[1]!.slice('data: '.length));
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({
      prompt_tokens: 12,
      completion_tokens: 57,
      total_tokens: 69,
      prompt_tokens_details: { cached_tokens: 8 },
    });
    expect(events[2]).toBe('data: [DONE]');
    expect(SSE_DONE.toString()).toBe('data: [DONE]\n\n');
  });

  it('writes an error event with the contract error body', () => {
    const w = new JsonWriter();
    writeStreamError(w, new RS_ERR_ENGINE_DEAD('killed by signal 9'));
    writeStreamDone(w);
    const text = w.finish().toString();
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    const event = JSON.parse(text.split('\n\n')[0]!.slice(6));
    expect(event).toEqual({
      error: {
        message: 'the engine core is not running: killed by signal 9',
        type: 'ServiceUnavailableError',
        param: null,
        code: 503,
      },
    });
  });

  it('refuses an event that would carry nothing, but lets a finish without tokens through', () => {
    const empty = {
      ...makeChoice({ promptLen: 2, completion: 0, routing: false }),
      finishReason: null,
    };
    const chunk = { requestId: 'a', model: 'm', created: 1, choices: [empty], usage: null };
    expect(() => writeStreamChunk(new JsonWriter(), chunk, false)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_PROTOCOL_BAD_COLUMNS' }),
    );
    expect(() => writeStreamChunk(new JsonWriter(), { ...chunk, choices: [] }, false)).toThrow();
    const aborted = { ...empty, finishReason: 'abort' as const };
    const w = new JsonWriter();
    writeStreamChunk(
      w,
      {
        ...chunk,
        choices: [aborted],
        usage: { promptTokens: 2, completionTokens: 0, cachedTokens: null },
      },
      false,
    );
    const event = JSON.parse(w.finish().toString().slice(6));
    expect(event.choices[0]).toMatchObject({ finish_reason: 'abort', token_ids: [] });
    expect(event.usage.total_tokens).toBe(2);
  });

  it('the accumulator refuses routing rows that do not continue where the last chunk ended', () => {
    const acc = new StreamAccumulator();
    const row = (start: number) => ({
      index: 0,
      token_ids: [1],
      finish_reason: null,
      stop_reason: null,
      logprobs: null,
      routed_experts: { data: 'AQI=', shape: [1, 1, 2], dtype: 'uint8', start },
    });
    acc.push({ request_id: 'x', choices: [row(5)], usage: null });
    acc.push({ request_id: 'x', choices: [row(6)], usage: null });
    expect(() => acc.push({ request_id: 'x', choices: [row(8)], usage: null })).toThrow(
      expect.objectContaining({ code: 'RS_ERR_CLIENT_DECODE' }),
    );
  });

  it('the parser handles CRLF framing, comments and multi-line data', () => {
    const parser = new SseParser();
    const events = parser.push(
      Buffer.from(': keep-alive\r\n\r\ndata: {"a":\r\ndata: 1}\r\n\r\ndata: [DONE]\n\n'),
    );
    expect(events).toEqual([{ kind: 'data', json: { a: 1 } }, { kind: 'done' }]);
    expect(() => new SseParser().push(Buffer.from('data: {oops\n\n'))).toThrow(
      expect.objectContaining({ code: 'RS_ERR_CLIENT_DECODE' }),
    );
  });
});
