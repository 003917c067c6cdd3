import { unpack } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { MsgpackWriter } from '../../src/protocol/msgpack-writer.js';

const roundTrip = (write: (w: MsgpackWriter) => void): unknown => {
  const w = new MsgpackWriter(1);
  write(w);
  return unpack(w.finish());
};

describe('MsgpackWriter', () => {
  it('writes ints in every width, and msgpackr reads them back', () => {
    const values = [
      0,
      1,
      127,
      128,
      255,
      256,
      65535,
      65536,
      2 ** 32 - 1,
      2 ** 32,
      2 ** 53 - 1,
      -1,
      -32,
      -33,
      -128,
      -129,
      -32768,
      -32769,
      -(2 ** 31),
      -(2 ** 31) - 1,
      -(2 ** 53) + 1,
    ];
    for (const v of values) {
      const back = roundTrip((w) => w.int(v));
      expect(typeof back === 'bigint' ? Number(back) : back, String(v)).toBe(v);
    }
  });

  it('picks the smallest encoding', () => {
    const size = (v: number): number => new MsgpackWriter().int(v).length;
    expect([0, 127, 128, 255, 256, 65536, 2 ** 32].map(size)).toEqual([1, 1, 2, 2, 3, 5, 9]);
    expect([-1, -32, -33, -129, -32769, -(2 ** 31) - 1].map(size)).toEqual([1, 1, 2, 3, 5, 9]);
    expect(() => new MsgpackWriter().int(1.5)).toThrow(RangeError);
  });

  it('writes strings of every header size, ASCII and not', () => {
    for (const s of [
      '',
      'a',
      'x'.repeat(31),
      'x'.repeat(32),
      'x'.repeat(255),
      'x'.repeat(256),
      'y'.repeat(70_000),
      'héllo 中文 😀',
      'ü'.repeat(200),
    ]) {
      expect(roundTrip((w) => w.str(s))).toBe(s);
    }
  });

  it('writes maps, arrays, nil, bools and floats', () => {
    const back = roundTrip((w) => {
      w.mapHeader(5);
      w.str('a').nil();
      w.str('b').bool(true);
      w.str('c').bool(false);
      w.str('d').float32(-0.5);
      w.str('e').arrayHeader(2).float64(0.1).float32(Math.fround(-0.1));
    });
    expect(back).toEqual({ a: null, b: true, c: false, d: -0.5, e: [0.1, Math.fround(-0.1)] });
  });

  it('writes 16- and 32-bit map and array headers', () => {
    const n = 70_000;
    const arr = roundTrip((w) => {
      w.arrayHeader(n);
      for (let i = 0; i < n; i++) w.int(i % 100);
    }) as number[];
    expect(arr.length).toBe(n);
    expect(arr[n - 1]).toBe((n - 1) % 100);
    const map = roundTrip((w) => {
      w.mapHeader(20);
      for (let i = 0; i < 20; i++) w.str(`k${i}`).int(i);
    }) as Record<string, number>;
    expect(Object.keys(map).length).toBe(20);
  });

  it('writes bins of views at any offset, including SharedArrayBuffer views', () => {
    const sab = new SharedArrayBuffer(400);
    const view = new Int32Array(sab, 4, 90);
    view.forEach((_, i) => {
      view[i] = i * 1000 - 7;
    });
    const back = roundTrip((w) => w.bin(view)) as Uint8Array;
    expect(Buffer.from(back).equals(Buffer.from(sab, 4, 360))).toBe(true);
    for (const n of [0, 255, 256, 65535, 65536]) {
      expect((roundTrip((w) => w.bin(new Uint8Array(n).fill(9))) as Uint8Array).length).toBe(n);
    }
  });

  it('writes packed arrays with extra entries', () => {
    const back = roundTrip((w) => {
      w.packedArray(Uint16Array.from([300, 2, 3, 4]), [2, 1, 2], 'uint16', 1)
        .str('start')
        .int(9);
    }) as { data: Uint8Array; shape: number[]; dtype: string; start: number };
    expect(back.shape).toEqual([2, 1, 2]);
    expect(back.dtype).toBe('uint16');
    expect(back.start).toBe(9);
    expect(Array.from(new Uint16Array(Uint8Array.from(back.data).buffer))).toEqual([300, 2, 3, 4]);
    expect(() => new MsgpackWriter().packedArray(new Int32Array(3), [4], 'int32')).toThrow();
  });

  it('writes JSON-like values recursively', () => {
    const v = { a: [1, -2, 2.5, 'x', null, true], b: { c: { d: 2 ** 40 } }, skip: undefined };
    // Beyond 32 bits an int is a msgpack uint64, which msgpackr reads as a bigint by default.
    expect(roundTrip((w) => w.value(v))).toEqual({
      a: [1, -2, 2.5, 'x', null, true],
      b: { c: { d: 2n ** 40n } },
    });
  });
});
