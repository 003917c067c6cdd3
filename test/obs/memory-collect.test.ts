import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ANSWER_TIMEOUT_MS,
  type MemoryCollect,
  shareMemoryCollect,
  unshareMemoryCollect,
} from '../../src/obs/memory-collect.js';
import { PackerPool } from '../../src/server/output/packer-pool.js';
import { makeHarness } from '../server/output/harness.js';
import { until } from '../shm/helpers.js';

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
    await until(() => collect.threads === 4, 10_000, 'the packers to answer');
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

  it('a thread that starts answering while a collection runs is not waited for, and answers the next', async () => {
    const collect = shareMemoryCollect();
    await start('late');
    expect(collect.threads).toBe(0);
    // The thread counts itself during the main thread's own collection, after the request.
    const report = await collect.collect();
    expect(report).toMatchObject({ threads: 0, threadsAnswered: 0 });
    expect(report.ms).toBeLessThan(ANSWER_TIMEOUT_MS);
    await until(() => collect.threads === 1, 5_000, 'the late thread to count itself');
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
