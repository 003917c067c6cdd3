/**
 * SchedulerStats (EngineCoreOutputs.scheduler_stats), a dataclass and so a map (VH §4). The keys
 * vllm-rs and SMG require (VH §4.2) are typed here; any other key passes through untouched.
 */
import { f64 } from './msgpack.js';
import { arrayOf, bool, float, int, MirrorDecodeError, map, plain } from './wire-types.js';

export interface PrefixCacheStats {
  reset: boolean;
  requests: number;
  queries: number;
  hits: number;
  preempted_requests: number;
  preempted_queries: number;
  preempted_hits: number;
}

export interface EvictionEvent {
  lifetime_seconds: number;
  idle_seconds: number;
  reuse_gaps_seconds: number[];
}

export interface SchedulerStats {
  num_running_reqs: number;
  num_waiting_reqs: number;
  step_counter: number;
  current_wave: number;
  kv_cache_usage: number;
  prefix_cache_stats: PrefixCacheStats;
  kv_cache_eviction_events: EvictionEvent[];
  [key: string]: unknown;
}

const PREFIX_INTS = [
  'requests',
  'queries',
  'hits',
  'preempted_requests',
  'preempted_queries',
  'preempted_hits',
] as const;

const REQUIRED = [
  'num_running_reqs',
  'num_waiting_reqs',
  'step_counter',
  'current_wave',
  'kv_cache_usage',
  'prefix_cache_stats',
  'kv_cache_eviction_events',
] as const;

/** Floats stay floats (kv_cache_usage 0.0 is not the int 0). */
export function encodeSchedulerStats(s: SchedulerStats): Record<string, unknown> {
  return {
    ...s,
    kv_cache_usage: f64(s.kv_cache_usage),
    kv_cache_eviction_events: s.kv_cache_eviction_events.map((e) => ({
      lifetime_seconds: f64(e.lifetime_seconds),
      idle_seconds: f64(e.idle_seconds),
      reuse_gaps_seconds: e.reuse_gaps_seconds.map(f64),
    })),
  };
}

function decodePrefix(v: unknown, where: string): PrefixCacheStats {
  const m = map(v, where);
  const out = { reset: bool(m.reset, `${where}.reset`) } as PrefixCacheStats;
  for (const k of PREFIX_INTS) out[k] = int(m[k], `${where}.${k}`);
  return out;
}

function decodeEviction(v: unknown, where: string): EvictionEvent {
  const m = map(v, where);
  return {
    lifetime_seconds: float(m.lifetime_seconds, `${where}.lifetime_seconds`),
    idle_seconds: float(m.idle_seconds, `${where}.idle_seconds`),
    reuse_gaps_seconds: arrayOf(float)(m.reuse_gaps_seconds, `${where}.reuse_gaps_seconds`),
  };
}

export function decodeSchedulerStats(v: unknown, where: string): SchedulerStats {
  const m = map(v, where);
  const missing = REQUIRED.filter((k) => !(k in m));
  if (missing.length > 0) throw new MirrorDecodeError(where, `missing ${missing.join(', ')}`);
  return {
    ...(plain(m) as Record<string, unknown>),
    num_running_reqs: int(m.num_running_reqs, `${where}.num_running_reqs`),
    num_waiting_reqs: int(m.num_waiting_reqs, `${where}.num_waiting_reqs`),
    step_counter: int(m.step_counter, `${where}.step_counter`),
    current_wave: int(m.current_wave, `${where}.current_wave`),
    kv_cache_usage: float(m.kv_cache_usage, `${where}.kv_cache_usage`),
    prefix_cache_stats: decodePrefix(m.prefix_cache_stats, `${where}.prefix_cache_stats`),
    kv_cache_eviction_events: arrayOf(decodeEviction)(
      m.kv_cache_eviction_events,
      `${where}.kv_cache_eviction_events`,
    ),
  };
}
