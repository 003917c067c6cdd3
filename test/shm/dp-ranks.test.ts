/**
 * The data-parallel rank block (layout.ts, DP RANKS) through a real region and a second mapping of
 * it: what the engine writes under the stats seqlock, a reader copies with the engine stats of the
 * same publish; counts are clamped to the block; a writer stopped mid-publish does not make the
 * reader return nothing.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { readEngineStats, readRankStats, writeRankStats } from '../../src/shm/dp-ranks.js';
import {
  DP_RANK_COUNT,
  ENGINE_STATS_INDEX,
  MAX_DP_RANKS,
  RANK_KV_USAGE,
  RANK_PREFIX_HITS,
  RANK_STAT_SLOTS,
  RANK_UP,
  STAT_RUNNING,
  STATS_SLOT_COUNT,
} from '../../src/shm/layout.js';
import { createRegion, openRegion, type Region, unlinkRegion } from '../../src/shm/region.js';
import { beginStatsWrite, endStatsWrite, statsSeq } from '../../src/shm/words.js';
import { uniqueRegionName } from './helpers.js';

const SMALL = { apiServerCount: 1, requestRingBytes: 4096, outputRingBytes: 8192 };
const created: string[] = [];

afterEach(() => {
  for (const name of created.splice(0)) unlinkRegion(name);
});

function regionPair(): [Region, Region] {
  const name = uniqueRegionName('dp-ranks');
  created.push(name);
  return [createRegion(name, SMALL), openRegion(name)];
}

const rankRows = () => new Float64Array(MAX_DP_RANKS * RANK_STAT_SLOTS);

/** One publish as the core loop makes it: engine stats and ranks inside one seqlock section. */
function publish(region: Region, running: number, count: number, rows: Float64Array): number {
  beginStatsWrite(region.i32);
  region.f64[ENGINE_STATS_INDEX + STAT_RUNNING] = running;
  const written = writeRankStats(region, count, rows);
  endStatsWrite(region.i32);
  return written;
}

describe('the data-parallel rank block', () => {
  it('reads 0 ranks before the first publish', () => {
    const [, reader] = regionPair();
    expect(readRankStats(reader, rankRows())).toBe(0);
  });

  it('round-trips the count and every row through another mapping, with the engine stats', () => {
    const [engine, reader] = regionPair();
    const rows = rankRows();
    for (let r = 0; r < 3; r++) {
      for (let s = 0; s < RANK_STAT_SLOTS; s++) rows[r * RANK_STAT_SLOTS + s] = 100 * r + s + 0.5;
    }
    rows[3 * RANK_STAT_SLOTS] = 999; // beyond the count: not published
    const seq = statsSeq(engine.i32);
    expect(publish(engine, 42, 3, rows)).toBe(3);
    expect(statsSeq(reader.i32)).toBe(seq + 2); // one seqlock section for both
    expect(Atomics.load(reader.i32, DP_RANK_COUNT >> 2)).toBe(3);

    const stats = new Float64Array(STATS_SLOT_COUNT);
    const into = rankRows();
    into.fill(-1);
    expect(readEngineStats(reader, stats, into)).toBe(3);
    expect(stats[STAT_RUNNING]).toBe(42);
    expect(Array.from(into.subarray(0, 3 * RANK_STAT_SLOTS))).toEqual(
      Array.from(rows.subarray(0, 3 * RANK_STAT_SLOTS)),
    );
    expect(into[3 * RANK_STAT_SLOTS]).toBe(-1); // rows past the count are not copied
    expect(into[2 * RANK_STAT_SLOTS + RANK_PREFIX_HITS]).toBe(207.5);

    // A later publish with fewer ranks: the count says which rows are valid.
    rows[RANK_UP] = 1;
    rows[RANK_KV_USAGE] = 0.25;
    publish(engine, 7, 1, rows);
    expect(readEngineStats(reader, stats, into)).toBe(1);
    expect(stats[STAT_RUNNING]).toBe(7);
    expect(into[RANK_KV_USAGE]).toBe(0.25);
  });

  it('clamps a count outside [0, MAX_DP_RANKS] and fills all 256 rows', () => {
    const [engine, reader] = regionPair();
    const rows = rankRows();
    for (let i = 0; i < rows.length; i++) rows[i] = i;
    expect(publish(engine, 0, 10_000, rows)).toBe(MAX_DP_RANKS);
    const into = rankRows();
    expect(readRankStats(reader, into)).toBe(MAX_DP_RANKS);
    expect(into[rows.length - 1]).toBe(rows.length - 1);
    expect(publish(engine, 0, -3, rows)).toBe(0);
    expect(readRankStats(reader, into)).toBe(0);
    expect(publish(engine, 0, Number.NaN, rows)).toBe(0);
    // A reader's array shorter than the block holds only the ranks that fit.
    publish(engine, 0, 4, rows);
    expect(readRankStats(reader, new Float64Array(2 * RANK_STAT_SLOTS))).toBe(2);
  });

  it('still copies the figures when the writer stopped in the middle of a publish', () => {
    const [engine, reader] = regionPair();
    const rows = rankRows();
    rows[RANK_STAT_SLOTS + RANK_UP] = 1;
    publish(engine, 5, 2, rows);
    beginStatsWrite(engine.i32); // killed before endStatsWrite: the word stays odd
    expect(statsSeq(reader.i32) & 1).toBe(1);
    const into = rankRows();
    expect(readRankStats(reader, into)).toBe(2);
    expect(into[RANK_STAT_SLOTS + RANK_UP]).toBe(1);
    endStatsWrite(engine.i32);
  });
});
