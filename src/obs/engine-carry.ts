/**
 * Engine counters that survive an engine restart. A new engine process starts its counters at 0 and
 * publishes them over its predecessor's; before it does, it adds the predecessor's final values to
 * the carry slots (layout.ts, STAT_CARRY_*) and zeroes them, under the stats seqlock, so a reader
 * taking `carry + counter` (exposition.ts) sees a total that never goes backwards, and never counts
 * a value twice. The engine process is the stats block's one writer, before and after.
 */
import {
  ENGINE_STATS_INDEX,
  STAT_CARRY_EXTERNAL_HIT_TOKENS,
  STAT_CARRY_KV_LOAD_FAILURES,
  STAT_CARRY_OFFLOAD_LOADED_BLOCKS,
  STAT_CARRY_OFFLOAD_STORED_BLOCKS,
  STAT_CARRY_PREEMPTIONS,
  STAT_CARRY_PREFIX_HITS,
  STAT_CARRY_PREFIX_QUERIES,
  STAT_CARRY_VLLM_UNDECODABLE,
  STAT_EXTERNAL_HIT_TOKENS,
  STAT_KV_LOAD_FAILURES,
  STAT_NUM_PREEMPTIONS,
  STAT_OFFLOAD_LOADED_BLOCKS,
  STAT_OFFLOAD_STORED_BLOCKS,
  STAT_PREFIX_HITS,
  STAT_PREFIX_QUERIES,
  STAT_VLLM_UNDECODABLE,
} from '../shm/layout.js';
import type { Region } from '../shm/region.js';
import { beginStatsWrite, endStatsWrite, statsSeq } from '../shm/words.js';

/** [counter slot, carry slot] of every engine counter exported to Prometheus. */
export const CARRIED_COUNTERS: readonly (readonly [number, number])[] = [
  [STAT_NUM_PREEMPTIONS, STAT_CARRY_PREEMPTIONS],
  [STAT_PREFIX_QUERIES, STAT_CARRY_PREFIX_QUERIES],
  [STAT_PREFIX_HITS, STAT_CARRY_PREFIX_HITS],
  [STAT_EXTERNAL_HIT_TOKENS, STAT_CARRY_EXTERNAL_HIT_TOKENS],
  [STAT_KV_LOAD_FAILURES, STAT_CARRY_KV_LOAD_FAILURES],
  [STAT_OFFLOAD_STORED_BLOCKS, STAT_CARRY_OFFLOAD_STORED_BLOCKS],
  [STAT_OFFLOAD_LOADED_BLOCKS, STAT_CARRY_OFFLOAD_LOADED_BLOCKS],
  [STAT_VLLM_UNDECODABLE, STAT_CARRY_VLLM_UNDECODABLE],
];

/** The engine process, before its core loop first publishes stats. */
export function carryEngineCounters(region: Region): void {
  const { i32, f64 } = region;
  const base = ENGINE_STATS_INDEX;
  // A predecessor killed in the middle of a publish left the seqlock odd: even it out first, or
  // every later publish (add 1, write, add 1) would leave it odd and readers would never take a copy.
  if ((statsSeq(i32) & 1) !== 0) endStatsWrite(i32);
  beginStatsWrite(i32);
  for (const [counter, carry] of CARRIED_COUNTERS) {
    f64[base + carry]! += f64[base + counter]!;
    f64[base + counter] = 0;
  }
  endStatsWrite(i32);
}
