/**
 * The region's data-parallel rank block (layout.ts, DP RANKS): the figures of each engine rank behind
 * an engine core that fronts several (EngineCore.rankStats), RANK_STAT_SLOTS f64 per rank. The core
 * loop writes it between beginStatsWrite and endStatsWrite, inside the same ENG_STATS_SEQ seqlock
 * section as ENGINE STATS, so a reader's copy of the two is always one publish's. Every function is
 * a pass over typed arrays the caller owns: no allocation per call.
 */
import {
  DP_RANK_COUNT,
  DP_RANK_STATS_INDEX,
  ENGINE_STATS_INDEX,
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
  STATS_SLOT_COUNT,
} from './layout.js';
import { type RegionWords, statsSeq } from './words.js';

/** One rank's figures, as a row holds them (wire's EngineStats has these fields). */
export interface RankFigures {
  running: number;
  waiting: number;
  kvUsage: number;
  promptTokens: number;
  generationTokens: number;
  prefixQueries: number;
  prefixHits: number;
}

/** Rank `rank`'s row of `rows`: whether it is attached, and its figures. */
export function setRankRow(rows: Float64Array, rank: number, up: boolean, f: RankFigures): void {
  const at = rank * RANK_STAT_SLOTS;
  rows[at + RANK_UP] = up ? 1 : 0;
  rows[at + RANK_RUNNING] = f.running;
  rows[at + RANK_WAITING] = f.waiting;
  rows[at + RANK_KV_USAGE] = f.kvUsage;
  rows[at + RANK_PROMPT_TOKENS] = f.promptTokens;
  rows[at + RANK_GENERATION_TOKENS] = f.generationTokens;
  rows[at + RANK_PREFIX_QUERIES] = f.prefixQueries;
  rows[at + RANK_PREFIX_HITS] = f.prefixHits;
}

/** `count` as a whole number of ranks that fits both the block and `rows`. */
function rankCount(count: number, rows: Float64Array): number {
  const n = Math.min(count, MAX_DP_RANKS, Math.floor(rows.length / RANK_STAT_SLOTS));
  return n > 0 ? Math.floor(n) : 0;
}

/**
 * The engine, between beginStatsWrite and endStatsWrite (the stats seqlock is odd): the rank count
 * and ranks [0, count) of `rows` (rank r at r * RANK_STAT_SLOTS). A count outside
 * [0, MAX_DP_RANKS] is clamped; returns the count written.
 */
export function writeRankStats(region: RegionWords, count: number, rows: Float64Array): number {
  const n = rankCount(count, rows);
  const f64 = region.f64;
  region.i32[DP_RANK_COUNT >> 2] = n;
  const slots = n * RANK_STAT_SLOTS;
  for (let i = 0; i < slots; i++) f64[DP_RANK_STATS_INDEX + i] = rows[i]!;
  return n;
}

/**
 * How many times a reader looks at the seqlock before it takes the figures as they stand: the
 * engine's write of 256 ranks is ~2k stores (a few microseconds); a writer that stopped mid-publish
 * (killed: the next engine evens the word out, engine-carry.ts) must not make every scrape spin.
 */
const READ_ATTEMPTS = 1000;

/**
 * A consistent copy (stats seqlock read) of what one publish wrote: the engine stats into `stats`
 * (STATS_SLOT_COUNT f64, STAT_* order; null: not copied) and ranks [0, count) of the rank block into
 * `ranks` (MAX_DP_RANKS * RANK_STAT_SLOTS f64). After READ_ATTEMPTS looks without one, the figures
 * as they stand. Returns the rank count: 0 before the engine's first publish, 1 for an engine core
 * with one engine.
 */
export function readEngineStats(
  region: RegionWords,
  stats: Float64Array | null,
  ranks: Float64Array,
): number {
  const { i32, f64 } = region;
  for (let attempt = 1; ; attempt++) {
    const last = attempt >= READ_ATTEMPTS;
    const before = statsSeq(i32);
    if ((before & 1) !== 0 && !last) continue;
    if (stats !== null) {
      for (let s = 0; s < STATS_SLOT_COUNT; s++) stats[s] = f64[ENGINE_STATS_INDEX + s]!;
    }
    const count = rankCount(i32[DP_RANK_COUNT >> 2]!, ranks);
    const slots = count * RANK_STAT_SLOTS;
    for (let i = 0; i < slots; i++) ranks[i] = f64[DP_RANK_STATS_INDEX + i]!;
    if (last || statsSeq(i32) === before) return count;
  }
}

/** readEngineStats without the engine stats: the rank count, and the ranks into `into`. */
export function readRankStats(region: RegionWords, into: Float64Array): number {
  return readEngineStats(region, null, into);
}
