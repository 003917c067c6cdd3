import { afterEach, describe, expect, it } from 'vitest';
import { createRegion, requestRingProducer, unlinkRegion } from '../../src/shm/region.js';
import type { RingProducer } from '../../src/shm/ring.js';
import { type Fixture, startFixture, stopFixture, uniqueRegionName } from './helpers.js';

// Must match test/fixtures/shm-consumer.mjs.
const RECORD_TYPE = 3;
const BATCH = 256;
const created: string[] = [];
let fixture: Fixture | undefined;

function mix(seq: number): number {
  return Math.imul(seq, 0x9e3779b1) ^ (seq >>> 13);
}

/** Writes records [from, to) as the consumer fixture expects them, one commit per BATCH. */
function produce(producer: RingProducer, from: number, to: number): void {
  const { i32, f64 } = producer;
  for (let seq = from; seq < to; seq++) {
    let at = producer.tryReserve(RECORD_TYPE, 16);
    if (at < 0) at = producer.reserve(RECORD_TYPE, 16, 20_000);
    i32[at >> 2] = seq;
    i32[(at >> 2) + 1] = mix(seq);
    f64[(at >> 3) + 1] = seq;
    if (seq % BATCH === BATCH - 1) producer.commit();
  }
  producer.commit();
}

afterEach(async () => {
  await stopFixture(fixture);
  fixture = undefined;
  for (const name of created.splice(0)) unlinkRegion(name);
});

describe('ring across processes', () => {
  it('streams 10 M sequence-numbered records to another process, in order, checksum intact', async () => {
    const name = uniqueRegionName('stream');
    created.push(name);
    const region = createRegion(name, { requestRingBytes: 64 * 1024, outputRingBytes: 4096 });
    const count = 10_000_000;
    fixture = startFixture('shm-consumer.mjs', [name, String(count)]);
    await fixture.waitFor('ready', 10_000);
    produce(requestRingProducer(region, 0), 0, count);
    const done = await fixture.waitFor('done', 30_000);
    let checksum = 0;
    for (let seq = 0; seq < count; seq++) checksum = (Math.imul(checksum, 31) + mix(seq)) | 0;
    expect(done).toEqual({ event: 'done', received: count, checksum });
  });

  it('ends a producer blocked on a killed consumer with RS_ERR_RING_PEER_GONE, not a hang', async () => {
    const name = uniqueRegionName('killed');
    created.push(name);
    const region = createRegion(name, { requestRingBytes: 4096, outputRingBytes: 4096 });
    fixture = startFixture('shm-consumer.mjs', [name, String(2 ** 40)]);
    await fixture.waitFor('ready', 10_000);
    const producer = requestRingProducer(region, 0);
    produce(producer, 0, 100_000); // the consumer is draining: the ring has wrapped many times
    expect(producer.peerAlive()).toBe(true);
    // Killed while this thread keeps the event loop busy: the child stays an unreaped zombie,
    // which the liveness check must still see as gone.
    fixture.child.kill('SIGKILL');
    let caught: unknown;
    const started = performance.now();
    try {
      produce(producer, 100_000, 100_000 + 1_000_000);
    } catch (err) {
      caught = err;
    }
    expect(caught).toMatchObject({ code: 'RS_ERR_RING_PEER_GONE' });
    expect(performance.now() - started).toBeLessThan(20_000); // well inside reserve's bound
    expect(producer.peerAlive()).toBe(false);
  });
});
