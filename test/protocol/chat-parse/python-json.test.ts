import { describe, expect, it } from 'vitest';
import {
  dumpsPython,
  loadsPython,
  pyFloatRepr,
} from '../../../src/protocol/chat-parse/python-json.js';
import { literalEvalPython } from '../../../src/protocol/chat-parse/python-literal.js';
import { pyStrip } from '../../../src/protocol/chat-parse/python-str.js';

/**
 * Python's json.loads / json.dumps(ensure_ascii=False) / ast.literal_eval, as vLLM's tool parsers
 * use them. Expected values are what CPython 3.11 prints for the same input.
 */

function roundTrip(text: string): string | undefined {
  const v = loadsPython(text);
  return v === undefined ? undefined : dumpsPython(v);
}

function literal(text: string): string | undefined | 'unserializable' {
  const v = literalEvalPython(text);
  if (v === undefined) return undefined;
  return dumpsPython(v) ?? 'unserializable';
}

describe('pyFloatRepr', () => {
  it('writes repr(float)', () => {
    const cases: [number, string][] = [
      [1, '1.0'],
      [1.5, '1.5'],
      [100, '100.0'],
      [1e15, '1000000000000000.0'],
      [1234567890123456, '1234567890123456.0'],
      [1e16, '1e+16'],
      [1e22, '1e+22'],
      [0.0001, '0.0001'],
      [1e-5, '1e-05'],
      [1.5e-7, '1.5e-07'],
      [-0, '-0.0'],
      [5e-324, '5e-324'],
      [1.7976931348623157e308, '1.7976931348623157e+308'],
      [0.1 + 0.2, '0.30000000000000004'],
      [Number.NaN, 'NaN'],
      [-Infinity, '-Infinity'],
    ];
    for (const [x, want] of cases) expect(pyFloatRepr(x), String(x)).toBe(want);
  });
});

describe('json.loads then json.dumps', () => {
  it('uses Python separators and keeps int vs float', () => {
    expect(roundTrip('{"a":1,"b":1.0,"c":1.50,"d":1e5,"e":-0,"f":[]}')).toBe(
      '{"a": 1, "b": 1.0, "c": 1.5, "d": 100000.0, "e": 0, "f": []}',
    );
    expect(roundTrip('123456789012345678901234567890')).toBe('123456789012345678901234567890');
    expect(roundTrip('1e400')).toBe('Infinity');
    expect(roundTrip('[NaN, -Infinity]')).toBe('[NaN, -Infinity]');
  });

  it('escapes only what ensure_ascii=False escapes', () => {
    expect(roundTrip('"\\u00e9\\ud83d\\ude00\\/\\u0001\\u001f\\u007f\\u2028\\"\\\\"')).toBe(
      '"é😀/\\u0001\\u001f\u007f\u2028\\"\\\\"',
    );
    expect(roundTrip('"\\b\\f\\n\\r\\t"')).toBe('"\\b\\f\\n\\r\\t"');
  });

  it('keeps the first place and the last value of a repeated key', () => {
    expect(roundTrip('{"a": 1, "b": 2, "a": 3}')).toBe('{"a": 3, "b": 2}');
  });

  it('refuses what Python refuses', () => {
    for (const bad of [
      '',
      '01',
      '1.',
      '.5',
      '[1,]',
      '{"a":1,}',
      '"\u0001"',
      "'a'",
      'tru',
      'nan',
      '"\\x"',
      '[1 2]',
      '1 2',
    ]) {
      expect(loadsPython(bad), JSON.stringify(bad)).toBeUndefined();
    }
    expect(loadsPython('['.repeat(5000) + ']'.repeat(5000))).toBeUndefined();
    expect(loadsPython('9'.repeat(4301))).toBeUndefined();
  });

  it('allows JSON whitespace around the value', () => {
    expect(roundTrip(' \n\t{"a": [ 1 , 2 ] }\r\n')).toBe('{"a": [1, 2]}');
  });
});

describe('ast.literal_eval', () => {
  it('reads Python literals', () => {
    const cases: [string, string][] = [
      ['True', 'true'],
      ['None', 'null'],
      ["'a\\'b'", '"a\'b"'],
      ["'''x\ny'''", '"x\\ny"'],
      ["r'a\\nb'", '"a\\\\nb"'],
      ["'a' 'b'", '"ab"'],
      ["'\\x41\\u00e9\\101\\n'", '"AéA\\n"'],
      ["'\\q'", '"\\\\q"'],
      ['1_000', '1000'],
      ['0x1F', '31'],
      ['0o17', '15'],
      ['0b101', '5'],
      ['.5', '0.5'],
      ['5.', '5.0'],
      ['1e1_0', '10000000000.0'],
      ['-5', '-5'],
      ['+5', '5'],
      ['-0', '0'],
      ['00', '0'],
      ['(1,)', '[1]'],
      ['()', '[]'],
      ['(1)', '1'],
      ['[1,\n2]', '[1, 2]'],
      ['{1: 2, 1.5: 3, True: 4, None: 5}', '{"1": 2, "1.5": 3, "true": 4, "null": 5}'],
      ["{'k': 'v', 'k': 'w'}", '{"k": "w"}'],
      ["[1, (2, 3), {'a': None}]", '[1, [2, 3], {"a": null}]'],
    ];
    for (const [text, want] of cases) expect(literal(text), text).toBe(want);
  });

  it('reads sets, bytes, complex numbers and tuple keys, which json.dumps refuses', () => {
    for (const text of ['{1, 2}', 'set()', "b'x'", '1+2j', '2j', '{(1, 2): 3}']) {
      expect(literal(text), text).toBe('unserializable');
    }
  });

  it('refuses what literal_eval refuses', () => {
    for (const text of [
      'abc',
      '01',
      '1__0',
      '1_',
      '0x',
      '1 2',
      '1\n2',
      '--1',
      '-True',
      'f"x"',
      "'unterminated",
      '[1,',
      '{1:}',
      "'\\N{DASH}'",
    ]) {
      expect(literalEvalPython(text), text).toBeUndefined();
    }
  });
});

describe('pyStrip', () => {
  it('strips what str.strip() strips', () => {
    expect(pyStrip('\x1c\x85\u3000 a b\t\n\v\f\r\u2028')).toBe('a b');
    expect(pyStrip('\ufeffa')).toBe('\ufeffa');
  });
});
