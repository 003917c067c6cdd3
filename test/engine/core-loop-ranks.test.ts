/**
 * The core loop publishes the data-parallel ranks' figures (EngineCore.rankStats) into the region's
 * rank block on every publish, under the stats seqlock with the engine stats, into one array it
 * allocated once; an engine without rankStats is published as one rank whose figures are its stats.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { CoreLoop } from '../../src/engine/core-loop.js';
import { readEngineStats } from '../../src/shm/dp-ranks.js';
import {
  MAX_DP_RANKS,
  RANK_GENERATION_TOKENS,
  RANK_KV_USAGE,
  RANK_PREFIX_HITS,
  RANK_PREFIX_QUERIES,
  RANK_PROMPT_TOKENS,
  RANK_RUNNING,
  RANK_STAT_SLOTS,
  RANK_UP,
  RANK_WAITING,
  STAT_KV_USAGE,
  STAT_RUNNING,
  STAT_STEP_COUNT,
  STATS_SLOT_COUNT,
} from '../../src/shm/layout.js';
import type { Region } from '../../src/shm/region.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import type { EngineStats } from '../../src/wire/types.js';
import { tinyConfig } from '../sim/helpers.js';
import { until } from '../until.js';
import { testRegion, unlinkTestRegions } from './helpers.js';

/**
 * The simulator as the front of three data-parallel ranks: every publish numbers its stats (steps)
 * and its ranks' figures with the same publish count, so a copy mixing two publishes shows.
 */
class ThreeRankEngine extends SimEngine {
  publishes = 0;
  arrays = new Set<Float64Array>();
  /** Rank 1 is detached while true. */
  rankOneDown = false;

  override stats(into?: EngineStats): EngineStats {
    const s = super.stats(into);
    s.steps = ++this.publishes;
    return s;
  }

  rankStats(into: Float64Array): number {
    this.arrays.add(into);
    const n = this.publishes;
    for (let r = 0; r < 3; r++) {
      const row = r * RANK_STAT_SLOTS;
      into[row + RANK_UP] = r === 1 && this.rankOneDown ? 0 : 1;
      into[row + RANK_RUNNING] = n + r;
      into[row + RANK_WAITING] = 10 * r;
      into[row + RANK_KV_USAGE] = r / 4;
      into[row + RANK_PROMPT_TOKENS] = 1000 * n + r;
      into[row + RANK_GENERATION_TOKENS] = 2000 * n + r;
      into[row + RANK_PREFIX_QUERIES] = 300 + r;
      into[row + RANK_PREFIX_HITS] = 100 + r;
    }
    return 3;
  }
}

let stop: (() => Promise<void>) | null = null;

afterEach(async () => {
  await stop?.();
  stop = null;
  unlinkTestRegions();
});

function start<E extends SimEngine>(engine: E): { region: Region; engine: E } {
  const region = testRegion({
    apiServerCount: 1,
    requestRingBytes: 1 << 16,
    outputRingBytes: 1 << 16,
  });
  const loop = new CoreLoop(region, engine);
  const done = loop.run();
  stop = async () => {
    loop.stop();
    await done;
  };
  return { region, engine };
}

const stats = new Float64Array(STATS_SLOT_COUNT);
const ranks = new Float64Array(MAX_DP_RANKS * RANK_STAT_SLOTS);

describe('CoreLoop with data-parallel ranks', () => {
  it("publishes every rank's figures with the stats of the same publish, into one array", async () => {
    const { region, engine } = start(new ThreeRankEngine(tinyConfig()));
    await until(
      () => engine.publishes,
      (n) => n >= 4,
    );
    for (let look = 0; look < 5; look++) {
      expect(readEngineStats(region, stats, ranks)).toBe(3);
      const n = stats[STAT_STEP_COUNT]!;
      expect(n).toBeGreaterThan(0);
      for (let r = 0; r < 3; r++) {
        const row = r * RANK_STAT_SLOTS;
        expect(ranks[row + RANK_UP]).toBe(1);
        expect(ranks[row + RANK_RUNNING]).toBe(n + r);
        expect(ranks[row + RANK_WAITING]).toBe(10 * r);
        expect(ranks[row + RANK_KV_USAGE]).toBe(r / 4);
        expect(ranks[row + RANK_PROMPT_TOKENS]).toBe(1000 * n + r);
        expect(ranks[row + RANK_GENERATION_TOKENS]).toBe(2000 * n + r);
        expect(ranks[row + RANK_PREFIX_QUERIES]).toBe(300 + r);
        expect(ranks[row + RANK_PREFIX_HITS]).toBe(100 + r);
      }
      const seen = engine.publishes;
      await until(
        () => engine.publishes,
        (n) => n > seen,
      );
    }
    engine.rankOneDown = true;
    await until(
      () => {
        readEngineStats(region, stats, ranks);
        return ranks[RANK_STAT_SLOTS + RANK_UP];
      },
      (up) => up === 0,
    );
    expect(ranks[RANK_UP]).toBe(1);
    // The same preallocated array on every call: no allocation per publish.
    expect(engine.arrays.size).toBe(1);
    expect([...engine.arrays][0]!.length).toBe(MAX_DP_RANKS * RANK_STAT_SLOTS);
  });

  it('publishes an engine without rankStats as one rank: its engine stats', async () => {
    const { region, engine } = start(new SimEngine(tinyConfig()));
    await until(
      () => readEngineStats(region, stats, ranks),
      (count) => count === 1,
    );
    const s = engine.stats();
    expect(ranks[RANK_UP]).toBe(1);
    expect(ranks[RANK_RUNNING]).toBe(stats[STAT_RUNNING]);
    expect(ranks[RANK_KV_USAGE]).toBe(stats[STAT_KV_USAGE]);
    expect(ranks[RANK_PROMPT_TOKENS]).toBe(s.promptTokens);
    expect(ranks[RANK_GENERATION_TOKENS]).toBe(s.generationTokens);
    expect(ranks[RANK_PREFIX_QUERIES]).toBe(s.prefixQueries);
    expect(ranks[RANK_PREFIX_HITS]).toBe(s.prefixHits);
    // Nothing past rank 0 is copied out (a fresh array keeps its NaN there).
    const fresh = new Float64Array(MAX_DP_RANKS * RANK_STAT_SLOTS).fill(Number.NaN);
    expect(readEngineStats(region, stats, fresh)).toBe(1);
    expect(fresh[RANK_UP]).toBe(1);
    expect(fresh[RANK_STAT_SLOTS + RANK_UP]).toBeNaN();
  });
});
