/**
 * The inline baseline's routing buffer: rows appended into one growing typed array per request,
 * read by position as the worker path stores them (column-writer.ts, appendRouting).
 */
import { describe, expect, it } from 'vitest';
import { RoutingBuffer } from '../../src/server/inline/inline-routing.js';

const LAYERS = 3;
const TOPK = 2;
const WIDTH = LAYERS * TOPK;

/** The row of sequence position `pos`: distinct ids per position, below `limit`. */
function row(pos: number, limit = 256): number[] {
  return Array.from({ length: WIDTH }, (_, k) => (pos * 7 + k * 3) % limit);
}

/** Rows of positions [from, to) as a step record carries them, at element `at` of a bigger array. */
function stepIds(from: number, to: number, at = 5, wide = false): Uint8Array | Uint16Array {
  const flat = [...new Array<number>(at).fill(99)];
  for (let pos = from; pos < to; pos++) flat.push(...row(pos, wide ? 65536 : 256));
  flat.push(99, 99);
  return wide ? Uint16Array.from(flat) : Uint8Array.from(flat);
}

function append(b: RoutingBuffer, from: number, to: number, promptStart = 0, wide = false) {
  b.append(stepIds(from, to, 5, wide), 5, from, to - from, LAYERS, TOPK, promptStart);
}

function expected(from: number, to: number, limit = 256): number[] {
  const out: number[] = [];
  for (let pos = from; pos < to; pos++) out.push(...row(pos, limit));
  return out;
}

describe('RoutingBuffer', () => {
  it('holds the prompt rows of the prefill and one row per decode step, in position order', () => {
    const b = new RoutingBuffer();
    append(b, 0, 6); // the prompt's 6 positions, forwarded at prefill
    for (let pos = 6; pos < 20; pos++) append(b, pos, pos + 1); // one decode step each
    expect(b.start).toBe(0);
    expect(b.rows).toBe(20);
    expect([b.layers, b.topk]).toEqual([LAYERS, TOPK]);
    expect(b.ids()).toBeInstanceOf(Uint8Array);
    expect(Array.from(b.ids())).toEqual(expected(0, 20));
    expect(Array.from(b.ids(15))).toEqual(expected(15, 20));
    expect(b.ids(20)).toHaveLength(0);
  });

  it('skips the rows before routed_experts_prompt_start, also across prefill chunks', () => {
    const b = new RoutingBuffer();
    append(b, 0, 4, 6); // a first prefill chunk: all before the start
    expect(b.rows).toBe(0);
    append(b, 4, 8, 6); // the second chunk: positions 6 and 7 are kept
    append(b, 8, 9, 6);
    expect(b.start).toBe(6);
    expect(b.rows).toBe(3);
    expect(Array.from(b.ids())).toEqual(expected(6, 9));
  });

  it('grows by doubling, and keeps every row it held', () => {
    const b = new RoutingBuffer();
    const capacities = new Set<number>();
    for (let pos = 0; pos < 1000; pos++) {
      append(b, pos, pos + 1);
      capacities.add(b.capacityRows);
    }
    expect([...capacities]).toEqual([64, 128, 256, 512, 1024]);
    expect(Array.from(b.ids())).toEqual(expected(0, 1000));
  });

  it('takes a first append bigger than twice its capacity at once', () => {
    const b = new RoutingBuffer();
    append(b, 0, 300);
    expect(b.capacityRows).toBe(300);
    append(b, 300, 301);
    expect(b.capacityRows).toBe(600);
    expect(Array.from(b.ids())).toEqual(expected(0, 301));
  });

  it('writes a row sent again (a recompute after preemption) over itself', () => {
    const b = new RoutingBuffer();
    append(b, 0, 10);
    append(b, 4, 12); // positions 4..9 again, then 10 and 11
    expect(b.rows).toBe(12);
    expect(Array.from(b.ids())).toEqual(expected(0, 12));
  });

  it('keeps 16-bit ids, and widens the buffer if they come after 8-bit ones', () => {
    const wide = new RoutingBuffer();
    append(wide, 0, 3, 0, true);
    expect(wide.ids()).toBeInstanceOf(Uint16Array);
    expect(Array.from(wide.ids())).toEqual(expected(0, 3, 65536));
    const b = new RoutingBuffer();
    append(b, 0, 3);
    append(b, 3, 5, 0, true);
    expect(b.ids()).toBeInstanceOf(Uint16Array);
    expect(Array.from(b.ids())).toEqual([...expected(0, 3), ...expected(3, 5, 65536)]);
  });
});
