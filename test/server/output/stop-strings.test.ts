import { describe, expect, it } from 'vitest';
import { MAX_STOP_STRINGS } from '../../../src/protocol/stop-strings.js';
import type { TokenBytes } from '../../../src/protocol/token-bytes.js';
import { SlotState } from '../../../src/server/cross-thread/accumulators.js';
import {
  ByteLevelStandIn,
  StopStringMatcher,
  tokenBytesFor,
} from '../../../src/server/cross-thread/detokenizer.js';
import { SlotMetaTable } from '../../../src/server/cross-thread/slot-meta.js';
import { tokenizerForModel } from '../../../src/tokenizer/presets.js';
import { TokenBytesTable } from '../../../src/tokenizer/token-bytes.js';
import { TINY_BYTES, TINY_IM_END, tinyChars, tinyId, tinyIds } from '../tiny-tokens.js';
import { events, makeHarness, metaFields } from './harness.js';

// Text is the committed tiny tokenizer's (the harness's default): tinyChars gives one token per
// character, its single-byte tokens. The tiny vocabulary has no token that is a whole character of
// several bytes: the test that needs one takes Qwen3's, and says so.

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

/** The id of a vocabulary's token that is the one byte `byte`. */
function byteToken(table: TokenBytesTable, byte: number): number {
  for (let id = 0; id < table.size; id++) {
    if (table.tokenLength(id) === 1 && table.bytesOf(id)[0] === byte) return id;
  }
  throw new Error(`no token is the byte ${byte}`);
}

function decode(source: TokenBytes, ids: number[], skipSpecial = true): string {
  const out = new Uint8Array(ids.length * source.maxTokenBytes);
  let n = 0;
  for (const id of ids) n += source.write(id, out, n, skipSpecial);
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

// The stand-in is what the output side detokenizes with when started without a tokenizer (the
// benchmarks, the fuzzer, the metrics tests): its own rule is tested here.
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

  it('has no text for special ids, skipped or not', () => {
    const src = new ByteLevelStandIn([999]);
    expect(decode(src, [999, 0x41], false)).toBe('A');
  });
});

describe("a thread's token bytes (tokenBytesFor)", () => {
  it('are the served table it is handed, shared; else the stand-in with the special ids', () => {
    const table = tokenBytesFor({ tokenBytes: TINY_BYTES.shared, specialTokenIds: [] });
    expect(table).toBeInstanceOf(TokenBytesTable);
    expect(table.maxTokenBytes).toBe(TINY_BYTES.maxTokenBytes);
    expect(decode(table, [...tinyIds(' The answer'), TINY_IM_END])).toBe(' The answer');
    expect(decode(table, [TINY_IM_END], false)).toBe('<|im_end|>');
    const standIn = tokenBytesFor({ specialTokenIds: [999] });
    expect(standIn).toBeInstanceOf(ByteLevelStandIn);
    expect(decode(standIn, [999, 0x41])).toBe('A');
  });
});

describe('stop strings', () => {
  it('match across token boundaries; the completion ends at the token that completed the match', () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields({ stop: ['ab'], samplingMask: false, routedExperts: false }));
    const step = run(h, tinyChars('xxaab!!'));
    expect(step).toBe(4);
    expect(events(h.scatter.finished)).toEqual([[0, 1]]);
    // The engine still runs the request: the main thread must abort it.
    expect(events(h.scatter.stopped)).toEqual([[0, 1]]);
    const c = h.view.choice(0, 0);
    expect(Array.from(c.tokenIds)).toEqual(tinyChars('xxaab'));
    expect(c.logprobs!.length).toBe(5);
    expect(c.finishReason).toBe('stop');
    expect(c.stopReason).toBe('ab');
    // Outputs after the match are ignored until the engine's final output releases the slot.
    h.feed([{ slot: 0, gen: 1, token: tinyId('!') }]);
    expect(h.acc.completionTokens(0)).toBe(5);
    expect(h.scatter.released.count).toBe(0);
    h.feed([{ slot: 0, gen: 1, finish: ABORT }]);
    expect(events(h.scatter.released)).toEqual([[0, 1]]);
    expect(h.acc.state(0)).toBe(SlotState.Done);
    expect(h.view.finishName(0)).toBe('stop');
  });

  it('match multibyte UTF-8 split over byte-fallback tokens, and 4-byte characters', async () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields({ stop: ['é!', 'a😀'] }));
    // 'é' as its two byte tokens, then '!': matches on the third token.
    const eAcute = tinyIds('é');
    expect(eAcute).toHaveLength(2);
    expect(run(h, [tinyId('A'), ...eAcute, tinyId('!'), tinyId('B')])).toBe(3);
    expect(h.view.stopReason(0)).toBe('é!');

    // 'a' then '😀' as one token: the tiny vocabulary has no token that is a whole character of
    // several bytes, Qwen3's (the other committed preset) has '😀'. A lone 0xc3 byte token before
    // does not disturb the match.
    const qwen3 = await tokenizerForModel('qwen3-30b-a3b');
    const [a, grinning, capitalA] = ['a', '😀', 'A'].map((t) => {
      const ids = qwen3.encode(t, { addSpecialTokens: false });
      expect(ids).toHaveLength(1);
      return ids[0]!;
    });
    const h2 = makeHarness({ tokens: qwen3.bytes });
    h2.meta.write(0, 1, metaFields({ stop: ['é!', 'a😀'] }));
    expect(run(h2, [byteToken(qwen3.bytes, 0xc3), a!, grinning!, capitalA!])).toBe(2);
    expect(h2.view.stopReason(0)).toBe('a😀');

    const h3 = makeHarness();
    h3.meta.write(0, 1, metaFields({ stop: ['😀'] }));
    // The 4 bytes of U+1F600 as byte tokens: the match completes on the last one.
    const grin = tinyIds('😀');
    expect(grin).toHaveLength(4);
    expect(run(h3, [tinyId(' '), ...grin, tinyId(' ')])).toBe(4);
    expect(h3.acc.completionTokens(0)).toBe(5);
  });

  it('picks the first stop string in request order when several end in the same token', () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields({ stop: ['xyz', 'z'] }));
    expect(run(h, tinyChars('axyz'))).toBe(3);
    expect(h.view.stopReason(0)).toBe('xyz');
  });

  it('are not checked before min_tokens completion tokens (vLLM), but may start before', () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields({ stop: ['ab'], minTokens: 3 }));
    // "ab" completes at token 2 (not checked) and again at token 5 (checked).
    expect(run(h, tinyChars('abxxab'))).toBe(5);
    const h2 = makeHarness();
    h2.meta.write(0, 1, metaFields({ stop: ['ab'], minTokens: 3 }));
    // Starts inside the first 3 tokens, ends on the 4th: a match.
    expect(run(h2, tinyChars('xxab'))).toBe(3);
  });

  it('turn a max_tokens finish into a stop-string finish; an EOS finish is not checked', () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields({ stop: ['ab'] }));
    expect(run(h, tinyChars('xab'), LENGTH)).toBe(2);
    expect(h.view.finishName(0)).toBe('stop');
    expect(h.view.stopReason(0)).toBe('ab');
    // The engine is done too: nothing to abort, the slot is released.
    expect(h.scatter.stopped.count).toBe(0);
    expect(events(h.scatter.released)).toEqual([[0, 1]]);

    const h2 = makeHarness();
    h2.meta.write(0, 1, metaFields({ stop: ['ab'] }));
    const [a, b] = tinyChars('ab') as [number, number];
    h2.feed([{ slot: 0, gen: 1, token: a }]);
    h2.feed([{ slot: 0, gen: 1, token: b, finish: STOP, stopTokenId: b }]);
    expect(h2.view.stopReason(0)).toBe(b);
  });

  it('match on word tokens', () => {
    const h = makeHarness();
    h.meta.write(0, 1, metaFields({ stop: [' answer is'] }));
    const ids = [' The', ' answer', ' is'].map(tinyId);
    expect(ids.every((i) => i >= 256)).toBe(true);
    expect(run(h, [...ids, ...tinyIds(' 4')])).toBe(2);
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
    const matcher = new StopStringMatcher(meta, TINY_BYTES);
    const q = tinyId('q');
    const longIds = tinyChars(long);
    // The window compacts every few hundred bytes; shifting the prefix by one byte at a time puts
    // a compaction right before the match's last token in one of these runs.
    const found: number[] = [];
    for (let prefix = 0; prefix < 400; prefix++) {
      matcher.begin(0);
      let early = 0;
      for (let i = 0; i < prefix; i++) early += matcher.push(0, q, true) + 1;
      for (let i = 0; i < longIds.length - 1; i++) early += matcher.push(0, longIds[i]!, true) + 1;
      found.push(early === 0 ? matcher.push(0, longIds.at(-1)!, true) : -2);
    }
    expect(found).toEqual(new Array(400).fill(0));
  });

  it('keeps working when the text is longer than the window (long outputs, long stop strings)', () => {
    const h = makeHarness();
    const long = `${'q'.repeat(900)}END`;
    h.meta.write(0, 1, metaFields({ stop: [long, 'never'] }));
    const tokens = [...tinyChars('x'.repeat(5000)), ...tinyChars(long), tinyId('A')];
    expect(run(h, tokens)).toBe(5000 + long.length - 1);
    expect(h.view.stopReason(0)).toBe(long);
  });
});
