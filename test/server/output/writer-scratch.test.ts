import { MessageChannel } from 'node:worker_threads';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { WriterScratch } from '../../../src/protocol/byte-writer.js';
import { JsonWriter } from '../../../src/protocol/json-writer.js';
import { MsgpackWriter } from '../../../src/protocol/msgpack-writer.js';
import {
  IdleRelease,
  reservedScratch,
  SCRATCH_BYTES,
} from '../../../src/server/cross-thread/writer-scratch.js';

/** A scratch on the heap that records what it was asked to give back. */
function fakeScratch(bytes: number): WriterScratch & { discards: number[] } {
  const discards: number[] = [];
  const buf = new Uint8Array(bytes);
  return {
    bytes: buf,
    discards,
    discard(upTo) {
      discards.push(upTo);
      buf.fill(0, 0, upTo);
      return upTo;
    },
  };
}

describe('a writer with a scratch', () => {
  it('writes into the scratch without growing, and release() gives back its high-water mark', () => {
    const scratch = fakeScratch(4096);
    const w = new JsonWriter(16, scratch);
    w.raw('x'.repeat(3000));
    expect(w.view().buffer).toBe(scratch.bytes.buffer);
    w.reset().raw('"short"');
    expect(w.finish().toString()).toBe('"short"');
    expect(w.release()).toBe(3000); // the longest response, not the last one
    expect(scratch.discards).toEqual([3000]);
    expect(w.release()).toBe(0); // nothing written since
    expect(scratch.discards).toEqual([3000]);
    w.raw('[1]');
    expect(w.finish().toString()).toBe('[1]'); // still usable after a release
  });

  it('takes a response longer than the scratch on the heap, and returns to the scratch after it', () => {
    const scratch = fakeScratch(1024);
    const w = new MsgpackWriter(16, scratch);
    w.bytes(new Uint8Array(5000).fill(7));
    expect(w.length).toBe(5000);
    expect(w.view().buffer).not.toBe(scratch.bytes.buffer);
    expect(w.finish().every((b) => b === 7)).toBe(true);
    w.reset().bytes(Uint8Array.of(1, 2, 3));
    expect(w.view().buffer).toBe(scratch.bytes.buffer);
    w.reset();
    expect(w.release()).toBe(1024); // the big one wrote all of the scratch before leaving it
  });

  it('without a scratch, release() drops a grown buffer and keeps a small one', () => {
    const w = new JsonWriter(64);
    expect(w.release()).toBe(0);
    w.raw('y'.repeat(1000));
    expect(w.release()).toBe(1000 - 64); // grown from 64 to the 1,000 bytes asked for
    w.raw('"after"');
    expect(w.finish().toString()).toBe('"after"');
  });
});

describe('reservedScratch', () => {
  it('gives back the pages written: they read as zeros afterwards', () => {
    const scratch = reservedScratch(1024 * 1024);
    if (scratch === null) throw new Error('the addon cannot reserve memory on this machine');
    const w = new JsonWriter(16, scratch);
    w.raw('z'.repeat(10_000));
    expect(scratch.bytes[9_999]).toBe(0x7a);
    expect(w.release()).toBe(3 * 4096); // 10,000 bytes: three whole pages
    expect(scratch.bytes[0]).toBe(0);
    expect(scratch.bytes[9_999]).toBe(0);
    expect(w.raw('"again"').finish().toString()).toBe('"again"');
  });

  it('cannot be transferred away from its writer', () => {
    const scratch = reservedScratch(SCRATCH_BYTES);
    if (scratch === null) throw new Error('the addon cannot reserve memory on this machine');
    const buffer = scratch.bytes.buffer as ArrayBuffer;
    const { port1, port2 } = new MessageChannel();
    try {
      // Node 20 leaves an untransferable buffer out of the transfer list (and copies it); later
      // Node majors refuse the message. Either way the writer keeps its buffer.
      port1.postMessage(buffer, [buffer]);
    } catch (err) {
      expect((err as Error).name).toBe('DataCloneError');
    } finally {
      port1.close();
      port2.close();
    }
    expect(buffer.byteLength).toBe(SCRATCH_BYTES);
    expect(scratch.bytes.length).toBe(SCRATCH_BYTES);
  });
});

describe('IdleRelease', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('releases once after the idle time, never while tasks run, and again only after new tasks', () => {
    vi.useFakeTimers();
    let releases = 0;
    const idle = new IdleRelease(() => releases++, 1_000);
    try {
      vi.advanceTimersByTime(5_000);
      expect(releases).toBe(0); // nothing ran: nothing to give back
      for (let t = 0; t < 20; t++) {
        idle.tick();
        vi.advanceTimersByTime(250);
      }
      expect(releases).toBe(0);
      vi.advanceTimersByTime(999);
      expect(releases).toBe(1);
      vi.advanceTimersByTime(10_000);
      expect(releases).toBe(1);
      idle.tick();
      vi.advanceTimersByTime(1_000);
      expect(releases).toBe(2);
    } finally {
      idle.stop();
    }
  });
});
