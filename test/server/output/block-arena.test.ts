import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import {
  BlockArena,
  classBytes,
  classForBytes,
  createArenaBuffer,
  MIN_BLOCK_BYTES,
  reserveArenaBuffer,
} from '../../../src/server/cross-thread/block-arena.js';

const KIB = 1024;
const MIB = 1024 * 1024;

/** Fills a block with a pattern of its own, so a test can tell it was left alone. */
function stamp(arena: BlockArena, offset: number, bytes: number, seed: number): void {
  for (let i = 0; i < bytes; i += 512) arena.bytes[offset + i] = (seed + i / 512) & 0xff;
}

function stamped(arena: BlockArena, offset: number, bytes: number, seed: number): boolean {
  for (let i = 0; i < bytes; i += 512) {
    if (arena.bytes[offset + i] !== ((seed + i / 512) & 0xff)) return false;
  }
  return true;
}

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

  it('rejects a fixed-size SharedArrayBuffer that the addon did not reserve', () => {
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

describe('BlockArena on reserved memory: trim() gives free memory back', () => {
  it('takes the whole reservation up front and fails with ARENA_FULL past it', () => {
    const arena = new BlockArena(reserveArenaBuffer(MIB));
    expect(arena.releasable).toBe(true);
    expect(arena.sab.byteLength).toBe(MIB);
    expect(arena.bytes.length).toBe(MIB);
    const a = arena.alloc(512 * KIB);
    arena.bytes[a + 512 * KIB - 1] = 1;
    expect(() => arena.alloc(MIB)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_OUTPUT_ARENA_FULL' }),
    );
    expect(arena.liveBlocks).toBe(1);
    expect(arena.liveBytes).toBe(512 * KIB);
  });

  it('after a burst, with nothing live, gives everything back and starts again at 0', () => {
    const arena = new BlockArena(reserveArenaBuffer(256 * MIB), { retainBytes: MIB });
    const blocks: Array<[number, number]> = [];
    for (let r = 0; r < 64; r++) {
      // A column that grows the way the worker grows one: 1 KiB, 2, 4, ... 512 KiB.
      let offset = arena.allocClass(0);
      for (let c = 1; c <= 9; c++)
        offset = arena.regrow(offset, c - 1, classBytes(c - 1), classBytes(c));
      stamp(arena, offset, classBytes(9), r);
      blocks.push([offset, 9]);
    }
    const peak = arena.usedBytes;
    expect(arena.residentBytes).toBe(peak);
    for (const [offset, cls] of blocks) arena.free(offset, cls);
    expect(arena.liveBytes).toBe(0);
    expect(arena.excessBytes).toBe(peak);
    const released = arena.trim();
    // Whole pages only: the last one is shared with nothing, but the peak need not end on a page.
    expect(released).toBe(Math.floor(peak / 4096) * 4096);
    expect(arena.releasedBytes).toBe(released);
    expect(arena.usedBytes).toBe(0);
    expect(arena.residentBytes).toBe(0);
    expect(arena.excessBytes).toBe(0);
    expect(arena.freeBlocks(9)).toBe(0);
    expect(arena.trim()).toBe(0);
    // A new block starts at 0 and reads as zeros: its pages were given back.
    const again = arena.alloc(512 * KIB);
    expect(again).toBe(0);
    expect(arena.bytes.subarray(0, 512 * KIB).every((b) => b === 0)).toBe(true);
  });

  it('brings top down to the highest live block and leaves live blocks untouched', () => {
    const arena = new BlockArena(reserveArenaBuffer(64 * MIB), { retainBytes: 0 });
    const low = arena.alloc(64 * KIB);
    const high = arena.alloc(64 * KIB);
    const free: number[] = [];
    for (let i = 0; i < 32; i++) free.push(arena.alloc(256 * KIB));
    stamp(arena, low, 64 * KIB, 1);
    stamp(arena, high, 64 * KIB, 2);
    for (const offset of free) arena.free(offset, classForBytes(256 * KIB));
    const released = arena.trim();
    expect(released).toBe(32 * 256 * KIB);
    expect(arena.usedBytes).toBe(high + 64 * KIB);
    expect(arena.residentBytes).toBe(128 * KIB);
    expect(stamped(arena, low, 64 * KIB, 1)).toBe(true);
    expect(stamped(arena, high, 64 * KIB, 2)).toBe(true);
    // The blocks above top are gone from the free stacks: the next one bumps from the new top.
    expect(arena.freeBlocks(classForBytes(256 * KIB))).toBe(0);
    expect(arena.alloc(256 * KIB)).toBe(high + 64 * KIB);
  });

  it('under a live block at the top, gives back free blocks below it down to what it retains', () => {
    const arena = new BlockArena(reserveArenaBuffer(64 * MIB), { retainBytes: MIB });
    const free: number[] = [];
    for (let i = 0; i < 16; i++) free.push(arena.alloc(512 * KIB));
    const top = arena.alloc(512 * KIB);
    stamp(arena, top, 512 * KIB, 3);
    for (const offset of free) arena.free(offset, classForBytes(512 * KIB));
    // 8 MiB free under 512 KiB live: keep max(1 MiB, live / 2) = 1 MiB, give back 7 MiB.
    expect(arena.excessBytes).toBe(7 * MIB);
    expect(arena.trim()).toBe(7 * MIB);
    expect(arena.excessBytes).toBe(0);
    expect(arena.residentBytes).toBe(arena.liveBytes + MIB);
    expect(arena.usedBytes).toBe(top + 512 * KIB);
    expect(stamped(arena, top, 512 * KIB, 3)).toBe(true);
    // Warm blocks come back first, then the given-back ones (which count as resident again).
    const cls = classForBytes(512 * KIB);
    expect(arena.freeBlocks(cls)).toBe(16);
    const warm = [arena.allocClass(cls), arena.allocClass(cls)];
    expect(arena.residentBytes).toBe(arena.liveBytes + 0);
    expect(warm.every((o) => free.includes(o))).toBe(true);
    arena.allocClass(cls);
    expect(arena.residentBytes).toBe(arena.liveBytes);
    expect(arena.releasedBytes).toBe(7 * MIB);
  });

  it('keeps half the live bytes free for reuse when that is more than the floor', () => {
    const arena = new BlockArena(reserveArenaBuffer(64 * MIB), { retainBytes: 0 });
    const live: number[] = [];
    const free: number[] = [];
    for (let i = 0; i < 8; i++) {
      free.push(arena.alloc(MIB));
      live.push(arena.alloc(MIB));
    }
    for (const offset of free) arena.free(offset, classForBytes(MIB));
    arena.trim();
    expect(arena.residentBytes).toBe(8 * MIB + 4 * MIB);
  });

  it('a growable arena never trims (its pages cannot be given back)', () => {
    const arena = new BlockArena(createArenaBuffer(64 * KIB, 16 * MIB), { retainBytes: 0 });
    expect(arena.releasable).toBe(false);
    const a = arena.alloc(MIB);
    arena.free(a, classForBytes(MIB));
    expect(arena.excessBytes).toBe(0);
    expect(arena.trim()).toBe(0);
    expect(arena.usedBytes).toBe(MIB);
  });
});
