import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ANSWER_TIMEOUT_MS,
  allocated,
  fromSystem,
  type MemoryCollect,
  mallocHeap,
  parseMallocInfo,
  shareMemoryCollect,
  unshareMemoryCollect,
} from '../../src/obs/memory-collect.js';
import { PackerPool } from '../../src/server/main/packer-pool.js';
import { makeHarness } from '../server/output/harness.js';
import { until } from '../until.js';

const FIXTURE = new URL('./fixtures/memory-collect-worker.mjs', import.meta.url);
const MB = 1024 * 1024;

describe('collecting in every thread of a process', () => {
  const workers: Worker[] = [];
  const pools: PackerPool[] = [];
  afterEach(async () => {
    unshareMemoryCollect();
    await Promise.all(workers.splice(0).map((w) => w.terminate()));
    await Promise.all(pools.splice(0).map((p) => p.close()));
  });

  async function start(mode: 'timer' | 'poll' | 'late', stop?: Int32Array): Promise<Worker> {
    const worker = new Worker(FIXTURE, { workerData: { mode, stop } });
    workers.push(worker);
    const [ready] = await once(worker, 'message');
    expect(ready).toBe('ready');
    return worker;
  }

  async function heapOf(worker: Worker): Promise<number> {
    worker.postMessage('heap');
    const [bytes] = await once(worker, 'message');
    return bytes as number;
  }

  it('every thread answers: one with a free event loop, one that polls, idle piscina packers', async () => {
    const collect: MemoryCollect = shareMemoryCollect();
    const timer = await start('timer');
    const stop = new Int32Array(new SharedArrayBuffer(4));
    const polling = await start('poll', stop);
    // Packers idle between tasks: piscina must not park them where their timers never run.
    const h = makeHarness();
    pools.push(
      new PackerPool({ metaSab: h.meta.sab, accSab: h.acc.sab, arenaSab: h.arena.sab, threads: 2 }),
    );
    await until(
      () => collect.threads,
      (n) => n === 4,
      { intervalMs: 5, what: 'the packers to answer' },
    );
    await new Promise((r) => setTimeout(r, 300));

    const before = await heapOf(timer);
    const report = await collect.collect();
    expect(report).toMatchObject({ threads: 4, threadsAnswered: 4 });
    // Answered at once, not at the end of the main thread's wait.
    expect(report.ms).toBeLessThan(ANSWER_TIMEOUT_MS);
    // The thread collected its own isolate: its ~40 MB of garbage is gone, pages and all.
    const after = await heapOf(timer);
    expect(before).toBeGreaterThan(30 * MB);
    expect(after).toBeLessThan(before / 2);

    Atomics.store(stop, 0, 1);
    const [polls] = await once(polling, 'message');
    expect(polls).toBeGreaterThan(0);
  });

  it('a second request is answered again, and a thread that ended is not waited for', async () => {
    const collect = shareMemoryCollect();
    const first = await start('timer');
    await start('timer');
    expect(collect.threads).toBe(2);
    expect(await collect.collect()).toMatchObject({ threads: 2, threadsAnswered: 2 });

    first.postMessage('exit');
    await once(first, 'exit');
    expect(collect.threads).toBe(1);
    const report = await collect.collect();
    expect(report).toMatchObject({ threads: 1, threadsAnswered: 1 });
    expect(report.ms).toBeLessThan(ANSWER_TIMEOUT_MS);
  });

  it("sums what the other threads' isolates hold: array buffers and V8's malloc", async () => {
    const collect = shareMemoryCollect();
    const holder = await start('timer');
    const before = await collect.collect();
    expect(before.threadsV8Malloced).toBeGreaterThan(0);
    holder.postMessage('hold');
    expect((await once(holder, 'message'))[0]).toBe('held');
    const holding = await collect.collect();
    // The worker's 8 MiB buffer, not the main thread's (which did not change).
    expect(holding.threadsArrayBuffers - before.threadsArrayBuffers).toBeGreaterThanOrEqual(8 * MB);
    expect(Math.abs(holding.mainArrayBuffers - before.mainArrayBuffers)).toBeLessThan(MB);
    holder.postMessage('exit');
    await once(holder, 'exit');
    // A thread that ended adds nothing.
    expect(await collect.collect()).toMatchObject({ threadsArrayBuffers: 0, threadsV8Malloced: 0 });
  });

  it('a thread that starts answering while a collection runs is not waited for, and answers the next', async () => {
    const collect = shareMemoryCollect();
    await start('late');
    expect(collect.threads).toBe(0);
    // The thread counts itself during the main thread's own collection, after the request.
    const report = await collect.collect();
    expect(report).toMatchObject({ threads: 0, threadsAnswered: 0 });
    expect(report.ms).toBeLessThan(ANSWER_TIMEOUT_MS);
    await until(
      () => collect.threads,
      (n) => n === 1,
      { timeoutMs: 5_000, intervalMs: 5, what: 'the late thread to count itself' },
    );
    const next = await collect.collect();
    expect(next).toMatchObject({ threads: 1, threadsAnswered: 1 });
    expect(next.ms).toBeLessThan(ANSWER_TIMEOUT_MS);
  });

  it('calls made while a collection runs join it', async () => {
    const collect = shareMemoryCollect();
    await start('timer');
    const [a, b] = await Promise.all([collect.collect(), collect.collect()]);
    expect(a).toBe(b);
    expect(a.threadsAnswered).toBe(1);
  });
});

describe("glibc's heap, from malloc_info", () => {
  // glibc's format (malloc/malloc.c, __malloc_info), trimmed of its size classes.
  const XML = `<malloc version="1">
<heap nr="0">
<sizes>
  <size from="17" to="32" total="64" count="2"/>
  <unsorted from="0" to="0" total="0" count="0"/>
</sizes>
<total type="fast" count="2" size="64"/>
<total type="rest" count="3" size="1000"/>
<system type="current" size="5000"/>
<system type="max" size="9000"/>
<aspace type="total" size="5000"/>
<aspace type="mprotect" size="5000"/>
</heap>
<heap nr="1">
<sizes>
</sizes>
<total type="fast" count="0" size="0"/>
<total type="rest" count="1" size="2000"/>
<system type="current" size="132000"/>
<system type="max" size="132000"/>
<aspace type="total" size="132000"/>
<aspace type="mprotect" size="132000"/>
<aspace type="subheaps" size="1"/>
</heap>
<total type="fast" count="2" size="64"/>
<total type="rest" count="4" size="3000"/>
<total type="mmap" count="2" size="8400000"/>
<system type="current" size="137000"/>
<system type="max" size="141000"/>
<aspace type="total" size="137000"/>
<aspace type="mprotect" size="137000"/>
</malloc>
`;

  it('reads each arena and the mmapped chunks', () => {
    const heap = parseMallocInfo(XML);
    expect(heap).toEqual({
      arenas: [
        { systemBytes: 5000, freeBytes: 1064 },
        { systemBytes: 132000, freeBytes: 2000 },
      ],
      mmapBytes: 8_400_000,
    });
    expect(allocated(heap)).toBe(8_400_000 + 3936 + 130000);
    expect(fromSystem(heap)).toBe(8_400_000 + 137000);
    expect(parseMallocInfo('')).toEqual({ arenas: [], mmapBytes: 0 });
  });

  it("reads this process's heap: a 64 MiB allocation shows in it", () => {
    const before = mallocHeap();
    expect(before.arenas.length).toBeGreaterThan(0);
    for (const a of before.arenas) expect(a.freeBytes).toBeLessThanOrEqual(a.systemBytes);
    // Buffer.allocUnsafeSlow mallocs outside V8's heap; 64 MiB is mmapped by glibc on its own.
    const big = Buffer.allocUnsafeSlow(64 * MB);
    const during = mallocHeap();
    expect(during.mmapBytes - before.mmapBytes).toBeGreaterThanOrEqual(64 * MB);
    expect(big.length).toBe(64 * MB);
  });
});
