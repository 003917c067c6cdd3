/**
 * Decimal text of integers and float32 values written as ASCII bytes straight into a buffer, so the
 * JSON encoders never make a string per number. Each function returns the offset after the text;
 * callers reserve MAX_NUMBER_TEXT bytes first.
 */

/** Longest text either function writes (a sign, 21 integer digits, or 9 digits with a point and exponent). */
export const MAX_NUMBER_TEXT = 32;

const ZERO = 0x30;
const MINUS = 0x2d;
const DOT = 0x2e;

// Powers of ten that are exact doubles (10^22 is the last), used to scale float32 values without
// rounding error in the scale itself.
const POW10: Float64Array = new Float64Array(23);
for (let i = 0, p = 1; i < 23; i++, p *= 10) POW10[i] = p;

/** Decimal digits of a non-negative integer < 2^53 (at most 16). */
function digitCount(n: number): number {
  let count = 1;
  while (count < 16 && n >= (POW10[count] as number)) count++;
  return count;
}

/** Write a safe integer (JS number) in decimal; returns the new offset. */
export function writeIntText(buf: Uint8Array, offset: number, value: number): number {
  let o = offset;
  let n = value;
  if (n < 0) {
    buf[o++] = MINUS;
    n = -n;
  }
  const len = digitCount(n);
  let pos = o + len - 1;
  if (n <= 0x7fffffff) {
    do {
      const q = (n / 10) | 0;
      buf[pos--] = ZERO + (n - q * 10);
      n = q;
    } while (n !== 0);
  } else {
    do {
      const q = Math.floor(n / 10);
      buf[pos--] = ZERO + (n - q * 10);
      n = q;
    } while (n !== 0);
  }
  return o + len;
}

function writeAscii(buf: Uint8Array, offset: number, text: string): number {
  for (let i = 0; i < text.length; i++) buf[offset + i] = text.charCodeAt(i);
  return offset + text.length;
}

/**
 * Write a float32 value (a number equal to Math.fround of itself) as the shortest decimal that
 * reads back to the same float32, in JavaScript's notation (`-0.25`, `1e-7`, `3.4028235e+38`).
 * A float32 logprob like -0.1f is a double -0.10000000149011612; `String()` would print all of
 * those digits, while "-0.1" is 40% of the bytes and decodes to the same float32.
 * NaN and ±Infinity have no JSON form and are written as `null`, as JSON.stringify does.
 */
export function writeFloat32Text(buf: Uint8Array, offset: number, value: number): number {
  if (!Number.isFinite(value)) return writeAscii(buf, offset, 'null');
  let o = offset;
  if (value < 0 || Object.is(value, -0)) {
    buf[o++] = MINUS;
    value = -value;
  }
  if (value === 0) {
    buf[o] = ZERO;
    return o + 1;
  }
  let e = Math.floor(Math.log10(value));
  // The scaled candidates below are exact only while every power of ten used is <= 10^22.
  if (e < -13 || e > 21) return writeAscii(buf, o, shortestFloat32Text(value));
  // log10 can be one off near powers of ten; settle e so that 10^e <= value < 10^(e+1).
  if (scaleTo(value, -e) < 1) e--;
  else if (scaleTo(value, -e) >= 10) e++;
  const target = Math.fround(value);
  for (let p = 1; p <= 9; p++) {
    const k = e - p + 1;
    let digits = Math.round(scaleTo(value, -k));
    let exp = k;
    if (digits >= (POW10[p] as number)) {
      digits /= 10;
      exp++;
    }
    if (Math.fround(scaleTo(digits, exp)) === target) {
      while (digits % 10 === 0) {
        digits /= 10;
        exp++;
      }
      return writeDecimal(buf, o, digits, exp);
    }
  }
  return writeAscii(buf, o, shortestFloat32Text(value));
}

/** value * 10^power, correctly rounded when value is exact and |power| <= 22. */
function scaleTo(value: number, power: number): number {
  return power >= 0 ? value * (POW10[power] as number) : value / (POW10[-power] as number);
}

/** The slow path for subnormal and extreme exponents: toPrecision until the float32 reads back. */
function shortestFloat32Text(value: number): string {
  const target = Math.fround(value);
  for (let p = 1; p < 9; p++) {
    const text = value.toPrecision(p);
    if (Math.fround(Number(text)) === target) return String(Number(text));
  }
  return String(Number(value.toPrecision(9)));
}

/** Write digits × 10^exp (digits > 0, no trailing zeros) in Number.prototype.toString's notation. */
function writeDecimal(buf: Uint8Array, offset: number, digits: number, exp: number): number {
  const n = digitCount(digits);
  const point = n + exp; // the value is 0.<digits> × 10^point
  let o = offset;
  if (point > 0 && point <= 21) {
    if (exp >= 0) {
      o = writeIntText(buf, o, digits);
      for (let i = 0; i < exp; i++) buf[o++] = ZERO;
      return o;
    }
    const end = writeIntText(buf, o + 1, digits);
    // Shift the integer part left by one byte to open the slot for the decimal point.
    for (let i = 0; i < point; i++) buf[o + i] = buf[o + 1 + i] as number;
    buf[o + point] = DOT;
    return end;
  }
  if (point <= 0 && point > -6) {
    buf[o++] = ZERO;
    buf[o++] = DOT;
    for (let i = 0; i < -point; i++) buf[o++] = ZERO;
    return writeIntText(buf, o, digits);
  }
  // Exponent form: d[.ddd]e±x
  const end = writeIntText(buf, o + 1, digits);
  buf[o] = buf[o + 1] as number;
  if (n > 1) {
    buf[o + 1] = DOT;
    o = end;
  } else {
    o = o + 1;
  }
  buf[o++] = 0x65; // 'e'
  const x = point - 1;
  buf[o++] = x < 0 ? MINUS : 0x2b; // '+'
  return writeIntText(buf, o, x < 0 ? -x : x);
}
