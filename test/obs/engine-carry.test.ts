/** Engine counters across an engine restart: the carry never loses or doubles a count. */
import { describe, expect, it } from 'vitest';
import { CARRIED_COUNTERS, carryEngineCounters } from '../../src/obs/engine-carry.js';
import {
  ENG_STATS_SEQ,
  ENGINE_STATS,
  regionBytes,
  resolveLayoutParams,
  STAT_CARRY_PREFIX_HITS,
  STAT_NUM_PREEMPTIONS,
  STAT_PREFIX_HITS,
  STAT_RUNNING,
} from '../../src/shm/layout.js';
import type { Region } from '../../src/shm/region.js';

function fakeRegion(): Region {
  const params = resolveLayoutParams({ requestRingBytes: 64, outputRingBytes: 64 });
  const sab = new SharedArrayBuffer(regionBytes(params));
  return {
    name: 'fake',
    sab,
    params,
    i32: new Int32Array(sab, 0, sab.byteLength >> 2),
    f64: new Float64Array(sab, 0, sab.byteLength >> 3),
  };
}

const stat = (r: Region, slot: number) => r.f64[(ENGINE_STATS >> 3) + slot]!;
const total = (r: Region, [counter, carry]: readonly [number, number]) =>
  stat(r, counter) + stat(r, carry);

describe('engine counter carry', () => {
  it('moves the predecessor counters into the carry, so carry + counter is unchanged', () => {
    const r = fakeRegion();
    const base = ENGINE_STATS >> 3;
    r.f64[base + STAT_PREFIX_HITS] = 40;
    r.f64[base + STAT_CARRY_PREFIX_HITS] = 100;
    r.f64[base + STAT_NUM_PREEMPTIONS] = 3;
    r.f64[base + STAT_RUNNING] = 5; // a gauge: not carried
    const before = CARRIED_COUNTERS.map((c) => total(r, c));
    carryEngineCounters(r);
    expect(CARRIED_COUNTERS.map((c) => total(r, c))).toEqual(before);
    expect(stat(r, STAT_PREFIX_HITS)).toBe(0);
    expect(stat(r, STAT_CARRY_PREFIX_HITS)).toBe(140);
    expect(stat(r, STAT_RUNNING)).toBe(5);
    // The new engine counts from 0 on top of the carry: the total only grows.
    r.f64[base + STAT_PREFIX_HITS] = 1;
    expect(total(r, [STAT_PREFIX_HITS, STAT_CARRY_PREFIX_HITS])).toBe(141);
  });

  it('writes under the seqlock and repairs one a killed engine left odd', () => {
    const r = fakeRegion();
    const seq = ENG_STATS_SEQ >> 2;
    carryEngineCounters(r);
    expect(r.i32[seq]).toBe(2);
    r.i32[seq] = 7; // killed between its two increments
    carryEngineCounters(r);
    expect(r.i32[seq]! % 2).toBe(0);
  });
});
