/**
 * Process health into region slots: GC pauses by kind into histograms and maxima, gauges at each
 * publish, process-scoped figures reset at start while GC histograms continue a predecessor's.
 */
import { constants } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import { gcKindIndex, ProcessHealth } from '../../src/obs/process-health.js';
import {
  GC_HIST_STRIDE,
  HEALTH_CPU_SYSTEM,
  HEALTH_CPU_USER,
  HEALTH_GC_HIST,
  HEALTH_GC_MAX,
  HEALTH_HEAP_USED,
  HEALTH_IN_FLIGHT,
  HEALTH_LAG_MAX,
  HEALTH_PACKER_QUEUE,
  HEALTH_PID,
  HEALTH_POOL_IN_USE,
  HEALTH_POOL_ONE_OFF,
  HEALTH_POOL_POOLED,
  HEALTH_PUBLISHED_AT_MS,
  HEALTH_RSS,
  HEALTH_SLOT_COUNT,
  TH_GC_COUNT,
  TH_GC_MAX,
  TH_GC_SECONDS,
  TH_HEAP_USED,
  TH_PUBLISHED_AT_MS,
  THREAD_STRIDE,
} from '../../src/shm/layout.js';

const BASE = 8;
const MAJOR = 1;

function gcBuckets(slots: Float64Array, kind: number): number[] {
  const at = BASE + HEALTH_GC_HIST + kind * GC_HIST_STRIDE;
  return Array.from(slots.subarray(at, at + 8));
}

describe('process health', () => {
  it("maps perf_hooks' gc kinds to the label order minor, major, incremental, weakcb", () => {
    expect(
      [
        constants.NODE_PERFORMANCE_GC_MINOR,
        constants.NODE_PERFORMANCE_GC_MAJOR,
        constants.NODE_PERFORMANCE_GC_INCREMENTAL,
        constants.NODE_PERFORMANCE_GC_WEAKCB,
        0,
      ].map(gcKindIndex),
    ).toEqual([0, 1, 2, 3, -1]);
  });

  it('records GC pauses into the kind histogram and keeps the longest', () => {
    const slots = new Float64Array(BASE + HEALTH_SLOT_COUNT);
    const health = new ProcessHealth(slots, BASE);
    health.recordGc(MAJOR, 150); // 0.15 s: le=1
    health.recordGc(MAJOR, 3); // 0.003 s: le=0.01
    health.recordGc(7, 10_000); // not a kind: ignored
    // 6 bounds, +Inf, sum
    expect(gcBuckets(slots, MAJOR)).toEqual([0, 1, 0, 1, 0, 0, 0, 0.153]);
    expect(slots[BASE + HEALTH_GC_MAX + MAJOR]).toBe(0.15);
    expect(gcBuckets(slots, 0).every((v) => v === 0)).toBe(true);
  });

  it('publishes gauges and the extras, resets maxima at start but continues GC counts', () => {
    const slots = new Float64Array(BASE + HEALTH_SLOT_COUNT);
    slots[BASE + HEALTH_GC_HIST + MAJOR * GC_HIST_STRIDE + 3] = 5; // a predecessor's pauses
    slots[BASE + HEALTH_GC_MAX + MAJOR] = 9; // and its longest
    slots[BASE + HEALTH_LAG_MAX] = 9;
    const health = new ProcessHealth(slots, BASE, { inFlight: () => 12, packerQueue: () => 3 });
    health.start(1_000);
    try {
      expect(slots[BASE + HEALTH_GC_MAX + MAJOR]).toBe(0);
      expect(slots[BASE + HEALTH_LAG_MAX]).toBe(0);
      expect(gcBuckets(slots, MAJOR)[3]).toBe(5);
      expect(slots[BASE + HEALTH_PID]).toBe(process.pid);
      expect(slots[BASE + HEALTH_IN_FLIGHT]).toBe(12);
      expect(slots[BASE + HEALTH_PACKER_QUEUE]).toBe(3);
      expect(slots[BASE + HEALTH_HEAP_USED]).toBeGreaterThan(1e6);
      expect(slots[BASE + HEALTH_RSS]).toBeGreaterThan(slots[BASE + HEALTH_HEAP_USED]!);
      expect(Math.abs(slots[BASE + HEALTH_PUBLISHED_AT_MS]! - Date.now())).toBeLessThan(1_000);
    } finally {
      health.stop();
    }
  });

  it('publishes CPU time continuing a predecessor, and the main thread entry from its GC observer', () => {
    const thread = BASE + HEALTH_SLOT_COUNT;
    const slots = new Float64Array(thread + THREAD_STRIDE);
    slots[BASE + HEALTH_CPU_USER] = 100; // a predecessor's CPU seconds
    slots[BASE + HEALTH_CPU_SYSTEM] = 50;
    slots[thread + TH_GC_SECONDS] = 1; // and the GC of its main thread
    const health = new ProcessHealth(slots, BASE, { threadBase: thread });
    health.start(1_000);
    try {
      health.recordGc(MAJOR, 150);
      health.publish();
      const cpu = process.cpuUsage();
      expect(slots[BASE + HEALTH_CPU_USER]).toBeGreaterThan(100);
      expect(slots[BASE + HEALTH_CPU_USER]).toBeLessThanOrEqual(100 + cpu.user / 1e6);
      expect(slots[BASE + HEALTH_CPU_SYSTEM]).toBeGreaterThanOrEqual(50);
      expect(slots[BASE + HEALTH_CPU_SYSTEM]).toBeLessThanOrEqual(50 + cpu.system / 1e6);
      expect(slots[thread + TH_GC_SECONDS]).toBeCloseTo(1.15, 9);
      expect(slots[thread + TH_GC_COUNT]).toBeGreaterThanOrEqual(1);
      expect(slots[thread + TH_GC_MAX]).toBeGreaterThanOrEqual(0.15);
      expect(slots[thread + TH_HEAP_USED]).toBe(slots[BASE + HEALTH_HEAP_USED]);
      expect(slots[thread + TH_PUBLISHED_AT_MS]).toBeGreaterThan(0);
    } finally {
      health.stop();
    }
  });

  it("publishes the response pool's figures, the answer counts continuing a predecessor's", () => {
    const slots = new Float64Array(BASE + HEALTH_SLOT_COUNT);
    slots[BASE + HEALTH_POOL_POOLED] = 100; // a predecessor's answers
    slots[BASE + HEALTH_POOL_ONE_OFF] = 4;
    slots[BASE + HEALTH_POOL_IN_USE] = 1 << 20; // and what it held when it died
    let figures: { inUseBytes: number; pooled: number; oversize: number; full: number } | null =
      null;
    const health = new ProcessHealth(slots, BASE, { responsePool: () => figures });
    health.start(1_000);
    try {
      // No pool (yet): the counts stay the predecessor's, nothing is held.
      expect(slots[BASE + HEALTH_POOL_POOLED]).toBe(100);
      expect(slots[BASE + HEALTH_POOL_IN_USE]).toBe(0);
      figures = { inUseBytes: 131_072, pooled: 5, oversize: 1, full: 2 };
      health.publish();
      expect(slots[BASE + HEALTH_POOL_IN_USE]).toBe(131_072);
      expect(slots[BASE + HEALTH_POOL_POOLED]).toBe(105);
      expect(slots[BASE + HEALTH_POOL_ONE_OFF]).toBe(7);
    } finally {
      health.stop();
    }
  });

  it('sees real GC pauses and a blocked event loop', async () => {
    const slots = new Float64Array(BASE + HEALTH_SLOT_COUNT);
    const blocked: number[] = [];
    const health = new ProcessHealth(slots, BASE, {
      blockedMs: 100,
      onLoopBlocked: (ms) => blocked.push(ms),
    });
    health.start(20);
    try {
      const garbage: unknown[] = [];
      for (let i = 0; i < 200_000; i++) garbage.push({ i, s: `x${i}` });
      garbage.length = 0;
      // The delay monitor measures from its first sample on: let it take a few first.
      await new Promise((r) => setTimeout(r, 50));
      const until = performance.now() + 300;
      while (performance.now() < until) {} // block the loop for 300 ms
      await new Promise((r) => setTimeout(r, 150));
      const minorCount = gcBuckets(slots, 0)
        .slice(0, 7)
        .reduce((a, b) => a + b, 0);
      expect(minorCount).toBeGreaterThan(0);
      expect(blocked.some((ms) => ms >= 250)).toBe(true);
      expect(slots[BASE + HEALTH_LAG_MAX]).toBeGreaterThan(0.25);
    } finally {
      health.stop();
    }
  });
});
