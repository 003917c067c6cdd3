import { describe, expect, it } from 'vitest';
import { JsonWriter } from '../../src/protocol/json-writer.js';

const text = (w: JsonWriter): string => w.finish().toString('utf8');

describe('JsonWriter', () => {
  it('escapes strings exactly as JSON.stringify does', () => {
    const samples = [
      '',
      'plain',
      'quote " and backslash \\',
      'controls \u0000\u0001\b\t\n\f\r\u001f\u007f',
      'é ü ß',
      '中文字符',
      'emoji 😀 and 𝄞',
      'lone \ud800 high',
      'lone \udc00 low',
      'pair at end \ud83d\ude00',
      'ends with high \ud83d',
      '</script>',
      '\u2028\u2029',
    ];
    for (const s of samples) {
      const w = new JsonWriter(8);
      w.string(s);
      expect(text(w)).toBe(JSON.stringify(s));
      expect(JSON.parse(text(w))).toBe(JSON.parse(JSON.stringify(s)));
    }
  });

  it('writes ints, numbers, booleans and null', () => {
    const w = new JsonWriter(4);
    w.raw('[').int(-42).raw(',').number(Math.fround(-0.1)).raw(',').number(0.1).raw(',');
    w.number(Number.NaN).raw(',').bool(true).raw(',').bool(false).raw(',').null().raw(']');
    expect(text(w)).toBe('[-42,-0.1,0.1,null,true,false,null]');
    // A double that is not a float32 keeps all its digits.
    expect(JSON.parse(text(new JsonWriter().number(0.1 + 0.2)))).toBe(0.1 + 0.2);
  });

  it('writes Int32Array views and ranges as JSON arrays', () => {
    const ids = Int32Array.from([11, 42, -3, 2147483647, -2147483648, 0]);
    expect(text(new JsonWriter(2).intArray(ids))).toBe(JSON.stringify(Array.from(ids)));
    expect(text(new JsonWriter().intArray(new Int32Array(0)))).toBe('[]');
    expect(text(new JsonWriter().intArray(ids, 1, 3))).toBe('[42,-3]');
    expect(text(new JsonWriter().intArray(ids, 2, 2))).toBe('[]');
    const sab = new Int32Array(new SharedArrayBuffer(40), 8, 3);
    sab.set([7, 8, 9]);
    expect(text(new JsonWriter().intArray(sab))).toBe('[7,8,9]');
  });

  it('writes packed arrays with base64 of the raw bytes', () => {
    const lp = Float32Array.from([-0.5, -1.25, -0.5]);
    const w = new JsonWriter(16).packedArray(lp, [3], 'float32');
    expect(JSON.parse(text(w))).toEqual({ data: 'AAAAvwAAoL8AAAC/', shape: [3], dtype: 'float32' });
    const routing = Uint8Array.from([1, 2, 3, 4, 5, 6]);
    const r = new JsonWriter()
      .raw('{')
      .packedArrayFields(routing, [1, 3, 2], 'uint8')
      .raw(',"start":4}');
    expect(JSON.parse(text(r))).toEqual({
      data: 'AQIDBAUG',
      shape: [1, 3, 2],
      dtype: 'uint8',
      start: 4,
    });
  });

  it('refuses a packed array whose view disagrees with its shape or dtype', () => {
    const ids = new Int32Array(4);
    expect(() => new JsonWriter().packedArray(ids, [5], 'int32')).toThrow(/RS_ERR|inconsistent/);
    expect(() => new JsonWriter().packedArray(ids, [4], 'float32')).toThrow(/cannot be float32/);
    expect(() => new JsonWriter().packedArray(new Uint8Array(6), [2, 2], 'uint8')).toThrow();
  });

  it('grows from a tiny buffer, keeps it across reset, and hands out independent copies', () => {
    const w = new JsonWriter(1);
    const big = new Int32Array(10_000).map((_, i) => i * 7919 - 5_000_000);
    const first = w.intArray(big).finish();
    expect(JSON.parse(first.toString())).toEqual(Array.from(big));
    w.reset().raw('"second"');
    expect(w.length).toBe(8);
    expect(text(w)).toBe('"second"');
    // The first result is a copy: writing again did not change it.
    expect(JSON.parse(first.toString())).toEqual(Array.from(big));
  });

  it('finish() gives a Buffer with its own ArrayBuffer, which can be transferred', () => {
    const w = new JsonWriter().raw('{"a":1}');
    const out = w.finish();
    expect(out.byteOffset).toBe(0);
    expect(out.buffer.byteLength).toBe(out.length);
    structuredClone(out.buffer, { transfer: [out.buffer as ArrayBuffer] });
    expect(out.buffer.byteLength).toBe(0); // detached: the transfer took it
    expect(w.view().toString()).toBe('{"a":1}'); // the writer's own buffer is untouched
  });

  it('writes pass-through values through JSON.stringify, including non-ASCII text', () => {
    const v = { do_remote_decode: true, host: 'ü', ids: [1, 2] };
    expect(JSON.parse(text(new JsonWriter(2).value(v)))).toEqual(v);
    expect(text(new JsonWriter().value(undefined))).toBe('null');
  });
});
