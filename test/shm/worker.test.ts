import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { SRV_METRICS, serverBlockOffset } from '../../src/shm/layout.js';
import { createRegion, requestRingProducer, unlinkRegion } from '../../src/shm/region.js';
import { fixturePath, uniqueRegionName } from './helpers.js';

const created: string[] = [];
let worker: Worker | undefined;

afterEach(async () => {
  await worker?.terminate();
  worker = undefined;
  for (const name of created.splice(0)) unlinkRegion(name);
});

describe('ring with a worker thread', () => {
  it('shares the region with a worker: Atomics, futex wake-ups and a ring all work', async () => {
    const name = uniqueRegionName('worker');
    created.push(name);
    const region = createRegion(name, { requestRingBytes: 1024, outputRingBytes: 4096 });
    const counterIndex = (serverBlockOffset(region.params, 0) + SRV_METRICS) >> 2;
    const markerIndex = counterIndex + 1;
    Atomics.store(region.i32, markerIndex, 0x5eed);
    const increments = 200_000;
    const records = 50_000;
    worker = new Worker(fixturePath('shm-worker.mjs'), {
      workerData: {
        sab: region.sab,
        regionName: name,
        counterIndex,
        markerIndex,
        increments,
        records,
      },
    });
    const result = new Promise<Record<string, unknown>>((resolve, reject) => {
      worker?.once('message', resolve);
      worker?.once('error', reject);
    });
    for (let i = 0; i < increments; i++) Atomics.add(region.i32, counterIndex, 1);
    // A 1 KiB ring holds 64 of these records: the producer blocks on the futex again and again,
    // woken by the worker's release(); the worker sleeps on the doorbell, woken by commit().
    const producer = requestRingProducer(region, 0);
    let expectedSum = 0;
    for (let seq = 0; seq < records; seq++) {
      const at = producer.reserve(1, 8, 10_000);
      producer.i32[at >> 2] = seq;
      expectedSum = (expectedSum + seq) | 0;
      if (seq % 16 === 15) producer.commit();
    }
    producer.commit();
    const report = await result;
    expect(report).toEqual({
      isShared: true,
      received: records,
      sum: expectedSum,
      inOrder: true,
      markerSeenThroughOwnMapping: 0x5eed,
    });
    expect(Atomics.load(region.i32, counterIndex)).toBe(2 * increments);
  });
});
