import { describe, expect, it } from 'vitest';
import type { DecodedRouting } from '../../src/client/decode.js';
import { RS_ERR_ROUTER_SHORT_ROWS } from '../../src/errors.js';
import { mergeRouting } from '../../src/router/merge.js';

const WIDTH = 2 * 3;

/** Rows of positions [start, start + rows): every id of row p is p % 200 (+ 300 when wide). */
function rows(start: number, count: number, wide = false): DecodedRouting {
  const data = wide ? new Uint16Array(count * WIDTH) : new Uint8Array(count * WIDTH);
  for (let r = 0; r < count; r++)
    data.fill(((start + r) % 200) + (wide ? 300 : 0), r * WIDTH, (r + 1) * WIDTH);
  return { data, shape: [count, 2, 3], start };
}

const positionOf = (data: Uint8Array | Uint16Array, r: number): number =>
  (data[r * WIDTH] as number) % 300;

describe('mergeRouting', () => {
  it('after an import: prefill rows 0..P-1, decode rows from P (one dropped)', () => {
    // P = 10, C = 5: prefill has rows 0..9, decode rows 9..13 (its first forward is P-1).
    const merged = mergeRouting(rows(0, 10), rows(9, 5), 0, 14)!;
    expect(merged.rows).toBe(14);
    expect(merged.start).toBe(0);
    for (let r = 0; r < 14; r++) expect(positionOf(merged.data, r)).toBe(r);
  });

  it('after a failed load: the decode recomputed the prompt, its first P rows are dropped', () => {
    const merged = mergeRouting(rows(0, 10), rows(0, 14), 0, 14)!;
    expect(merged.rows).toBe(14);
    for (let r = 0; r < 14; r++) expect(positionOf(merged.data, r)).toBe(r);
  });

  it('with routed_experts_prompt_start: the merged start is the prefill start', () => {
    const merged = mergeRouting(rows(4, 6), rows(9, 5), 0, 14)!;
    expect([merged.start, merged.rows]).toEqual([4, 10]);
    for (let r = 0; r < 10; r++) expect(positionOf(merged.data, r)).toBe(4 + r);
  });

  it('keeps uint16 when either side is wide', () => {
    const merged = mergeRouting(rows(0, 10), rows(9, 5, true), 0, 14)!;
    expect(merged.data).toBeInstanceOf(Uint16Array);
    expect(merged.data[13 * WIDTH]).toBe(313);
  });

  it('a decode answer short of rows is RS_ERR_ROUTER_SHORT_ROWS (502) naming the shortfall', () => {
    const gap = (): unknown => mergeRouting(rows(0, 10), rows(11, 3), 0, 14);
    expect(gap).toThrow(RS_ERR_ROUTER_SHORT_ROWS);
    expect(gap).toThrow(/positions 10\.\.10 are missing/);
    const short = (): unknown => mergeRouting(rows(0, 10), rows(9, 3), 0, 14);
    expect(short).toThrow(/2 short/);
    try {
      short();
    } catch (error) {
      expect((error as { statusCode: number }).statusCode).toBe(502);
    }
    expect(() => mergeRouting(rows(0, 10), null, 0, 14)).toThrow(/decode sent none/);
  });
});
