/**
 * Thread health: each thread of an API server writes its own entry of the server's table (GC totals,
 * longest pause, heap of its isolate), a restarted server's threads continue the GC totals, packers
 * take consecutive entries, and a worker thread's GC and heap reach the region both from a timer and
 * from a loop that never yields (the output worker's, through its request recorder's step hook).
 */
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { RequestTimeline } from '../../src/obs/request-timeline.js';
import { ThreadHealthEntry, threadLabel } from '../../src/obs/thread-health.js';
import { shareThreadHealth, unshareThreadHealth } from '../../src/obs/thread-health-share.js';
import { shareRequestMetrics, unshareRequestMetrics } from '../../src/obs/worker-metrics.js';
import {
  CACHE_LINE_BYTES,
  HEALTH_SLOT_COUNT,
  regionBytes,
  requestMetricsIndex,
  resolveLayoutParams,
  SERVER_BLOCK_BYTES,
  SRV_HEALTH,
  SRV_THREAD_HEALTH,
  TH_GC_COUNT,
  TH_GC_MAX,
  TH_GC_SECONDS,
  TH_HEAP_USED,
  TH_PUBLISHED_AT_MS,
  THREAD_CLAIM,
  THREAD_ENTRIES,
  THREAD_FIRST_PACKER,
  THREAD_OUTPUT,
  THREAD_SLOT_COUNT,
  THREAD_STRIDE,
  threadClaimIndex,
  threadHealthIndex,
} from '../../src/shm/layout.js';

const FIXTURE = fileURLToPath(new URL('fixtures/thread-health-worker.mjs', import.meta.url));

function fakeRegion() {
  const params = resolveLayoutParams({
    apiServerCount: 1,
    requestRingBytes: 1024,
    outputRingBytes: 4096,
  });
  const sab = new SharedArrayBuffer(regionBytes(params));
  const entries = threadHealthIndex(params, 0);
  const claim = threadClaimIndex(params, 0);
  return { params, sab, f64: new Float64Array(sab), i32: new Int32Array(sab), entries, claim };
}

/** [published at, heap, GC seconds, GC count, longest pause] as the fixture reports them. */
type Entry = [number, number, number, number, number];

function runWorker(
  region: ReturnType<typeof fakeRegion>,
  role: string,
  entry: number,
  rounds = 1,
): Promise<{ before?: Entry; after: Entry; rounds?: Entry[] }> {
  const worker = new Worker(FIXTURE, { workerData: { role, sab: region.sab, entry, rounds } });
  return new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
}

afterEach(() => {
  unshareThreadHealth();
  unshareRequestMetrics();
});

describe('thread-health layout', () => {
  it('puts one cache line per thread after the health slots, inside the server block', () => {
    expect(SRV_THREAD_HEALTH).toBeGreaterThanOrEqual(SRV_HEALTH + HEALTH_SLOT_COUNT * 8);
    expect((SRV_THREAD_HEALTH + THREAD_ENTRIES) % CACHE_LINE_BYTES).toBe(0);
    expect(THREAD_STRIDE * 8).toBe(CACHE_LINE_BYTES);
    expect(THREAD_CLAIM + 4).toBeLessThanOrEqual(THREAD_ENTRIES);
    const end = SRV_THREAD_HEALTH + THREAD_ENTRIES + THREAD_SLOT_COUNT * THREAD_STRIDE * 8;
    expect(end).toBeLessThanOrEqual(SERVER_BLOCK_BYTES);
    // Room for 64 packers (--packer-threads' maximum) after main, output and log.
    expect(THREAD_SLOT_COUNT - THREAD_FIRST_PACKER).toBeGreaterThanOrEqual(64);
  });

  it('labels entries main, output, log, packer-1, packer-2, ...', () => {
    expect([0, 1, 2, 3, 4, THREAD_SLOT_COUNT - 1].map(threadLabel)).toEqual([
      'main',
      'output',
      'log',
      'packer-1',
      'packer-2',
      `packer-${THREAD_SLOT_COUNT - THREAD_FIRST_PACKER}`,
    ]);
  });
});

describe('ThreadHealthEntry', () => {
  it('adds pauses to the totals, keeps the longest since begin(), and stamps each publish', () => {
    const slots = new Float64Array(THREAD_STRIDE);
    slots[TH_GC_SECONDS] = 2; // a predecessor's totals
    slots[TH_GC_COUNT] = 10;
    slots[TH_GC_MAX] = 9;
    const entry = new ThreadHealthEntry(slots, 0);
    entry.begin();
    entry.recordGc(0.25);
    entry.recordGc(0.125);
    entry.publish(5e6);
    expect(slots[TH_GC_SECONDS]).toBe(2.375);
    expect(slots[TH_GC_COUNT]).toBe(12);
    expect(slots[TH_GC_MAX]).toBe(0.25);
    expect(slots[TH_HEAP_USED]).toBe(5e6);
    expect(Math.abs(slots[TH_PUBLISHED_AT_MS]! - Date.now())).toBeLessThan(1_000);
  });
});

describe('threads of an API server', () => {
  it("clears a predecessor's gauges and claims at start, keeping its GC totals", () => {
    const region = fakeRegion();
    const packer = region.entries + THREAD_FIRST_PACKER * THREAD_STRIDE;
    region.f64[packer + TH_PUBLISHED_AT_MS] = 1;
    region.f64[packer + TH_HEAP_USED] = 1e6;
    region.f64[packer + TH_GC_MAX] = 0.5;
    region.f64[packer + TH_GC_SECONDS] = 3;
    region.i32[region.claim] = 5;
    shareThreadHealth({ sab: region.sab, entries: region.entries, claim: region.claim });
    expect(Array.from(region.f64.subarray(packer, packer + 5))).toEqual([0, 0, 3, 0, 0]);
    expect(region.i32[region.claim]).toBe(0);
  });

  it("a packer's GC and heap reach its entry from its timer; the next packer takes the next entry", async () => {
    const region = fakeRegion();
    shareThreadHealth({ sab: region.sab, entries: region.entries, claim: region.claim });
    const first = region.entries + THREAD_FIRST_PACKER * THREAD_STRIDE;
    const { after } = await runWorker(region, 'packer', first);
    const [publishedAt, heap, gcSeconds, gcCount, gcMax] = after;
    expect(publishedAt).toBeGreaterThan(0);
    expect(heap).toBeGreaterThan(1e6);
    expect(gcCount).toBeGreaterThan(0);
    expect(gcSeconds).toBeGreaterThan(0);
    expect(gcMax).toBeGreaterThan(0);
    expect(gcMax).toBeLessThanOrEqual(gcSeconds);
    const second = first + THREAD_STRIDE;
    const next = await runWorker(region, 'packer', second);
    expect(next.after[3]).toBeGreaterThan(0);
    expect(region.i32[region.claim]).toBe(2);
  });

  it('a worker keeps counting its GCs long after its first publishes', async () => {
    const region = fakeRegion();
    shareThreadHealth({ sab: region.sab, entries: region.entries, claim: region.claim });
    const entry = region.entries + THREAD_FIRST_PACKER * THREAD_STRIDE;
    const { rounds } = await runWorker(region, 'packer', entry, 3);
    const counts = rounds!.map((r) => r[3]);
    const seconds = rounds!.map((r) => r[2]);
    expect(counts[0]).toBeGreaterThan(0);
    expect(counts[1]).toBeGreaterThan(counts[0]!);
    expect(counts[2]).toBeGreaterThan(counts[1]!);
    expect(seconds[2]).toBeGreaterThan(seconds[0]!);
  });

  it("a thread whose event loop never turns: its GCs reach the entry as they end, its heap at its recorder's step", async () => {
    const region = fakeRegion();
    shareThreadHealth({ sab: region.sab, entries: region.entries, claim: region.claim });
    shareRequestMetrics({
      metricsSab: region.sab,
      metricsIndex: requestMetricsIndex(region.params, 0),
      timelineSab: new RequestTimeline(4).sab,
      maxModelLen: 1024,
    });
    const entry = region.entries + THREAD_OUTPUT * THREAD_STRIDE;
    const { before, after } = await runWorker(region, 'output', entry);
    // Published once at start; the GCs of the garbage since are there before any other publish.
    expect(before![0]).toBeGreaterThan(0);
    expect(before![3]).toBeGreaterThan(0);
    expect(before![2]).toBeGreaterThan(0);
    expect(after[0]).toBeGreaterThanOrEqual(before![0]);
    expect(after[1]).toBeGreaterThan(1e6);
  });
});
