// Every byte offset of the shared-memory region, in one place (as pino's lib/indexes.js does).
// Offsets are in bytes from the start of the region; a 32-bit word at byte offset `o` is
// `i32[o >> 2]`, a float64 slot is `f64[o >> 3]`. Every block starts on a 64-byte cache line, and
// each word has exactly one writer (named next to it); the few many-writer words change only by
// atomic read-modify-write, which says so too.
//
//   0      +--------------------------------------------------------------+
//          | HEADER         magic, layout version, sizes, creator pid      |  creator, once
//   64     +--------------------------------------------------------------+
//          | ENGINE BLOCK   pid, state, heartbeat, last beat, stats seq     |  engine
//   128    +--------------------------------------------------------------+
//          | ENGINE DOORBELL  futex word (rung by producers), sleeping flag |  see doorbell.ts
//   192    +--------------------------------------------------------------+
//          | ENGINE STATS   64 x f64                                      |  engine
//   704    +--------------------------------------------------------------+
//          | CONTROL        lock, command seq/code/args/text | ack, result,  |  lock holder | engine
//          |                reply text                                    |
//   6016   +--------------------------------------------------------------+
//          | ENGINE HEALTH  64 x f64: the engine process's own figures      |  engine
//   6528   +--------------------------------------------------------------+
//          | ENGINE NOTE    seq, length, UTF-8 JSON (engine-note.ts)       |  engine
//   72064  +--------------------------------------------------------------+
//          | DP RANKS       rank count | 256 ranks x 8 f64 (ENG_STATS_SEQ) |  engine
//   88512  +--------------------------------------------------------------+
//          | SERVER 0 BLOCK   pid | 8192 x f64 metrics                      |  API server 0
//          | SERVER 0 REQUEST RING  (ring header 192 B + requestRingBytes)  |  server 0 -> engine
//          | SERVER 0 OUTPUT RING   (ring header 192 B + outputRingBytes)   |  engine -> server 0
//          +--------------------------------------------------------------+
//          | SERVER 1 ... (same stride)                                    |
//          +--------------------------------------------------------------+
import { RS_ERR_SHM_BAD_LAYOUT } from '../errors.js';

export const CACHE_LINE_BYTES = 64;
/** 'RSHM' read as a little-endian u32. */
export const LAYOUT_MAGIC = 0x4d48_5352;
/** Bump on any change to an offset below. */
export const LAYOUT_VERSION = 5;

// ---- Header (creator writes once: HDR_CREATOR_PID first, HDR_MAGIC last with Atomics.store, so a
// reader that sees the magic sees a complete header, and a stale-region scan always finds the pid).
export const HDR_MAGIC = 0; // i32
export const HDR_LAYOUT_VERSION = 4; // i32
export const HDR_CREATOR_PID = 8; // i32
export const HDR_API_SERVER_COUNT = 12; // i32
export const HDR_REQUEST_RING_BYTES = 16; // i32
export const HDR_OUTPUT_RING_BYTES = 20; // i32
export const HDR_TOTAL_BYTES = 24; // f64
export const HDR_CREATED_AT_MS = 32; // f64, Date.now() at creation
// The supervisor's restart figures (the supervisor, which created the region, writes them whenever
// it schedules a restart; /metrics reads them): restarts per role since the cluster started, and
// the delay, in seconds, before the latest restart of that role (src/cluster/restart-backoff.ts).
export const SUP_ENGINE_RESTARTS = 40; // i32 counter
export const SUP_API_RESTARTS = 44; // i32 counter, every API server
export const SUP_ENGINE_BACKOFF_S = 48; // f64
export const SUP_API_BACKOFF_S = 56; // f64
export const HEADER_BYTES = 64;

// ---- Engine block (engine writes every word).
export const ENGINE_BLOCK = 64;
export const ENG_PID = ENGINE_BLOCK + 0; // i32, 0 while no engine has attached
export const ENG_STATE = ENGINE_BLOCK + 4; // i32, one of ENGINE_STATE_*
export const ENG_HEARTBEAT = ENGINE_BLOCK + 8; // i32 counter, Atomics.add once per beat
export const ENG_STATS_SEQ = ENGINE_BLOCK + 12; // i32 seqlock over ENGINE STATS: odd while writing
export const ENG_LAST_BEAT_MS = ENGINE_BLOCK + 16; // f64, Date.now() of the last beat

export const ENGINE_STATE_NONE = 0;
/** The engine core runs but its engine cannot take requests yet (a bridge waiting for vLLM). */
export const ENGINE_STATE_STARTING = 1;
export const ENGINE_STATE_RUNNING = 2;
export const ENGINE_STATE_PAUSED = 3;
export const ENGINE_STATE_STOPPING = 4;

// ---- Engine doorbell: the engine sleeps on it when every request ring is empty (doorbell.ts).
export const ENGINE_DOORBELL = 128;

// ---- Engine stats: 64 float64 slots, engine writes (under ENG_STATS_SEQ). Counters are totals since
// the engine started; gauges are the value after the last step. Unnamed slots are reserved.
export const ENGINE_STATS = 192;
/** f64 index of stats slot 0: slot STAT_* is f64[ENGINE_STATS_INDEX + STAT_*]. */
export const ENGINE_STATS_INDEX = ENGINE_STATS >> 3;
export const STATS_SLOT_COUNT = 64;
export const STAT_RUNNING = 0; // gauge: sequences running
export const STAT_WAITING = 1; // gauge: sequences waiting
export const STAT_KV_USAGE = 2; // gauge: fraction of KV blocks in use, [0, 1]
export const STAT_NUM_PREEMPTIONS = 3; // counter
export const STAT_PREFIX_QUERIES = 4; // counter: tokens queried against the prefix cache
export const STAT_PREFIX_HITS = 5; // counter: tokens found in the prefix cache
export const STAT_PROMPT_TOKENS = 6; // counter
export const STAT_GENERATION_TOKENS = 7; // counter
export const STAT_WEIGHT_VERSION = 8; // gauge
export const STAT_STEP_COUNT = 9; // counter
export const STAT_NUM_GPU_BLOCKS = 10; // gauge: KV blocks in the pool
export const STAT_BLOCK_SIZE = 11; // gauge: tokens per KV block
export const STAT_LAST_STEP_MS = 12; // gauge: modelled duration of the last step
export const STAT_PAUSED = 13; // gauge: 1 while paused
// Totals of the engine processes before this one (a restarted engine starts its counters at 0): the
// new engine adds its predecessor's final counters here before its first publish, under the
// seqlock, so `carry + counter` never goes backwards across an engine restart (src/obs/engine-carry.ts).
export const STAT_CARRY_PREEMPTIONS = 16;
export const STAT_CARRY_PREFIX_QUERIES = 17;
export const STAT_CARRY_PREFIX_HITS = 18;
// P/D and the CPU offload tier (src/sim/external-kv.ts): counters, and their carries.
export const STAT_EXTERNAL_HIT_TOKENS = 48; // counter: prompt tokens loaded (P/D import, CPU tier)
export const STAT_KV_LOAD_FAILURES = 49; // counter: P/D imports that failed (then recomputed)
export const STAT_OFFLOAD_STORED_BLOCKS = 50; // counter: blocks spilled to the CPU tier
export const STAT_OFFLOAD_LOADED_BLOCKS = 51; // counter: blocks reloaded from the CPU tier
export const STAT_VLLM_UNDECODABLE = 52; // counter: vLLM engine messages or outputs that did not decode
export const STAT_CARRY_EXTERNAL_HIT_TOKENS = 56;
export const STAT_CARRY_KV_LOAD_FAILURES = 57;
export const STAT_CARRY_OFFLOAD_STORED_BLOCKS = 58;
export const STAT_CARRY_OFFLOAD_LOADED_BLOCKS = 59;
export const STAT_CARRY_VLLM_UNDECODABLE = 60;
// What the engine behind the core can do (a bridge's engine announces it when it registers).
export const STAT_SAMPLING_MASKS = 40; // 1 when the engine returns sampling masks

// ---- Control block: one command at a time from any API server to the engine.
// Request lines: written by the holder of CTL_LOCK only. Ack line: written by the engine only.
export const CONTROL_BLOCK = ENGINE_STATS + STATS_SLOT_COUNT * 8; // 704
/** i32: 0 when free, else the holder's pid. Many writers, Atomics.compareExchange/store only. */
export const CTL_LOCK = CONTROL_BLOCK + 0;
export const CTL_CMD_SEQ = CONTROL_BLOCK + 4; // i32, holder increments after writing the command
export const CTL_CMD_CODE = CONTROL_BLOCK + 8; // i32, caller-defined command code
export const CTL_CMD_SERVER = CONTROL_BLOCK + 12; // i32, index of the issuing API server
export const CTL_CMD_ARGS = CONTROL_BLOCK + 16; // CTL_ARG_COUNT x f64
export const CTL_ARG_COUNT = 8;
export const CTL_CMD_TEXT_BYTES = CONTROL_BLOCK + 80; // i32, UTF-8 length of CTL_CMD_TEXT
export const CTL_CMD_TEXT = CONTROL_BLOCK + 128; // CTL_TEXT_CAPACITY bytes (e.g. a weight dir)
export const CTL_TEXT_CAPACITY = 4096;
export const CTL_ACK_SEQ = CTL_CMD_TEXT + CTL_TEXT_CAPACITY; // i32, engine: = CMD_SEQ once done
export const CTL_RESULT_CODE = CTL_ACK_SEQ + 4; // i32, engine: 0 = ok, else a command-defined error
export const CTL_RESULT_VALUE = CTL_ACK_SEQ + 8; // f64, engine
export const CTL_REPLY_TEXT_BYTES = CTL_ACK_SEQ + 16; // i32, engine: UTF-8 length of CTL_REPLY_TEXT
/** Engine: why a command failed (or what it answered beyond its number), for the caller's error. */
export const CTL_REPLY_TEXT = CTL_ACK_SEQ + CACHE_LINE_BYTES;
export const CTL_REPLY_CAPACITY = 1024;
export const CONTROL_BYTES = CTL_REPLY_TEXT + CTL_REPLY_CAPACITY - CONTROL_BLOCK; // 5312

// ---- Engine health: the engine process's own figures (gc, event-loop delay, memory), in the same
// HEALTH_* layout as an API server's SRV_HEALTH area below; the engine's main thread writes it.
export const ENGINE_HEALTH = CONTROL_BLOCK + CONTROL_BYTES; // 6016

// ---- Process health: HEALTH_SLOT_COUNT f64 slots, relative to ENGINE_HEALTH or a server's SRV_HEALTH.
// Written by the process's main thread (src/obs/process-health.ts); gauges are the value at the
// last publish (every 100 ms), GC histograms count since the region was created (a restarted
// process continues them), the GC max and event-loop figures cover the current process only.
export const HEALTH_SLOT_COUNT = 64;
export const HEALTH_PUBLISHED_AT_MS = 0; // Date.now() of the last publish; 0: never published
export const HEALTH_PID = 1;
export const HEALTH_HEAP_USED = 2; // bytes
export const HEALTH_RSS = 3; // bytes
export const HEALTH_LAG_P50 = 4; // seconds, event-loop delay since the process started
export const HEALTH_LAG_P99 = 5;
export const HEALTH_LAG_MAX = 6;
export const HEALTH_IN_FLIGHT = 7; // API servers only: requests whose client is waiting
export const HEALTH_PACKER_QUEUE = 8; // API servers only: encode tasks waiting for a packer
/** CPU seconds of the process, every thread (process.cpuUsage), since the region was created. */
export const HEALTH_CPU_USER = 9;
export const HEALTH_CPU_SYSTEM = 10;
/** API servers only: bytes of the response pool held by answers not yet sent (a gauge). */
export const HEALTH_POOL_IN_USE = 11;
/**
 * API servers only: answers encoded into the response pool, and answers given a buffer of their
 * own (larger than a quarter of the pool, or no free run), since the region was created.
 */
export const HEALTH_POOL_POOLED = 12;
export const HEALTH_POOL_ONE_OFF = 13;
/** API servers only: answers the main thread encoded itself (--inline-pack-values), since the region was created. */
export const HEALTH_INLINE_ANSWERS = 14;
/** Longest GC pause by kind (GC_KIND_* order), seconds, since the process started. */
export const HEALTH_GC_MAX = 16;
/** GC pause histograms by kind, GC_HIST_STRIDE slots each (buckets, +Inf, sum; see HIST_* below). */
export const HEALTH_GC_HIST = 32;
export const GC_HIST_STRIDE = 8;
export const GC_KIND_COUNT = 4; // minor, major, incremental, weakcb

// ---- Engine note: a short text the engine publishes when it changes (src/shm/engine-note.ts):
// why the engine cannot take requests, and which engine it is (a bridge's vLLM release). Written by
// the engine's main thread only, under a seqlock (odd while writing); read on cold paths.
export const ENGINE_NOTE = ENGINE_HEALTH + HEALTH_SLOT_COUNT * 8; // 6528
export const NOTE_SEQ = ENGINE_NOTE + 0; // i32 seqlock
export const NOTE_LENGTH = ENGINE_NOTE + 4; // i32, UTF-8 bytes of NOTE_TEXT
export const NOTE_TEXT = ENGINE_NOTE + CACHE_LINE_BYTES;
/**
 * Room for the reason, the info labels and the loaded LoRA adapters with their paths (a load that
 * would not fit is refused: control-runner.ts). Readers copy it only when NOTE_SEQ has moved.
 */
export const NOTE_TEXT_CAPACITY = 65_472;
export const ENGINE_NOTE_BYTES = CACHE_LINE_BYTES + NOTE_TEXT_CAPACITY; // 65536

// ---- Data-parallel ranks: the figures of each engine rank behind an engine core that fronts several
// (a vLLM bridge with --data-parallel-size N; EngineCore.rankStats). Written by the engine's core
// loop under ENG_STATS_SEQ together with ENGINE STATS, so a reader's seqlock copy of both is one
// publish's (dp-ranks.ts readEngineStats). An engine core with one engine publishes a count of 1 and its
// engine stats as rank 0; /metrics labels series per rank (engine="<r>") only when the count is > 1.
export const DP_RANK_BLOCK = ENGINE_NOTE + ENGINE_NOTE_BYTES; // 72064
/** i32: ranks published (0 before the first publish); rows [0, count) are valid. */
export const DP_RANK_COUNT = DP_RANK_BLOCK + 0;
/** MAX_DP_RANKS rows of RANK_STAT_SLOTS f64: slot RANK_* of rank r at DP_RANK_STATS + (r * RANK_STAT_SLOTS + RANK_*) * 8. */
export const DP_RANK_STATS = DP_RANK_BLOCK + CACHE_LINE_BYTES;
/** f64 index of rank 0's slot 0. */
export const DP_RANK_STATS_INDEX = DP_RANK_STATS >> 3;
export const MAX_DP_RANKS = 256;
/** f64 slots per rank: one cache line. */
export const RANK_STAT_SLOTS = 8;
export const RANK_UP = 0; // gauge: 1 while the rank is attached (registered, not dead)
export const RANK_RUNNING = 1; // gauge: sequences running on the rank
export const RANK_WAITING = 2; // gauge: sequences waiting on the rank
export const RANK_KV_USAGE = 3; // gauge: fraction of the rank's KV blocks in use, [0, 1]
export const RANK_PROMPT_TOKENS = 4; // counter: prompt tokens the rank processed
export const RANK_GENERATION_TOKENS = 5; // counter: tokens the rank generated
export const RANK_PREFIX_QUERIES = 6; // counter: tokens queried against the rank's prefix cache
export const RANK_PREFIX_HITS = 7; // counter: tokens found in the rank's prefix cache
export const DP_RANK_BLOCK_BYTES = CACHE_LINE_BYTES + MAX_DP_RANKS * RANK_STAT_SLOTS * 8; // 16448

/** Where the per-server area begins. */
export const SERVERS_START = DP_RANK_BLOCK + DP_RANK_BLOCK_BYTES; // 88512

// ---- Server block, relative to serverBlockOffset(k); API server k writes every word.
export const SRV_PID = 0; // i32
// Bytes 4..63 are reserved. Bytes 4..15 held a server heartbeat (an i32 counter and the f64 time of
// the last beat) that nothing read: an API server's liveness is its process (the supervisor's
// cluster 'exit', the rings' consumer and producer pids) and its main thread's HEALTH_PUBLISHED_AT_MS
// (every 100 ms; /metrics exports its age). Left unused so no offset moves. (Heap, RSS and requests
// in flight are in the server's health slots.)
export const SRV_METRICS = 64; // SRV_METRICS_SLOT_COUNT x f64, reserved for cluster-wide metrics
export const SRV_METRICS_SLOT_COUNT = 8192;
export const SERVER_BLOCK_BYTES = SRV_METRICS + SRV_METRICS_SLOT_COUNT * 8;
/**
 * Request metrics of API server k (REQ_METRICS_SLOT_COUNT f64, RM_* below), written by its output
 * worker thread only. A restarted API server continues the totals it finds here, so the sum over
 * servers never goes backwards (src/obs/request-recorder.ts).
 */
export const SRV_REQUEST_METRICS = SRV_METRICS;
/** API server k's process health (HEALTH_* above), written by its main thread only. */
export const SRV_HEALTH = SRV_METRICS + 4096 * 8;
/**
 * API server k's thread health (TH_* below): a cache line whose first i32 (THREAD_CLAIM) hands out
 * packer entries, then THREAD_SLOT_COUNT entries of THREAD_STRIDE f64, entry t written by thread t
 * only (src/obs/thread-health.ts). The main thread clears the entries' gauges and the claim word
 * before it starts any other thread; the GC totals continue a predecessor's.
 */
export const SRV_THREAD_HEALTH = SRV_HEALTH + HEALTH_SLOT_COUNT * 8;
/** i32: packer threads take entry THREAD_FIRST_PACKER + Atomics.add(claim, 1); many writers. */
export const THREAD_CLAIM = 0;
export const THREAD_ENTRIES = CACHE_LINE_BYTES;
/** Main thread, output worker, pino's log transport, packers (--packer-threads <= 64, replacements). */
export const THREAD_SLOT_COUNT = 128;
export const THREAD_MAIN = 0;
export const THREAD_OUTPUT = 1;
export const THREAD_LOG = 2;
export const THREAD_FIRST_PACKER = 3;
export const THREAD_STRIDE = 8; // one cache line per thread
export const TH_PUBLISHED_AT_MS = 0; // Date.now() of the thread's last publish; 0: no such thread
export const TH_HEAP_USED = 1; // bytes, v8.getHeapStatistics() of the thread's isolate
export const TH_GC_SECONDS = 2; // total GC pause time, every kind
export const TH_GC_COUNT = 3; // GC pauses
export const TH_GC_MAX = 4; // longest pause, seconds, since the thread started

// ---- Request metrics slots, relative to SRV_REQUEST_METRICS. Counters are totals; a histogram is
// HIST_STRIDE slots: count per bucket (not cumulative, bucket i holds bounds[i-1] < v <= bounds[i]),
// then the +Inf bucket at index `bounds.length`, then the sum at `bounds.length + 1`.
export const HIST_STRIDE = 32;
export const RM_PROMPT_TOKENS = 0;
export const RM_GENERATION_TOKENS = 1;
/** Finished requests by reason, vLLM's FINISH_REASON_STRINGS order: stop, length, abort, error, repetition. */
export const RM_SUCCESS = 8;
export const RM_FINISH_REASON_COUNT = 5;
export const RM_TTFT = 32;
export const RM_ITL = RM_TTFT + HIST_STRIDE;
export const RM_E2E = RM_ITL + HIST_STRIDE;
export const RM_QUEUE = RM_E2E + HIST_STRIDE;
export const RM_PREFILL = RM_QUEUE + HIST_STRIDE;
export const RM_DECODE = RM_PREFILL + HIST_STRIDE;
export const RM_INFERENCE = RM_DECODE + HIST_STRIDE;
export const RM_PROMPT_HIST = RM_INFERENCE + HIST_STRIDE;
export const RM_GENERATION_HIST = RM_PROMPT_HIST + HIST_STRIDE;
export const REQ_METRICS_SLOT_COUNT = RM_GENERATION_HIST + HIST_STRIDE; // 320

// ---- Ring header, relative to a ring's offset; the ring's data follows it (ring.ts).
export const RING_HEAD = 0; // i32 free-running byte position, producer (Atomics.store)
export const RING_PRODUCER_PID = 4; // i32, producer: 0 never attached, -1 detached
export const RING_PRODUCER_WAITING = 8; // i32, producer: 1 while blocked on a full ring
export const RING_TAIL = 64; // i32 free-running byte position, consumer (Atomics.store)
export const RING_CONSUMER_PID = 68; // i32, consumer: 0 never attached, -1 detached
export const RING_DOORBELL = 128; // the ring's own doorbell (used when none is shared)
export const RING_DATA = 192;
export const RING_HEADER_BYTES = RING_DATA;

// ---- Doorbell, relative to a doorbell's offset.
export const BELL_SEQ = 0; // i32 futex word; many writers, Atomics.add only
export const BELL_SLEEPING = 4; // i32, the one sleeper: 1 between prepareSleep and endSleep

export const MIN_RING_BYTES = 64;
export const MAX_RING_BYTES = 2 ** 30;
export const MAX_API_SERVERS = 64;

export interface LayoutParams {
  /** API servers in the cluster, each with a server block, a request ring and an output ring. */
  apiServerCount: number;
  /** Capacity of each request ring (server -> engine), a power of two. */
  requestRingBytes: number;
  /** Capacity of each output ring (engine -> server), a power of two. */
  outputRingBytes: number;
}

export const DEFAULT_LAYOUT_PARAMS: Readonly<LayoutParams> = Object.freeze({
  apiServerCount: 1,
  requestRingBytes: 4 * 1024 * 1024,
  outputRingBytes: 64 * 1024 * 1024,
});

export function isValidRingCapacity(bytes: number): boolean {
  return (
    Number.isInteger(bytes) &&
    bytes >= MIN_RING_BYTES &&
    bytes <= MAX_RING_BYTES &&
    (bytes & (bytes - 1)) === 0
  );
}

/** Fills defaults and validates; throws RS_ERR_SHM_BAD_LAYOUT naming the field. */
export function resolveLayoutParams(params: Partial<LayoutParams> = {}): LayoutParams {
  const resolved = { ...DEFAULT_LAYOUT_PARAMS, ...params };
  const { apiServerCount, requestRingBytes, outputRingBytes } = resolved;
  if (!Number.isInteger(apiServerCount) || apiServerCount < 1 || apiServerCount > MAX_API_SERVERS) {
    throw new RS_ERR_SHM_BAD_LAYOUT(`apiServerCount ${apiServerCount} not in [1, 64]`);
  }
  for (const [field, value] of [
    ['requestRingBytes', requestRingBytes],
    ['outputRingBytes', outputRingBytes],
  ] as const) {
    if (!isValidRingCapacity(value)) {
      throw new RS_ERR_SHM_BAD_LAYOUT(`${field} ${value} is not a power of two in [64, 2^30]`);
    }
  }
  return { apiServerCount, requestRingBytes, outputRingBytes };
}

/** Bytes of one API server's area: block, request ring, output ring. */
export function serverStride(params: LayoutParams): number {
  return (
    SERVER_BLOCK_BYTES +
    RING_HEADER_BYTES +
    params.requestRingBytes +
    RING_HEADER_BYTES +
    params.outputRingBytes
  );
}

/** Total size of the region. */
export function regionBytes(params: LayoutParams): number {
  return SERVERS_START + params.apiServerCount * serverStride(params);
}

function checkServerIndex(params: LayoutParams, server: number): void {
  if (!Number.isInteger(server) || server < 0 || server >= params.apiServerCount) {
    throw new RS_ERR_SHM_BAD_LAYOUT(
      `API server index ${server} not in [0, ${params.apiServerCount})`,
    );
  }
}

/** Byte offset of API server k's block (add SRV_* to reach a field). */
export function serverBlockOffset(params: LayoutParams, server: number): number {
  checkServerIndex(params, server);
  return SERVERS_START + server * serverStride(params);
}

/** Byte offset of API server k's first metrics slot (8192 x f64). */
export function serverMetricsOffset(params: LayoutParams, server: number): number {
  return serverBlockOffset(params, server) + SRV_METRICS;
}

/** f64 index (byte offset >> 3) of API server k's first request-metrics slot (RM_*). */
export function requestMetricsIndex(params: LayoutParams, server: number): number {
  return (serverBlockOffset(params, server) + SRV_REQUEST_METRICS) >> 3;
}

/** f64 index of API server k's thread-health entry 0 (entry t at + t * THREAD_STRIDE). */
export function threadHealthIndex(params: LayoutParams, server: number): number {
  return (serverBlockOffset(params, server) + SRV_THREAD_HEALTH + THREAD_ENTRIES) >> 3;
}

/** i32 index of API server k's THREAD_CLAIM word. */
export function threadClaimIndex(params: LayoutParams, server: number): number {
  return (serverBlockOffset(params, server) + SRV_THREAD_HEALTH + THREAD_CLAIM) >> 2;
}

/** f64 index of a process's first health slot (HEALTH_*): API server k, or the engine for -1. */
export function healthIndex(params: LayoutParams, server: number): number {
  return (server < 0 ? ENGINE_HEALTH : serverBlockOffset(params, server) + SRV_HEALTH) >> 3;
}

/** Byte offset of API server k's request ring (its header; data at + RING_DATA). */
export function requestRingOffset(params: LayoutParams, server: number): number {
  return serverBlockOffset(params, server) + SERVER_BLOCK_BYTES;
}

/** Byte offset of API server k's output ring (its header; data at + RING_DATA). */
export function outputRingOffset(params: LayoutParams, server: number): number {
  return requestRingOffset(params, server) + RING_HEADER_BYTES + params.requestRingBytes;
}

/** Byte offset of engine stats slot `slot` (a STAT_* constant). */
export function engineStatOffset(slot: number): number {
  return ENGINE_STATS + slot * 8;
}
