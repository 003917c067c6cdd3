import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { Doorbell } from '../../src/shm/doorbell.js';
import { RING_DOORBELL, RING_HEAD, RING_HEADER_BYTES, RING_TAIL } from '../../src/shm/layout.js';
import { RingConsumer, RingProducer, recordBytes } from '../../src/shm/ring.js';

const execFileAsync = promisify(execFile);

interface TestRing {
  sab: SharedArrayBuffer;
  producer: RingProducer;
  consumer: RingConsumer;
}

function makeRing(capacity: number): TestRing {
  const sab = new SharedArrayBuffer(RING_HEADER_BYTES + capacity);
  return {
    sab,
    producer: new RingProducer(sab, 0, capacity),
    consumer: new RingConsumer(sab, 0, capacity),
  };
}

/** Payload byte i of record `seq` — distinct across neighbouring records and positions. */
function patternByte(seq: number, i: number): number {
  return (seq * 31 + i * 7 + 1) & 0xff;
}

function writeRecord(ring: RingProducer, at: number, seq: number, length: number): void {
  for (let i = 0; i < length; i++) ring.bytes[at + i] = patternByte(seq, i);
}

function expectRecord(ring: RingConsumer, seq: number, length: number): void {
  expect(ring.type).toBe((seq % 1000) + 1);
  expect(ring.length).toBe(length);
  expect(ring.offset % 8).toBe(0);
  for (let i = 0; i < length; i++) {
    if (ring.bytes[ring.offset + i] !== patternByte(seq, i)) {
      throw new Error(`record ${seq} byte ${i} differs`);
    }
  }
}

/** Drains everything published, checking records in order; returns the next expected seq. */
function drain(ring: TestRing, firstSeq: number, lengthOf: (seq: number) => number): number {
  let seq = firstSeq;
  while (ring.consumer.next()) {
    expectRecord(ring.consumer, seq, lengthOf(seq));
    seq++;
  }
  ring.consumer.release();
  return seq;
}

/** Writes record `seq`, committing and draining as often as needed to make room. */
function pushWithDrain(
  ring: TestRing,
  seq: number,
  length: number,
  readSeq: number,
  lengthOf: (seq: number) => number,
): number {
  let next = readSeq;
  for (let attempt = 0; attempt < 3; attempt++) {
    const at = ring.producer.tryReserve((seq % 1000) + 1, length);
    if (at >= 0) {
      writeRecord(ring.producer, at, seq, length);
      return next;
    }
    ring.producer.commit();
    next = drain(ring, next, lengthOf);
  }
  throw new Error(`a ${length}-byte record found no room in a drained ring`);
}

describe('RingProducer / RingConsumer', () => {
  it('wraps a 128-byte ring thousands of times, records intact, in order, padded at the wrap', () => {
    const ring = makeRing(128);
    const lengthOf = (seq: number) => (seq * 13) % 57;
    let readSeq = 0;
    let writeSeq = 0;
    let expectedPosition = 0; // where the next record must start, modelled independently
    let paddings = 0;
    while (writeSeq < 5000) {
      const length = lengthOf(writeSeq);
      const at = ring.producer.tryReserve((writeSeq % 1000) + 1, length);
      if (at < 0) {
        ring.producer.commit();
        readSeq = drain(ring, readSeq, lengthOf);
        continue;
      }
      if (recordBytes(length) > 128 - expectedPosition) {
        paddings++;
        expectedPosition = 0;
      }
      expect(at).toBe(RING_HEADER_BYTES + expectedPosition + 8);
      expectedPosition = (expectedPosition + recordBytes(length)) % 128;
      writeRecord(ring.producer, at, writeSeq, length);
      writeSeq++;
    }
    ring.producer.commit();
    readSeq = drain(ring, readSeq, lengthOf);
    expect(readSeq).toBe(5000);
    expect(paddings).toBeGreaterThan(500);
    expect(ring.consumer.used()).toBe(0);
  });

  it('carries records of every size from 0 to capacity - 8, from every head position', () => {
    for (const capacity of [128, 1024]) {
      const ring = makeRing(capacity);
      const lengths: number[] = [];
      const lengthOf = (seq: number) => lengths[seq] ?? -1;
      let readSeq = 0;
      for (let shift = 0; shift < capacity; shift += 8) {
        // Move the head by `shift` bytes, then send every size (all of them from position 0).
        if (shift > 0) {
          lengths.push(shift - 8);
          readSeq = pushWithDrain(ring, lengths.length - 1, shift - 8, readSeq, lengthOf);
        }
        for (let length = 0; length <= capacity - 8; length += shift === 0 ? 1 : 11) {
          lengths.push(length);
          readSeq = pushWithDrain(ring, lengths.length - 1, length, readSeq, lengthOf);
        }
        ring.producer.commit();
        readSeq = drain(ring, readSeq, lengthOf);
      }
      expect(readSeq).toBe(lengths.length);
      expect(lengths).toContain(capacity - 8);
    }
  });

  it('publishes a batch with one commit and nothing before it', () => {
    const ring = makeRing(1024);
    for (let seq = 0; seq < 10; seq++) {
      writeRecord(ring.producer, ring.producer.tryReserve(seq + 1, 24), seq, 24);
    }
    expect(ring.consumer.next()).toBe(false);
    expect(ring.consumer.hasData()).toBe(false);
    ring.producer.commit();
    expect(drain(ring, 0, () => 24)).toBe(10);
  });

  it('reports a full ring: tryReserve -1, reserve throws RS_ERR_RING_FULL after its bound', () => {
    const ring = makeRing(128);
    let reserved = 0;
    while (ring.producer.tryReserve(1, 8) >= 0) reserved++;
    expect(reserved).toBe(128 / recordBytes(8));
    expect(ring.producer.free()).toBe(0);
    expect(() => ring.producer.reserve(1, 8, 30)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_RING_FULL' }),
    );
    // reserve() published the pending batch before waiting: the consumer can drain it.
    let seen = 0;
    while (ring.consumer.next()) seen++;
    expect(seen).toBe(reserved);
    ring.consumer.release();
    expect(ring.producer.reserve(1, 8, 30)).toBeGreaterThanOrEqual(0);
  });

  it('rejects a record larger than the ring at once, and bad types and capacities', () => {
    const ring = makeRing(128);
    expect(ring.producer.maxPayloadBytes).toBe(120);
    const tooLarge = expect.objectContaining({ code: 'RS_ERR_RING_RECORD_TOO_LARGE' });
    expect(() => ring.producer.tryReserve(1, 121)).toThrow(tooLarge);
    expect(() => ring.producer.reserve(1, 121, 60_000)).toThrow(tooLarge);
    const badType = expect.objectContaining({ code: 'RS_ERR_RING_BAD_TYPE' });
    expect(() => ring.producer.tryReserve(0, 8)).toThrow(badType);
    expect(() => ring.producer.tryReserve(1.5, 8)).toThrow(badType);
    expect(() => ring.producer.tryReserve(1, -1)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_BAD_ARGUMENT' }),
    );
    const sab = new SharedArrayBuffer(4096);
    expect(() => new RingProducer(sab, 0, 100)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_RING_BAD_CAPACITY' }),
    );
    expect(() => new RingProducer(sab, 0, 4096)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_BAD_LAYOUT' }),
    );
  });

  it('rings the doorbell only while the consumer sleeps', () => {
    const ring = makeRing(1024);
    const bell = ring.consumer.doorbell;
    ring.producer.tryReserve(1, 8);
    ring.producer.commit();
    expect(bell.rings()).toBe(0);
    while (ring.consumer.next());
    ring.consumer.release();
    const seq = bell.prepareSleep();
    expect(bell.isSleeping()).toBe(true);
    ring.producer.tryReserve(1, 8);
    ring.producer.commit();
    expect(bell.rings()).toBe(seq + 1);
    // That producer claimed the wake: a commit before the sleeper is up makes no second one.
    expect(bell.isSleeping()).toBe(false);
    ring.producer.tryReserve(1, 8);
    ring.producer.commit();
    expect(bell.rings()).toBe(seq + 1);
    bell.endSleep();
    expect(ring.consumer.waitForData(1000)).toBe(true);
  });

  it('waitForData returns false once its bound passes on an empty ring', () => {
    const ring = makeRing(128);
    expect(ring.consumer.waitForData(20)).toBe(false);
    expect(ring.consumer.doorbell.isSleeping()).toBe(false);
  });

  it('shares one doorbell between rings', () => {
    const sab = new SharedArrayBuffer(2 * (RING_HEADER_BYTES + 256));
    const bell = new Doorbell(sab, RING_DOORBELL);
    const second = RING_HEADER_BYTES + 256;
    const producer = new RingProducer(sab, second, 256, bell);
    const consumer = new RingConsumer(sab, second, 256, bell);
    bell.prepareSleep();
    producer.tryReserve(7, 0);
    producer.commit();
    bell.endSleep();
    expect(bell.rings()).toBe(1);
    expect(consumer.next() && consumer.type).toBe(7);
  });

  it('sees a detached consumer as gone: a blocked producer fails with RS_ERR_RING_PEER_GONE', () => {
    const ring = makeRing(128);
    expect(ring.producer.peerAlive()).toBe(true);
    expect(ring.consumer.peerAlive()).toBe(true);
    while (ring.producer.tryReserve(1, 8) >= 0);
    ring.consumer.detach();
    expect(ring.producer.peerAlive()).toBe(false);
    expect(() => ring.producer.reserve(1, 8, 60_000)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_RING_PEER_GONE' }),
    );
  });

  it('resumes where the previous producer published when a new one attaches', () => {
    const ring = makeRing(256);
    writeRecord(ring.producer, ring.producer.tryReserve(1, 16), 0, 16);
    ring.producer.commit();
    ring.producer.tryReserve(2, 16); // never committed: lost with its producer
    const successor = new RingProducer(ring.sab, 0, 256);
    writeRecord(successor, successor.tryReserve(2, 16), 1, 16);
    successor.commit();
    expect(drain(ring, 0, () => 16)).toBe(2);
  });

  it('keeps working when the free-running 32-bit positions overflow', () => {
    for (const start of [0x7fff_ffc0, -64]) {
      const sab = new SharedArrayBuffer(RING_HEADER_BYTES + 128);
      const words = new Int32Array(sab);
      words[RING_HEAD >> 2] = start;
      words[RING_TAIL >> 2] = start;
      const ring = {
        sab,
        producer: new RingProducer(sab, 0, 128),
        consumer: new RingConsumer(sab, 0, 128),
      };
      const lengthOf = (seq: number) => (seq * 5) % 41;
      let readSeq = 0;
      for (let seq = 0; seq < 300; seq++) {
        readSeq = pushWithDrain(ring, seq, lengthOf(seq), readSeq, lengthOf);
      }
      ring.producer.commit();
      expect(drain(ring, readSeq, lengthOf)).toBe(300);
      expect(Math.sign(Atomics.load(words, RING_TAIL >> 2))).not.toBe(Math.sign(start));
    }
  });

  it('lets a restarted consumer drop what its predecessor left unread', () => {
    const ring = makeRing(256);
    for (let seq = 0; seq < 3; seq++)
      writeRecord(ring.producer, ring.producer.tryReserve(seq + 1, 8), seq, 8);
    ring.producer.commit();
    const successor = new RingConsumer(ring.sab, 0, 256);
    expect(successor.skipToHead()).toBe(3 * recordBytes(8));
    expect(successor.next()).toBe(false);
    expect(ring.producer.free()).toBe(256);
    writeRecord(ring.producer, ring.producer.tryReserve(4, 8), 3, 8);
    ring.producer.commit();
    expect(successor.next()).toBe(true);
    expectRecord(successor, 3, 8);
  });

  it('detects a corrupt record header instead of reading past the data', () => {
    const ring = makeRing(128);
    const at = ring.producer.tryReserve(1, 8);
    ring.producer.commit();
    ring.producer.i32[(at - 8) >> 2] = 4096;
    expect(() => ring.consumer.next()).toThrow(
      expect.objectContaining({ code: 'RS_ERR_RING_CORRUPT' }),
    );
  });

  it('allocates nothing per record on the hot path (at most one GC over 20 M records)', async () => {
    // Counted in a plain Node process: a vitest worker allocates in the background.
    const probe = fileURLToPath(new URL('../fixtures/shm-alloc-probe.mjs', import.meta.url));
    const { stdout } = await execFileAsync(process.execPath, [probe, '20000000']);
    const result = JSON.parse(stdout.trim()) as { records: number; collections: number };
    expect(result.records).toBe(20_000_000);
    // At even 16 bytes per record that would be 320 MB of garbage, dozens of scavenges; one
    // scavenge is V8's own idle task, seen with 0 records as well.
    expect(result.collections).toBeLessThanOrEqual(1);
  });
});
