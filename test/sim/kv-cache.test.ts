import { describe, expect, it } from 'vitest';
import { BlockHashTable } from '../../src/sim/block-hash-table.js';
import { KvBlockPool } from '../../src/sim/kv-block-pool.js';
import { TokenCounts } from '../../src/sim/token-counts.js';
import { combine } from '../../src/wire/hash.js';

describe('BlockHashTable', () => {
  it('agrees with a Map through random inserts and deletes (backward-shift deletion)', () => {
    const table = new BlockHashTable(64);
    const ref = new Map<string, number>();
    // Few distinct lo values force long probe runs and wrap-around.
    for (let i = 0; i < 20_000; i++) {
      const h = combine(1, i);
      const lo = (h & 0x3f) | 0;
      const hi = combine(h, 2);
      const k = `${hi}:${lo}`;
      if (ref.has(k)) {
        if (i % 2 === 0) {
          table.delete(hi, lo, ref.get(k) as number);
          ref.delete(k);
        }
      } else if (ref.size < 64) {
        table.set(hi, lo, i);
        ref.set(k, i);
      }
      if (i % 97 === 0) {
        for (const [key, v] of ref) {
          const [a, b] = key.split(':').map(Number) as [number, number];
          expect(table.get(a, b)).toBe(v);
        }
        expect(table.size).toBe(ref.size);
      }
    }
  });
});

describe('KvBlockPool', () => {
  it('allocates least-recently-freed first, evicting cached hashes only on reuse', () => {
    const pool = new KvBlockPool(4);
    const [a, b, c, d] = [pool.allocate(), pool.allocate(), pool.allocate(), pool.allocate()];
    expect(pool.numFree).toBe(0);
    pool.cache(a, 1, 10);
    pool.cache(b, 2, 20);
    pool.release(b);
    pool.release(a);
    expect(pool.lookup(1, 10)).toBe(a);
    // A hit takes a free cached block back out of the free queue.
    pool.touch(a);
    expect(pool.numFree).toBe(1);
    pool.release(a);
    // b was freed first: it is evicted first, its hash with it.
    expect(pool.allocate()).toBe(b);
    expect(pool.lookup(2, 20)).toBe(-1);
    expect(pool.lookup(1, 10)).toBe(a);
    expect(pool.resetPrefixCache()).toBe(false);
    pool.release(b);
    pool.release(c);
    pool.release(d);
    expect(pool.numFree).toBe(4);
    expect(pool.resetPrefixCache()).toBe(true);
    expect(pool.lookup(1, 10)).toBe(-1);
  });
});

describe('TokenCounts', () => {
  it('counts output occurrences and prompt presence per distinct token through growth', () => {
    const counts = new TokenCounts(2);
    for (let i = 0; i < 500; i++) counts.addOutput(i % 123);
    counts.addPrompt(7);
    counts.addPrompt(1000);
    expect(counts.size).toBe(124);
    expect(counts.outputCount[counts.indexOf(5)]).toBe(5);
    expect(counts.outputCount[counts.indexOf(122)]).toBe(4);
    expect(counts.inPrompt[counts.indexOf(7)]).toBe(1);
    expect(counts.outputCount[counts.indexOf(1000)]).toBe(0);
    expect(counts.indexOf(4242)).toBe(-1);
  });
});
