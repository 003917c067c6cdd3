import { describe, expect, it } from 'vitest';
import { bytesOfBuffer, copyIds } from '../../src/engine/copy-ids.js';

function ramp(n: number, Ids: Uint8ArrayConstructor | Uint16ArrayConstructor) {
  const a = new Ids(n);
  for (let i = 0; i < n; i++) a[i] = (i * 37 + 200) % (Ids === Uint8Array ? 256 : 65536);
  return a;
}

describe('copyIds', () => {
  it('copies runs at any offsets and lengths, touching nothing else', () => {
    for (const Ids of [Uint8Array, Uint16Array]) {
      const src = ramp(1024, Ids);
      for (const [from, at, n] of [
        [0, 0, 384],
        [384, 768, 384],
        [1, 4, 384],
        [4, 3, 100],
        [8, 8, 6],
      ] as const) {
        const dst = new Ids(1200).fill(7);
        copyIds(src, bytesOfBuffer(src), from, dst, bytesOfBuffer(dst), at, n);
        expect(Array.from(dst.subarray(at, at + n))).toEqual(
          Array.from(src.subarray(from, from + n)),
        );
        expect(dst.subarray(0, at).every((v) => v === 7)).toBe(true);
        expect(dst.subarray(at + n).every((v) => v === 7)).toBe(true);
      }
    }
  });

  it('copies from bytes into 16-bit ids, and into a buffer whose byte view it was not given', () => {
    const src = ramp(64, Uint8Array);
    const wide = new Uint16Array(64);
    copyIds(src, bytesOfBuffer(src), 0, wide, bytesOfBuffer(wide), 0, 64);
    expect(Array.from(wide)).toEqual(Array.from(src));
    const dst = new Uint8Array(64);
    copyIds(src, bytesOfBuffer(src), 0, dst, new Uint8Array(64), 0, 64);
    expect(dst).toEqual(src);
  });

  it('copies into shared memory (the rings are SharedArrayBuffers)', () => {
    const src = ramp(512, Uint16Array);
    const shared = new Uint16Array(new SharedArrayBuffer(2048));
    copyIds(src, bytesOfBuffer(src), 10, shared, bytesOfBuffer(shared), 100, 300);
    expect(Array.from(shared.subarray(100, 400))).toEqual(Array.from(src.subarray(10, 310)));
  });

  it('honours a view that starts inside its buffer', () => {
    const src = ramp(256, Uint8Array);
    const backing = new Uint8Array(300);
    const dst = backing.subarray(4, 260);
    copyIds(src, bytesOfBuffer(src), 0, dst, bytesOfBuffer(dst), 0, 256);
    expect(dst).toEqual(src);
    expect(backing.subarray(0, 4).every((v) => v === 0)).toBe(true);
  });
});
