import { describe, expect, it } from 'vitest';
import { SseParser, StreamAccumulator } from '../../../src/client/stream.js';
import type { StreamBytes } from '../../../src/server/cross-thread/messages.js';
import { ResponseFormCode } from '../../../src/server/cross-thread/slot-meta.js';
import { SlotEventList } from '../../../src/server/output-worker/slot-events.js';
import { StreamEncoder } from '../../../src/server/output-worker/stream-encoder.js';
import { type Harness, makeHarness, metaFields } from './harness.js';

function encoderFor(h: Harness): StreamEncoder {
  return new StreamEncoder(h.view, new SlotEventList(h.acc.slots), h.tokens);
}

/** The SSE events of one slot in a pass's bytes. */
function eventsOf(
  out: StreamBytes | null,
  slot: number,
): { json: Record<string, unknown>[]; done: number; last: boolean } {
  const json: Record<string, unknown>[] = [];
  let done = 0;
  let last = false;
  if (out === null) return { json, done, last };
  const bytes = new Uint8Array(out.bytes);
  for (let i = 0; i < out.slots.length; i++) {
    if (out.slots[i] !== slot) continue;
    last ||= out.done[i] === 1;
    const from = i === 0 ? 0 : out.ends[i - 1]!;
    for (const e of new SseParser().push(bytes.subarray(from, out.ends[i]!))) {
      if (e.kind === 'done') done++;
      else json.push(e.json as Record<string, unknown>);
    }
  }
  return { json, done, last };
}

const header = { generation: 1, requestId: 'r1', model: 'sim-tiny', created: 7 };

describe('StreamEncoder', () => {
  it('coalesces a pass into one event per request, routing rows contiguous, then usage and [DONE]', () => {
    const h = makeHarness();
    const enc = encoderFor(h);
    h.meta.write(0, 1, metaFields({ stream: true, promptLen: 2, includeUsage: true }));
    enc.setHeader(0, header);
    const acc = new StreamAccumulator();
    const noLookup = () => {};
    // Pass 1: prefill rows then three tokens, as several records scattered before one encode.
    h.scatter.clearEvents();
    h.feedMore([{ slot: 0, gen: 1, routingFirstPos: 0, routing: [1, 1, 1, 1] }]);
    h.feedMore([
      { slot: 0, gen: 1, token: 10, maskIds: [10], routingFirstPos: 1, routing: [2, 2, 2, 2] },
    ]);
    h.feedMore([
      { slot: 0, gen: 1, token: 11, maskIds: [11, 3], routingFirstPos: 2, routing: [3, 3, 3, 3] },
    ]);
    let out = eventsOf(enc.encode(h.scatter.streamed, noLookup), 0);
    expect(out.json.length).toBe(1);
    expect(out.done).toBe(0);
    expect(out.last).toBe(false);
    for (const e of out.json) acc.push(e);
    const first = out.json[0]!.choices as Record<string, unknown>[];
    expect(first[0]!.token_ids).toEqual([10, 11]);
    expect(first[0]!.finish_reason).toBeNull();
    expect(out.json[0]!.usage).toBeNull();
    // A pass with nothing new for the slot writes nothing.
    h.scatter.clearEvents();
    expect(enc.encode(h.scatter.streamed, noLookup)).toBeNull();
    // Pass 2: the last token with its finish.
    h.feed([
      {
        slot: 0,
        gen: 1,
        token: 12,
        maskIds: [12],
        routingFirstPos: 3,
        routing: [4, 4, 4, 4],
        finish: 2,
      },
    ]);
    out = eventsOf(enc.encode(h.scatter.streamed, noLookup), 0);
    expect(out.last).toBe(true);
    expect(out.done).toBe(1);
    expect(out.json.length).toBe(2);
    expect(out.json[1]!.choices).toEqual([]);
    expect(out.json[1]!.usage).toEqual({
      prompt_tokens: 2,
      completion_tokens: 3,
      total_tokens: 5,
      prompt_tokens_details: null,
    });
    acc.push(out.json[0]);
    const r = acc.result().choices[0]!;
    expect(Array.from(r.tokenIds)).toEqual([10, 11, 12]);
    expect(Array.from(r.mask!.ids)).toEqual([10, 11, 3, 12]);
    expect(r.routedExperts!.start).toBe(0);
    expect(r.routedExperts!.shape).toEqual([4, 2, 2]);
    expect(r.finishReason).toBe('length');
  });

  it('finds a header that the first outputs overtook, and holds positions while it is missing', () => {
    const h = makeHarness();
    const enc = encoderFor(h);
    h.meta.write(3, 1, metaFields({ stream: true, continuousUsageStats: true }));
    h.feed([{ slot: 3, gen: 1, token: 5 }]);
    let lookups = 0;
    const out = enc.encode(h.scatter.streamed, () => {
      lookups++;
      if (lookups === 2) enc.setHeader(3, header);
    });
    // First lookup finds nothing: the slot waits; its positions are not lost.
    expect(out).toBeNull();
    h.feed([{ slot: 3, gen: 1, token: 6 }]);
    const next = eventsOf(
      enc.encode(h.scatter.streamed, () => {
        lookups++;
        if (lookups === 2) enc.setHeader(3, header);
      }),
      3,
    );
    expect(next.json.length).toBe(1);
    const choice = (next.json[0]!.choices as Record<string, unknown>[])[0]!;
    expect(choice.token_ids).toEqual([5, 6]);
    expect(next.json[0]!.usage).toMatchObject({ completion_tokens: 2 });
  });

  it('ends a failed request with an error event and [DONE]; an n>1 choice leaves [DONE] to the main thread', () => {
    const h = makeHarness();
    const enc = encoderFor(h);
    h.meta.write(0, 1, metaFields({ stream: true }));
    h.meta.write(
      1,
      1,
      metaFields({ stream: true, form: ResponseFormCode.Legacy, choiceIndex: 1, choiceCount: 2 }),
    );
    enc.setHeader(0, header);
    enc.setHeader(1, { ...header, requestId: 'r2' });
    h.feed([
      { slot: 0, gen: 1, finish: 4 },
      { slot: 1, gen: 1, token: 9, logprob: -0.5, maskIds: [9, 2], finish: 1, stopTokenId: 9 },
    ]);
    const out = enc.encode(h.scatter.streamed, () => {});
    const failed = eventsOf(out, 0);
    expect(failed.done).toBe(1);
    expect(failed.last).toBe(true);
    expect(failed.json[0]).toMatchObject({ error: { code: 500, type: 'InternalServerError' } });
    const second = eventsOf(out, 1);
    expect(second.last).toBe(true);
    expect(second.done).toBe(0);
    const c = (second.json[0]!.choices as Record<string, unknown>[])[0]!;
    expect(c.index).toBe(1);
    expect(c.finish_reason).toBe('stop');
    expect(c.stop_reason).toBe(9);
    // Legacy form: logprobs.content objects and the mask as int[][].
    expect(c.sampling_mask).toEqual([[9, 2]]);
    expect((c.logprobs as { content: unknown[] }).content).toEqual([
      {
        token: 'token_id:9',
        logprob: -0.5,
        top_logprobs: [{ token: 'token_id:9', logprob: -0.5, bytes: null }],
        bytes: null,
      },
    ]);
  });
});
