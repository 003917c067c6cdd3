/**
 * The whole-process series as the benchmark reads them from what /metrics renders: CPU time per
 * process, GC and heap per thread by its `thread` label, requests in flight. Rendered by the real
 * exposition from a region filled by hand, so a renamed family fails here rather than as nulls in
 * a benchmark's JSON.
 */
import { describe, expect, it } from 'vitest';
import { metricsSnapshot } from '../../bench/loadtest/prom-text.js';
import { buildConfig } from '../../src/config.js';
import { ClusterMetrics } from '../../src/obs/exposition.js';
import {
  ENGINE_STATS,
  HEALTH_CPU_SYSTEM,
  HEALTH_CPU_USER,
  HEALTH_IN_FLIGHT,
  HEALTH_PUBLISHED_AT_MS,
  healthIndex,
  regionBytes,
  resolveLayoutParams,
  STATS_SLOT_COUNT,
  TH_GC_MAX,
  TH_GC_SECONDS,
  TH_HEAP_USED,
  TH_PUBLISHED_AT_MS,
  THREAD_LOG,
  THREAD_MAIN,
  THREAD_STRIDE,
  threadHealthIndex,
} from '../../src/shm/layout.js';

describe('whole-process figures from /metrics', () => {
  it('reads CPU, in-flight requests and every thread of each API server, not the engine', () => {
    const params = resolveLayoutParams({
      apiServerCount: 2,
      requestRingBytes: 1024,
      outputRingBytes: 4096,
    });
    const sab = new SharedArrayBuffer(regionBytes(params));
    const region = {
      name: 'fake',
      sab,
      params,
      i32: new Int32Array(sab),
      f64: new Float64Array(sab),
    };
    const f64 = region.f64;
    for (const server of [0, 1, -1]) {
      const h = healthIndex(params, server);
      f64[h + HEALTH_PUBLISHED_AT_MS] = Date.now();
      f64[h + HEALTH_CPU_USER] = 10 + server;
      f64[h + HEALTH_CPU_SYSTEM] = 2;
      f64[h + HEALTH_IN_FLIGHT] = server === 1 ? 3 : 0;
    }
    const threads = threadHealthIndex(params, 0);
    for (const [t, heap, gc] of [
      [THREAD_MAIN, 10e6, 0.5],
      [THREAD_LOG, 2e6, 0.01],
    ] as const) {
      const entry = threads + t * THREAD_STRIDE;
      f64[entry + TH_PUBLISHED_AT_MS] = Date.now();
      f64[entry + TH_HEAP_USED] = heap;
      f64[entry + TH_GC_SECONDS] = gc;
      f64[entry + TH_GC_MAX] = gc / 10;
    }
    const config = buildConfig({ model: 'tiny', apiServerCount: 2 });
    const metrics = new ClusterMetrics({
      region,
      config,
      engineStats: () => f64.slice(ENGINE_STATS >> 3, (ENGINE_STATS >> 3) + STATS_SLOT_COUNT),
    });
    const [s0, s1] = metricsSnapshot(metrics.render(), 0).servers;
    expect(s0).toMatchObject({
      server: 0,
      cpuSeconds: 12,
      inFlight: 0,
      threadGcSeconds: { main: 0.5, log: 0.01 },
      threadGcPauseMaxSeconds: { main: 0.05, log: 0.001 },
      threadHeapUsedBytes: { main: 10e6, log: 2e6 },
    });
    expect(s1).toMatchObject({ server: 1, cpuSeconds: 13, inFlight: 3 });
    // Server 1 published no thread entry.
    expect([s1!.threadGcSeconds, s1!.threadHeapUsedBytes]).toEqual([{}, {}]);
  });
});
