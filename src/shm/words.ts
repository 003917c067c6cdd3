// Named access to the region's words (layout.ts). Offsets there are bytes; the region is read through
// an Int32Array (a "word": index = byte offset >> 2) and a Float64Array (a "slot": index = byte
// offset >> 3). The shifts live here so that callers outside src/shm name the word they touch, not
// the arithmetic that finds it. Every accessor is a plain function over the typed array it reads
// (no object, closure or boxed number per call), so hot paths may use them.
import {
  ENG_HEARTBEAT,
  ENG_LAST_BEAT_MS,
  ENG_PID,
  ENG_STATE,
  ENG_STATS_SEQ,
  ENGINE_STATS_INDEX,
  type LayoutParams,
  RING_CONSUMER_PID,
  RING_HEAD,
  RING_TAIL,
  SRV_PID,
  serverBlockOffset,
} from './layout.js';

/** The two views of a region every accessor here needs (a Region, the wire's RegionViews). */
export interface RegionWords {
  readonly i32: Int32Array;
  readonly f64: Float64Array;
}

// ---- Any word or slot, by its byte offset ---------------------------------------------------------

/** i32 index of the 32-bit word at byte offset `at` (for Atomics.wait/futexWake, record bases). */
export function wordIndex(at: number): number {
  return at >> 2;
}

/** f64 index of the float64 slot at byte offset `at`. */
export function slotIndex(at: number): number {
  return at >> 3;
}

/** Atomics.load of the word at byte offset `at`. */
export function loadWord(i32: Int32Array, at: number): number {
  return Atomics.load(i32, at >> 2);
}

/** Atomics.store of the word at byte offset `at`. */
export function storeWord(i32: Int32Array, at: number, value: number): void {
  Atomics.store(i32, at >> 2, value);
}

/** Atomics.add on the word at byte offset `at`; returns the word before the add. */
export function addWord(i32: Int32Array, at: number, delta: number): number {
  return Atomics.add(i32, at >> 2, delta);
}

/** Atomics.compareExchange on the word at byte offset `at`; returns the word found there. */
export function casWord(i32: Int32Array, at: number, expected: number, value: number): number {
  return Atomics.compareExchange(i32, at >> 2, expected, value);
}

/** Plain read of the word at byte offset `at` (one writer, ordered by a seq word's atomics). */
export function readWord(i32: Int32Array, at: number): number {
  return i32[at >> 2] as number;
}

/** Plain write of the word at byte offset `at`. */
export function writeWord(i32: Int32Array, at: number, value: number): void {
  i32[at >> 2] = value;
}

/** The float64 slot at byte offset `at`. */
export function readSlot(f64: Float64Array, at: number): number {
  return f64[at >> 3] as number;
}

/** Writes the float64 slot at byte offset `at`. */
export function writeSlot(f64: Float64Array, at: number, value: number): void {
  f64[at >> 3] = value;
}

/** The whole buffer as 32-bit words (index = byte offset >> 2). Allocates a view: not per call. */
export function wordsView(sab: SharedArrayBuffer): Int32Array {
  return new Int32Array(sab, 0, sab.byteLength >> 2);
}

/** The whole buffer as float64 slots (index = byte offset >> 3). Allocates a view: not per call. */
export function slotsView(sab: SharedArrayBuffer): Float64Array {
  return new Float64Array(sab, 0, sab.byteLength >> 3);
}

// ---- Engine block (the engine writes every word) -------------------------------------------------

/** ENG_PID: 0 while no engine has attached. */
export function enginePid(i32: Int32Array): number {
  return Atomics.load(i32, ENG_PID >> 2);
}

export function setEnginePid(i32: Int32Array, pid: number): void {
  Atomics.store(i32, ENG_PID >> 2, pid);
}

/** ENG_STATE: one of ENGINE_STATE_*. */
export function engineState(i32: Int32Array): number {
  return Atomics.load(i32, ENG_STATE >> 2);
}

export function setEngineState(i32: Int32Array, state: number): void {
  Atomics.store(i32, ENG_STATE >> 2, state);
}

/** ENG_LAST_BEAT_MS: Date.now() of the engine's last beat (0 before the first). */
export function engineLastBeatMs(f64: Float64Array): number {
  return f64[ENG_LAST_BEAT_MS >> 3] as number;
}

/** The engine's beat: ENG_LAST_BEAT_MS = `nowMs`, then ENG_HEARTBEAT + 1. */
export function beatEngine(region: RegionWords, nowMs: number): void {
  region.f64[ENG_LAST_BEAT_MS >> 3] = nowMs;
  Atomics.add(region.i32, ENG_HEARTBEAT >> 2, 1);
}

/** ENG_STATS_SEQ, the seqlock over ENGINE STATS: odd while the engine writes them. */
export function statsSeq(i32: Int32Array): number {
  return Atomics.load(i32, ENG_STATS_SEQ >> 2);
}

/** Engine stats slot `slot` (a STAT_* constant), as last published (no seqlock: one slot). */
export function engineStat(f64: Float64Array, slot: number): number {
  return f64[ENGINE_STATS_INDEX + slot] as number;
}

/** The engine, before it writes ENGINE STATS: the seqlock goes odd. */
export function beginStatsWrite(i32: Int32Array): void {
  Atomics.add(i32, ENG_STATS_SEQ >> 2, 1);
}

/** The engine, after it wrote ENGINE STATS: the seqlock goes even. */
export function endStatsWrite(i32: Int32Array): void {
  Atomics.add(i32, ENG_STATS_SEQ >> 2, 1);
}

// ---- Server block --------------------------------------------------------------------------------

/** SRV_PID of API server k (0 before its first start). */
export function serverPid(i32: Int32Array, params: LayoutParams, server: number): number {
  return Atomics.load(i32, (serverBlockOffset(params, server) + SRV_PID) >> 2);
}

/** API server k, at start: its pid into its server block. */
export function setServerPid(
  i32: Int32Array,
  params: LayoutParams,
  server: number,
  pid: number,
): void {
  Atomics.store(i32, (serverBlockOffset(params, server) + SRV_PID) >> 2, pid);
}

// ---- Ring header, for a process that holds neither end (ring.ts has the ends' own) ---------------

/**
 * Bytes published and not yet released in the ring at `ringOffset`: the free-running 32-bit
 * positions' difference, the occupancy even across a wrap.
 */
export function ringUsedBytes(i32: Int32Array, ringOffset: number): number {
  return (
    (Atomics.load(i32, (ringOffset + RING_HEAD) >> 2) -
      Atomics.load(i32, (ringOffset + RING_TAIL) >> 2)) |
    0
  );
}

/** RING_CONSUMER_PID of the ring at `ringOffset`: 0 never attached, -1 detached. */
export function ringConsumerPid(i32: Int32Array, ringOffset: number): number {
  return Atomics.load(i32, (ringOffset + RING_CONSUMER_PID) >> 2);
}
