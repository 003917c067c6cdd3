import { describe, expect, it } from 'vitest';
import { MAX_NUMBER_TEXT, writeFloat32Text, writeIntText } from '../../src/protocol/number-text.js';

const buf = new Uint8Array(64);
const intText = (n: number): string =>
  Buffer.from(buf.subarray(0, writeIntText(buf, 0, n))).toString('latin1');
const f32Text = (f: number): string =>
  Buffer.from(buf.subarray(0, writeFloat32Text(buf, 0, f))).toString('latin1');

/** The reference: fewest significant digits whose decimal reads back to the same float32. */
function shortestDigits(f: number): number {
  for (let p = 1; p <= 9; p++) if (Math.fround(Number(f.toPrecision(p))) === f) return p;
  return 9;
}

function significantDigits(text: string): number {
  const mantissa = text.replace(/^-/, '').replace(/e.*$/, '').replace('.', '').replace(/^0+/, '');
  return mantissa.replace(/0+$/, '').length || 1;
}

/** A deterministic stream of 32-bit patterns (xorshift), so failures reproduce. */
function* bitPatterns(count: number): Generator<number> {
  let x = 0x9e3779b9;
  for (let i = 0; i < count; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    yield x >>> 0;
  }
}

describe('writeIntText', () => {
  it('writes integers like String()', () => {
    const values = [
      0,
      1,
      -1,
      9,
      10,
      99,
      100,
      12345,
      -2147483648,
      2147483647,
      2 ** 31,
      4294967295,
      -(2 ** 40) + 3,
      Number.MAX_SAFE_INTEGER,
      Number.MIN_SAFE_INTEGER,
      1e15,
      999999999999999,
    ];
    for (const v of values) expect(intText(v)).toBe(String(v));
    for (let v = -1000; v <= 1000; v++) expect(intText(v)).toBe(String(v));
  });
});

describe('writeFloat32Text', () => {
  it('writes typical logprobs shortly', () => {
    const cases: Array<[number, string]> = [
      [-0.1, '-0.1'],
      [-0.5, '-0.5'],
      [-9999, '-9999'],
      [0, '0'],
      [-0, '-0'],
      [-1.25, '-1.25'],
      [-1e-7, '-1e-7'],
      [-0.000001, '-0.000001'],
      [-123.456, '-123.456'],
      [1, '1'],
      [100, '100'],
      [3.4028234663852886e38, '3.4028235e+38'],
      [1e21, '1e+21'],
      [1e20, '100000000000000000000'],
      [Number.NaN, 'null'],
      [Number.NEGATIVE_INFINITY, 'null'],
    ];
    for (const [value, text] of cases) expect(f32Text(Math.fround(value))).toBe(text);
  });

  it('round-trips 200k random float32 bit patterns with the fewest digits', () => {
    const bits = new Uint32Array(1);
    const f32 = new Float32Array(bits.buffer);
    let checked = 0;
    for (const pattern of bitPatterns(200_000)) {
      bits[0] = pattern;
      const f = f32[0] as number;
      if (!Number.isFinite(f)) continue;
      const text = f32Text(f);
      expect(text.length).toBeLessThanOrEqual(MAX_NUMBER_TEXT);
      const back = Math.fround(JSON.parse(text) as number);
      if (back !== f || significantDigits(text) !== shortestDigits(f)) {
        expect.fail(`${f} (0x${pattern.toString(16)}) was written ${text}`);
      }
      checked++;
    }
    expect(checked).toBeGreaterThan(198_000);
  });

  it('round-trips every float32 in the logprob range near 0 and near -9999 densely', () => {
    const f32 = new Float32Array(1);
    const bits = new Uint32Array(f32.buffer);
    for (const startValue of [-1e-6, -0.5, -1, -20, -9999]) {
      f32[0] = startValue;
      const start = bits[0] as number;
      for (let k = 0; k < 20_000; k++) {
        bits[0] = start + k;
        const f = f32[0] as number;
        const text = f32Text(f);
        if (
          Math.fround(JSON.parse(text) as number) !== f ||
          significantDigits(text) !== shortestDigits(f)
        ) {
          expect.fail(`${f} was written ${text}`);
        }
      }
    }
  });
});
