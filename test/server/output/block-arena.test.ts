import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import {
  BlockArena,
  classBytes,
  classForBytes,
  createArenaBuffer,
  MIN_BLOCK_BYTES,
} from '../../../src/server/output/block-arena.js';

describe('size classes', () => {
  it('maps byte counts to the smallest power-of-two class from 1 KiB', () => {
    expect(classForBytes(0)).toBe(0);
    expect(classForBytes(1)).toBe(0);
    expect(classForBytes(1024)).toBe(0);
    expect(classForBytes(1025)).toBe(1);
    expect(classForBytes(2048)).toBe(1);
    expect(classForBytes(2049)).toBe(2);
    expect(classForBytes(64 * 1024 * 1024)).toBe(16);
    for (let c = 0; c < 20; c++) {
      expect(classForBytes(classBytes(c))).toBe(c);
      expect(classForBytes(classBytes(c) + 1)).toBe(c + 1);
    }
  });
});

describe('BlockArena', () => {
  it('bump-allocates aligned blocks and reuses freed ones of the same class first', () => {
    const arena = new BlockArena(createArenaBuffer(64 * 1024, 1024 * 1024), {
      growStepBytes: 64 * 1024,
    });
    const a = arena.alloc(100);
    const b = arena.alloc(3000);
    const c = arena.alloc(1024);
    expect([a, b, c]).toEqual([0, 1024, 1024 + 4096]);
    expect(arena.liveBlocks).toBe(3);
    arena.free(a, 0);
    arena.free(c, 0);
    expect(arena.freeBlocks(0)).toBe(2);
    // Last freed, first reused (a stack), before the bump pointer moves.
    expect(arena.alloc(10)).toBe(c);
    expect(arena.alloc(10)).toBe(a);
    expect(arena.usedBytes).toBe(1024 + 4096 + 1024);
    expect(arena.alloc(10)).toBe(1024 + 4096 + 1024);
    expect(arena.liveBlocks).toBe(4);
  });

  it('grows the buffer by whole steps, and views made before see the new length', () => {
    const sab = createArenaBuffer(8 * 1024, 1024 * 1024);
    const arena = new BlockArena(sab, { growStepBytes: 32 * 1024 });
    const early = new Uint8Array(sab);
    expect(sab.byteLength).toBe(8 * 1024);
    const big = arena.alloc(16 * 1024);
    expect(big).toBe(0);
    expect(sab.byteLength).toBe(8 * 1024 + 32 * 1024);
    expect(early.length).toBe(sab.byteLength);
    const huge = arena.alloc(100 * 1024);
    expect(sab.byteLength).toBe(16 * 1024 + 128 * 1024);
    arena.bytes[huge + 100 * 1024 - 1] = 7;
    expect(early[huge + 100 * 1024 - 1]).toBe(7);
  });

  it('regrows a block: copies the used bytes to a block at least twice as large, frees the old', () => {
    const arena = new BlockArena(createArenaBuffer(64 * 1024, 1024 * 1024));
    const a = arena.alloc(MIN_BLOCK_BYTES);
    for (let i = 0; i < 1000; i++) arena.bytes[a + i] = i & 0xff;
    expect(arena.regrowClass(0, 1025)).toBe(1);
    expect(arena.regrowClass(0, 10_000)).toBe(4);
    const b = arena.regrow(a, 0, 1000, 1025);
    expect(b).not.toBe(a);
    for (let i = 0; i < 1000; i++) expect(arena.bytes[b + i]).toBe(i & 0xff);
    expect(arena.freeBlocks(0)).toBe(1);
    expect(arena.liveBlocks).toBe(1);
    // The freed 1 KiB block serves the next 1 KiB request.
    expect(arena.alloc(1)).toBe(a);
  });

  it('refuses to grow past maxByteLength with RS_ERR_OUTPUT_ARENA_FULL, and stays usable', () => {
    const arena = new BlockArena(createArenaBuffer(16 * 1024, 64 * 1024), {
      growStepBytes: 16 * 1024,
    });
    arena.alloc(32 * 1024);
    expect(() => arena.alloc(64 * 1024)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_OUTPUT_ARENA_FULL' }),
    );
    expect(arena.liveBlocks).toBe(1);
    expect(arena.alloc(16 * 1024)).toBe(32 * 1024);
  });

  it('rejects a fixed-size SharedArrayBuffer', () => {
    expect(() => new BlockArena(new SharedArrayBuffer(1024))).toThrow(/growable/);
  });

  it('a worker thread holding the arena sees bytes written after a growth', async () => {
    const sab = createArenaBuffer(4 * 1024, 4 * 1024 * 1024);
    const arena = new BlockArena(sab, { growStepBytes: 1024 * 1024 });
    const worker = new Worker(
      `const { parentPort, workerData } = require('node:worker_threads');
       const view = new Uint8Array(workerData.sab);
       parentPort.on('message', (at) => parentPort.postMessage([view.length, view[at]]));`,
      { eval: true, workerData: { sab } },
    );
    try {
      const at = arena.alloc(512 * 1024);
      arena.bytes[at + 512 * 1024 - 1] = 42;
      const answer = await new Promise<number[]>((resolve) => {
        worker.once('message', resolve);
        worker.postMessage(at + 512 * 1024 - 1);
      });
      expect(answer).toEqual([sab.byteLength, 42]);
    } finally {
      await worker.terminate();
    }
  });
});
