import { Packr, Unpackr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { hex } from './hex.js';
import { Ext, f64, MsgFloat, pack, unpack } from './msgpack.js';
import { float, int, MirrorDecodeError } from './wire-types.js';

// msgpackr, a third-party implementation, checks the mirror's encoder and decoder both ways.
// Instances of its own: no process-wide extension is registered.
const reader = new Unpackr({ useRecords: false, mapsAsObjects: true, int64AsType: 'bigint' });
const writer = new Packr({ useRecords: false });

describe('mirror msgpack', () => {
  it('writes every int in its shortest form, positive ones unsigned (as msgspec)', () => {
    const cases: [number | bigint, string][] = [
      [0, '00'],
      [127, '7f'],
      [128, 'cc80'],
      [255, 'ccff'],
      [256, 'cd0100'],
      [65535, 'cdffff'],
      [65536, 'ce00010000'],
      [2 ** 32 - 1, 'ceffffffff'],
      [2 ** 32, 'cf0000000100000000'],
      [2n ** 63n, 'cf8000000000000000'],
      [2n ** 64n - 1n, 'cfffffffffffffffff'],
      [-1, 'ff'],
      [-32, 'e0'],
      [-33, 'd0df'],
      [-128, 'd080'],
      [-129, 'd1ff7f'],
      [-32769, 'd2ffff7fff'],
      [-(2 ** 31) - 1, 'd3ffffffff7fffffff'],
      [-(2n ** 63n), 'd38000000000000000'],
    ];
    for (const [v, bytes] of cases) {
      expect(pack(v).toString('hex'), String(v)).toBe(bytes);
      const back = unpack(hex(bytes));
      expect(BigInt(back as number), String(v)).toBe(BigInt(v));
      expect(BigInt(reader.unpack(hex(bytes)) as number)).toBe(BigInt(v));
    }
    expect(unpack(hex('cf8000000000000000'))).toBe(2n ** 63n);
    expect(() => pack(2n ** 64n)).toThrow(RangeError);
  });

  it('keeps floats floats: f64(1) is 0xcb, a decoded float is a MsgFloat, not an int', () => {
    expect(pack(f64(1)).toString('hex')).toBe('cb3ff0000000000000');
    expect(pack(1).toString('hex')).toBe('01');
    expect(pack(0.5).toString('hex')).toBe('cb3fe0000000000000');
    const one = unpack(hex('cb3ff0000000000000'));
    expect(one).toEqual(new MsgFloat(1, 64));
    expect(float(one, 'x')).toBe(1);
    expect(() => int(one, 'max_tokens')).toThrow(MirrorDecodeError);
    expect(unpack(hex('ca3f800000'))).toEqual(new MsgFloat(1, 32));
  });

  it('writes str, bin, array, map and ext lengths at every boundary', () => {
    for (const n of [0, 31, 32, 255, 256, 65536]) {
      const s = 'x'.repeat(n);
      expect(reader.unpack(pack(s))).toBe(s);
      expect(unpack(writer.pack(s))).toBe(s);
    }
    expect(pack('x'.repeat(32)).subarray(0, 2).toString('hex')).toBe('d920');
    for (const n of [0, 15, 16, 65536]) {
      const a = Array.from({ length: n }, (_, i) => i % 100);
      expect(reader.unpack(pack(a))).toEqual(a);
      expect(unpack(writer.pack(a))).toEqual(a);
    }
    expect(pack(new Array(16).fill(0)).subarray(0, 3).toString('hex')).toBe('dc0010');
    const m = Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`k${i}`, i]));
    expect(pack(m).subarray(0, 3).toString('hex')).toBe('de0010');
    expect(reader.unpack(pack(m))).toEqual(m);
    const bin = Buffer.from([1, 2, 3]);
    expect(pack(bin).toString('hex')).toBe('c403010203');
    expect(unpack(pack(bin))).toEqual(bin);
    const forms: [number, string][] = [
      [1, 'd403'],
      [2, 'd503'],
      [4, 'd603'],
      [8, 'd703'],
      [16, 'd803'],
      [3, 'c70303'],
      [255, 'c7ff03'],
      [256, 'c8010003'],
    ];
    for (const [n, head] of forms) {
      const e = new Ext(3, Buffer.alloc(n, 7));
      const bytes = pack(e);
      expect(bytes.subarray(0, head.length / 2).toString('hex'), `ext of ${n}`).toBe(head);
      expect(unpack(bytes)).toEqual(e);
    }
  });

  it('round-trips nested values with msgpackr both ways', () => {
    const v = { a: [1, -2, 'three', null, true, false, { b: 'c' }], big: 2n ** 63n + 5n, f: 0.25 };
    const back = reader.unpack(pack(v)) as Record<string, unknown>;
    expect(back).toEqual({ ...v, big: 2n ** 63n + 5n });
    const mine = unpack(writer.pack({ a: [1, 'x', null], f: 0.25 })) as Record<string, unknown>;
    expect(mine.a).toEqual([1, 'x', null]);
    expect(mine.f).toEqual(new MsgFloat(0.25, 64));
  });

  it('refuses truncated input, trailing bytes, invalid UTF-8 and reserved 0xc1', () => {
    expect(() => unpack(hex('92 01'))).toThrow(/truncated/);
    expect(() => unpack(hex('01 02'))).toThrow(/trailing/);
    expect(() => unpack(hex('a2 c3 28'))).toThrow();
    expect(() => unpack(hex('c1'))).toThrow(/starts no value/);
    expect(() => unpack(hex('81 c0 01'))).toThrow(/map key/);
  });

  it('reads int map keys as their decimal text (logit_bias is dict[int, float])', () => {
    expect(unpack(hex('81 0a cb3fe0000000000000'))).toEqual({ '10': new MsgFloat(0.5, 64) });
  });
});
