import { describe, expect, it } from 'vitest';
import { int32Array, int32Copy, MAX_CARVED_INTS, SLAB_INTS } from '../../src/wire/int32-slab.js';

describe('int32-slab', () => {
  it('hands out zero-filled arrays that never share an element, across slabs', () => {
    // Enough arrays of mixed lengths to fill several slabs; each is written with its own value.
    const arrays: Int32Array[] = [];
    for (let i = 0; i < 200; i++) {
      const a = int32Array(1 + ((i * 37) % 300));
      expect(a.every((x) => x === 0)).toBe(true);
      a.fill(i + 1);
      arrays.push(a);
    }
    arrays.forEach((a, i) => {
      expect(a.every((x) => x === i + 1)).toBe(true);
    });
    // More than one slab was used, and a carved array lies within one.
    const buffers = new Set(arrays.map((a) => a.buffer));
    expect(buffers.size).toBeGreaterThan(1);
    for (const a of arrays) {
      expect(a.buffer.byteLength).toBe(SLAB_INTS * 4);
      expect(a.byteOffset + a.byteLength).toBeLessThanOrEqual(SLAB_INTS * 4);
    }
  });

  it('gives an array longer than MAX_CARVED_INTS a buffer of its own', () => {
    const carved = int32Array(MAX_CARVED_INTS);
    expect(carved.buffer.byteLength).toBe(SLAB_INTS * 4);
    const own = int32Array(MAX_CARVED_INTS + 1);
    expect(own.buffer.byteLength).toBe((MAX_CARVED_INTS + 1) * 4);
    expect(own.byteOffset).toBe(0);
  });

  it('copies a range of a source, shared memory included, and not a view of it', () => {
    const src = new Int32Array(new SharedArrayBuffer(64));
    for (let i = 0; i < src.length; i++) src[i] = 100 + i;
    const copy = int32Copy(src, 3, 9);
    expect(Array.from(copy)).toEqual([103, 104, 105, 106, 107, 108]);
    src.fill(0);
    expect(Array.from(copy)).toEqual([103, 104, 105, 106, 107, 108]);
    expect(int32Copy(src, 5, 5).length).toBe(0);
  });
});
