import { describe, expect, it } from 'vitest';
import { base64Length, encodeBase64Into } from '../../src/protocol/base64.js';

function encode(view: ArrayBufferView, offset = 0): string {
  const target = Buffer.alloc(offset + base64Length(view.byteLength) + 3, 0x21);
  const written = encodeBase64Into(view, target, offset);
  expect(written).toBe(base64Length(view.byteLength));
  // Nothing is written outside the reported range.
  expect(target.subarray(0, offset).every((b) => b === 0x21)).toBe(true);
  expect(target.subarray(offset + written).every((b) => b === 0x21)).toBe(true);
  return target.subarray(offset, offset + written).toString('latin1');
}

const reference = (view: ArrayBufferView): string =>
  Buffer.from(view.buffer, view.byteOffset, view.byteLength).toString('base64');

describe('base64', () => {
  it('computes padded lengths', () => {
    expect([0, 1, 2, 3, 4, 5, 6].map(base64Length)).toEqual([0, 4, 4, 4, 8, 8, 8]);
  });

  it('matches RFC 4648 test vectors', () => {
    const vectors: Array<[string, string]> = [
      ['', ''],
      ['f', 'Zg=='],
      ['fo', 'Zm8='],
      ['foo', 'Zm9v'],
      ['foob', 'Zm9vYg=='],
      ['fooba', 'Zm9vYmE='],
      ['foobar', 'Zm9vYmFy'],
    ];
    for (const [text, b64] of vectors) expect(encode(Buffer.from(text, 'latin1'))).toBe(b64);
  });

  it('matches Buffer for every length 0..300 and every byte value, at any target offset', () => {
    const bytes = new Uint8Array(300);
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 167 + 13) & 0xff;
    for (let n = 0; n <= 300; n++) {
      const view = bytes.subarray(0, n);
      expect(encode(view, n % 7)).toBe(reference(view));
    }
    const all = Uint8Array.from({ length: 256 }, (_, i) => i);
    expect(encode(all)).toBe(reference(all));
  });

  it('encodes the raw bytes of typed views at odd offsets, and of SharedArrayBuffer views', () => {
    const f32 = new Float32Array([-0.5, -1.25, -9999, 0, 1e-30]);
    expect(encode(f32)).toBe(reference(f32));
    const buf = new ArrayBuffer(64);
    const i32 = new Int32Array(buf, 12, 5);
    i32.set([11, 42, -3, 2 ** 31 - 1, -(2 ** 31)]);
    expect(encode(i32)).toBe(reference(i32));
    const u16 = new Uint16Array(buf, 2, 7);
    expect(encode(u16)).toBe(reference(u16));
    const sab = new SharedArrayBuffer(40);
    const shared = new Int32Array(sab, 4, 7);
    shared.set([1, 2, 3, 4, 5, 6, 7]);
    expect(encode(shared)).toBe(reference(shared));
    expect(encode(new Uint8Array(sab, 5, 11))).toBe(reference(new Uint8Array(sab, 5, 11)));
  });

  it('refuses to write past the target', () => {
    const target = new Uint8Array(7);
    expect(() => encodeBase64Into(new Uint8Array(6), target, 0)).toThrow(RangeError);
    expect(() => encodeBase64Into(new Uint8Array(3), target, 4)).toThrow(RangeError);
  });
});
