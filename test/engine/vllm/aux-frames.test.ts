/**
 * The headless engine's out-of-band arrays (src/engine/vllm/ndarray.ts AuxFrames): one arena per
 * encoder, reused message to message, growing past its first 64 KiB and 256 frames; what each frame
 * holds is what was added, whatever came before it in the arena.
 */
import { describe, expect, it } from 'vitest';
import { AuxFrames } from '../../../src/engine/vllm/ndarray.js';

function frame(n: number, seed: number): Uint8Array {
  return Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff);
}

describe('AuxFrames', () => {
  it('numbers frames from 1, holds each as added, and grows past its first arena and index', () => {
    const aux = new AuxFrames();
    // 300 routing rows of 384 bytes (115 KB), then one of 200 KB: both the index and the arena grow.
    const added = Array.from({ length: 300 }, (_, i) => frame(384, i));
    added.push(frame(200_000, 7));
    for (let i = 0; i < added.length; i++) {
      // From an offset inside a larger source, as the writers pass their scratch.
      const src = new Uint8Array(added[i]!.length + 10);
      src.set(added[i]!, 5);
      expect(aux.add(src, 5, added[i]!.length)).toBe(i + 1);
    }
    expect(aux.count).toBe(added.length);
    const copies = aux.copies();
    for (let i = 0; i < added.length; i++) {
      expect(aux.lengthOf(i)).toBe(added[i]!.length);
      expect(Buffer.from(added[i]!).equals(copies[i]!)).toBe(true);
      const out = new Uint8Array(added[i]!.length + 3);
      aux.copyTo(i, out, 3);
      expect(Buffer.from(out.subarray(3)).equals(Buffer.from(added[i]!))).toBe(true);
    }
  });

  it('starts over at reset: the next message reuses the arena, and copies made before stay as they were', () => {
    const aux = new AuxFrames();
    aux.add(frame(400, 1), 0, 400);
    aux.add(frame(0, 2), 0, 0);
    const before = aux.copies();
    aux.reset();
    expect(aux.count).toBe(0);
    expect(aux.add(frame(300, 3), 0, 300)).toBe(1);
    expect(aux.lengthOf(0)).toBe(300);
    expect(Buffer.from(frame(300, 3)).equals(aux.copies()[0]!)).toBe(true);
    expect(before.map((b) => b.length)).toEqual([400, 0]);
    expect(before[0]!.equals(Buffer.from(frame(400, 1)))).toBe(true);
  });
});
