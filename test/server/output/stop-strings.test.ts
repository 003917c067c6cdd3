import { describe, expect, it } from 'vitest';
import { MAX_STOP_STRINGS } from '../../../src/protocol/stop-strings.js';
import { SlotState } from '../../../src/server/shared/accumulators.js';
import {
  ByteLevelStandIn,
  StopStringMatcher,
  tinyVocabulary,
  tokenByteSource,
  VocabTable,
} from '../../../src/server/shared/detokenizer.js';
import { SlotMetaTable } from '../../../src/server/shared/slot-meta.js';
import { events, makeHarness, metaFields } from './harness.js';

const STOP = 1;
const LENGTH = 2;
const ABORT = 3;

/** The stand-in token whose text is the code point `cp` (see ByteLevelStandIn). */
function standInToken(cp: number): number {
  if (cp < 0x80) return 256 + ((cp - 0x20) << 2);
  if (cp < 0x800) return 256 + (((cp - 0xa0) << 2) | 1);
  if (cp < 0x10000) return 256 + (((cp < 0xd800 ? cp - 0x800 : cp - 0x1000) << 2) | 2);
  return 256 + (((cp - 0x10000) << 2) | 3);
}

function decode(source: ByteLevelStandIn | VocabTable, ids: number[]): string {
  const out = new Uint8Array(ids.length * source.maxTokenBytes);
  let n = 0;
  for (const id of ids) n += source.write(id, out, n);
  return Buffer.from(out.subarray(0, n)).toString('utf8');
}

/** Feeds tokens one step each to slot 0 (gen 1) until a finish event; returns the step index. */
function run(h: ReturnType<typeof makeHarness>, tokens: number[], finishLast = 0): number {
  for (let i = 0; i < tokens.length; i++) {
    h.feed([
      { slot: 0, gen: 1, token: tokens[i]!, finish: i === tokens.length - 1 ? finishLast : 0 },
    ]);
    if (h.scatter.finished.count > 0) return i;
  }
  return -1;
}

const ascii = (s: string): number[] => [...s].map((c) => c.charCodeAt(0));

describe('byte-level stand-in tokenizer', () => {
  it('decodes ids to 1..4 UTF-8 bytes by a fixed rule, byte tokens below 256', () => {
    const src = new ByteLevelStandIn([999]);
    expect(
      decode(src, [
        standInToken(0x41),
        standInToken(0xe9),
        standInToken(0x20ac),
        standInToken(0x1f600),
      ]),
    ).toBe('Aé€😀');
    expect(decode(src, [0xc3, 0xa9])).toBe('é');
    expect(decode(src, [999, 0x41])).toBe('A');
    const out = new Uint8Array(4);
    const bad: number[] = [];
    for (let id = 0; id < 200_000; id += 7) {
      const n = src.write(id, out, 0);
      const whole =
        id < 256 || !Buffer.from(out.subarray(0, n)).toString('utf8').includes('\ufffd');
      if (n < 1 || n > 4 || !whole) bad.push(id);
    }
    expect(bad).toEqual([]);
  });

  it('the tiny preset has a 1000-token vocabulary with special tokens that decode to nothing', () => {
    expect(tinyVocabulary().length).toBe(1000);
    const tiny = tokenByteSource('tiny', [999, 998]);
    expect(tiny).toBeInstanceOf(VocabTable);
    const vocab = tinyVocabulary();
    const the = vocab.indexOf(' the');
    const answer = vocab.indexOf(' answer');
    expect(decode(tiny as VocabTable, [answer, the, 999, 998])).toBe(' answer the');
    expect(tokenByteSource('qwen3-30b-a3b', [151645])).toBeInstanceOf(ByteLevelStandIn);
  });
});

describe('stop strings', () => {
  it('match across token boundaries; the completion ends at the token that completed the match', () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields({ stop: ['ab'], samplingMask: false, routedExperts: false }));
    const step = run(h, ascii('xxaab!!'));
    expect(step).toBe(4);
    expect(events(h.scatter.finished)).toEqual([[0, 1]]);
    // The engine still runs the request: the main thread must abort it.
    expect(events(h.scatter.stopped)).toEqual([[0, 1]]);
    const c = h.view.choice(0, 0);
    expect(Array.from(c.tokenIds)).toEqual(ascii('xxaab'));
    expect(c.logprobs!.length).toBe(5);
    expect(c.finishReason).toBe('stop');
    expect(c.stopReason).toBe('ab');
    // Outputs after the match are ignored until the engine's final output releases the slot.
    h.feed([{ slot: 0, gen: 1, token: 33 }]);
    expect(h.acc.completionTokens(0)).toBe(5);
    expect(h.scatter.released.count).toBe(0);
    h.feed([{ slot: 0, gen: 1, finish: ABORT }]);
    expect(events(h.scatter.released)).toEqual([[0, 1]]);
    expect(h.acc.state(0)).toBe(SlotState.Done);
    expect(h.view.finishName(0)).toBe('stop');
  });

  it('match multibyte UTF-8 split over byte-fallback tokens, and 4-byte characters', () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields({ stop: ['é!', 'a😀'] }));
    // 'é' as two byte tokens, then '!': matches on the third token.
    expect(run(h, [0x41, 0xc3, 0xa9, 0x21, 0x42])).toBe(3);
    expect(h.view.stopReason(0)).toBe('é!');

    const h2 = makeHarness();
    h2.meta.write(0, 1, metaFields({ stop: ['é!', 'a😀'] }));
    // 'a' then '😀' as one stand-in token; a lone 0xc3 before does not disturb the match.
    expect(run(h2, [0xc3, 0x61, standInToken(0x1f600), 0x41])).toBe(2);
    expect(h2.view.stopReason(0)).toBe('a😀');

    const h3 = makeHarness();
    h3.meta.write(0, 1, metaFields({ stop: ['😀'] }));
    // The 4 bytes of U+1F600 as byte tokens: the match completes on the last one.
    expect(run(h3, [0x20, 0xf0, 0x9f, 0x98, 0x80, 0x20])).toBe(4);
    expect(h3.acc.completionTokens(0)).toBe(5);
  });

  it('picks the first stop string in request order when several end in the same token', () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields({ stop: ['xyz', 'z'] }));
    expect(run(h, ascii('axyz'))).toBe(3);
    expect(h.view.stopReason(0)).toBe('xyz');
  });

  it('are not checked before min_tokens completion tokens (vLLM), but may start before', () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields({ stop: ['ab'], minTokens: 3 }));
    // "ab" completes at token 2 (not checked) and again at token 5 (checked).
    expect(run(h, ascii('abxxab'))).toBe(5);
    const h2 = makeHarness();
    h2.meta.write(0, 1, metaFields({ stop: ['ab'], minTokens: 3 }));
    // Starts inside the first 3 tokens, ends on the 4th: a match.
    expect(run(h2, ascii('xxab'))).toBe(3);
  });

  it('turn a max_tokens finish into a stop-string finish; an EOS finish is not checked', () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields({ stop: ['ab'] }));
    expect(run(h, ascii('xab'), LENGTH)).toBe(2);
    expect(h.view.finishName(0)).toBe('stop');
    expect(h.view.stopReason(0)).toBe('ab');
    // The engine is done too: nothing to abort, the slot is released.
    expect(h.scatter.stopped.count).toBe(0);
    expect(events(h.scatter.released)).toEqual([[0, 1]]);

    const h2 = makeHarness();
    h2.meta.write(0, 1, metaFields({ stop: ['ab'] }));
    h2.feed([{ slot: 0, gen: 1, token: 0x61 }]);
    h2.feed([{ slot: 0, gen: 1, token: 0x62, finish: STOP, stopTokenId: 0x62 }]);
    expect(h2.view.stopReason(0)).toBe(0x62);
  });

  it('with the tiny vocabulary, match on word tokens', () => {
    const vocab = tinyVocabulary();
    const h = makeHarness({ tokens: tokenByteSource('tiny', [998, 999]) });
    h.meta.write(0, 1, metaFields({ stop: [' answer is'] }));
    const ids = [' The', ' answer', ' is', ' 4'].map((w) => vocab.indexOf(w));
    expect(ids.every((i) => i >= 256)).toBe(true);
    expect(run(h, ids)).toBe(2);
    expect(h.view.stopReason(0)).toBe(' answer is');
  });

  it('the slot meta refuses stop strings past the parsing limits as a caller bug, not a 400', () => {
    const meta = new SlotMetaTable(1);
    expect(() =>
      meta.write(0, 1, metaFields({ stop: new Array(MAX_STOP_STRINGS).fill('a') })),
    ).not.toThrow();
    expect(() =>
      meta.write(0, 2, metaFields({ stop: new Array(MAX_STOP_STRINGS + 1).fill('a') })),
    ).toThrow(expect.objectContaining({ code: 'RS_ERR_OUTPUT_BAD_SLOT', statusCode: 500 }));
  });

  it('finds a long stop string whatever the window compaction point (every alignment)', () => {
    const meta = new SlotMetaTable(1);
    const long = `${'q'.repeat(900)}END`;
    meta.write(0, 1, metaFields({ stop: [long] }));
    const matcher = new StopStringMatcher(meta, new ByteLevelStandIn());
    // The window compacts every few hundred bytes; shifting the prefix by one byte at a time puts
    // a compaction right before the match's last token in one of these runs.
    const found: number[] = [];
    for (let prefix = 0; prefix < 400; prefix++) {
      matcher.begin(0);
      let early = 0;
      for (let i = 0; i < prefix; i++) early += matcher.push(0, 0x71, true) + 1;
      for (let i = 0; i < long.length - 1; i++)
        early += matcher.push(0, long.charCodeAt(i), true) + 1;
      found.push(early === 0 ? matcher.push(0, 0x44, true) : -2);
    }
    expect(found).toEqual(new Array(400).fill(0));
  });

  it('keeps working when the text is longer than the window (long outputs, long stop strings)', () => {
    const h = makeHarness();
    const long = `${'q'.repeat(900)}END`;
    h.meta.write(0, 1, metaFields({ stop: [long, 'never'] }));
    const tokens = [...ascii('x'.repeat(5000)), ...ascii(long), 0x41];
    expect(run(h, tokens)).toBe(5000 + long.length - 1);
    expect(h.view.stopReason(0)).toBe(long);
  });
});
