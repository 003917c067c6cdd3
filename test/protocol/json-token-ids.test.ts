/**
 * parseWithTokenIds against JSON.parse, the reference it must agree with: whatever it returns is
 * JSON.parse's object with `token_ids` as an Int32Array of the same ids, and whatever it does not
 * read with certainty (every other shape, every invalid text) it leaves to JSON.parse by
 * returning undefined. Never a value JSON.parse would not give.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseWithTokenIds } from '../../src/protocol/json-token-ids.js';

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

/** JSON.parse's reading with a top-level token_ids array as the Int32Array the fast path makes. */
function reference(text: string): unknown {
  const value = JSON.parse(text) as Record<string, unknown>;
  if (Array.isArray(value.token_ids))
    value.token_ids = Int32Array.from(value.token_ids as number[]);
  return value;
}

/** The fast path's reading must be JSON.parse's, or undefined. True when it read the text. */
function agrees(text: string): boolean {
  const fast = parseWithTokenIds(bytes(text));
  if (fast === undefined) return false;
  expect(fast, text).toEqual(reference(text));
  return true;
}

const ids = fc.array(fc.integer({ min: 0, max: 999_999_999 }), { maxLength: 64 });
const whitespace = fc.constantFrom('', ' ', '\n', '\t', '\r\n', '  ');

/** A generate-like body as text, with whitespace anywhere JSON allows it. */
const body = fc
  .record({
    ids,
    rest: fc.dictionary(
      // Keys JSON.stringify writes without escapes (an escaped key is left to JSON.parse).
      fc
        .string({ maxLength: 12 })
        .filter((k) => k !== '__proto__' && k !== 'token_ids' && JSON.stringify(k) === `"${k}"`),
      fc.jsonValue({ maxDepth: 3 }),
      { maxKeys: 5 },
    ),
    ws: fc.array(whitespace, { minLength: 8, maxLength: 8 }),
    idsFirst: fc.boolean(),
  })
  .map(({ ids: list, rest, ws, idsFirst }) => {
    const tokenIds = `"token_ids"${ws[0]}:${ws[1]}[${ws[2]}${list.join(`${ws[3]},${ws[4]}`)}${ws[5]}]`;
    const others = Object.entries(rest).map(
      ([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`,
    );
    const members = idsFirst ? [tokenIds, ...others] : [...others, tokenIds];
    return `${ws[6]}{${members.join(`,${ws[7]}`)}}${ws[6]}`;
  });

describe('parseWithTokenIds', () => {
  it('reads any generate-like body as JSON.parse does, token_ids as an Int32Array', () => {
    fc.assert(
      fc.property(body, (text) => {
        const fast = parseWithTokenIds(bytes(text));
        expect(fast, text).toBeDefined();
        expect(fast).toEqual(reference(text));
        expect((fast as { token_ids: unknown }).token_ids).toBeInstanceOf(Int32Array);
      }),
      { numRuns: 2_000 },
    );
  });

  it('never gives a value JSON.parse would not: any cut, insertion or changed byte', () => {
    const mutated = fc
      .tuple(
        body,
        fc.nat(),
        fc.constantFrom('', ',', '"', '[', ']', '{', '}', '-', '.', 'e', '0', ' ', '\\', 'x'),
        fc.nat({ max: 2 }),
      )
      .map(([text, at, insert, remove]) => {
        const i = at % (text.length + 1);
        return text.slice(0, i) + insert + text.slice(i + remove);
      });
    fc.assert(
      fc.property(mutated, (text) => {
        const fast = parseWithTokenIds(bytes(text));
        if (fast === undefined) return;
        expect(() => JSON.parse(text), text).not.toThrow();
        expect(fast, text).toEqual(reference(text));
      }),
      { numRuns: 5_000 },
    );
  });

  it('leaves every id it cannot be sure of to JSON.parse', () => {
    for (const list of [
      '-1',
      '1.0',
      '1e2',
      '01',
      '00',
      '1234567890',
      '1,',
      ',1',
      '1 2',
      'null',
      '"1"',
      '[1]',
      '+1',
      '0x1',
    ]) {
      expect(parseWithTokenIds(bytes(`{"token_ids":[${list}]}`)), list).toBeUndefined();
    }
    expect(agrees('{"token_ids":[0, 999999999 ,7]}')).toBe(true);
    expect(agrees('{"token_ids":[]}')).toBe(true);
  });

  it('leaves other shapes and invalid text to JSON.parse, and reads valid ones it can', () => {
    const left = [
      '',
      '[]',
      '"x"',
      '{"token_ids":[1],}',
      '{"token_ids":[1]} x',
      '\ufeff{"token_ids":[1]}',
      '{"tok\\u0065n_ids":[1]}',
      '{"__proto__":{"x":1},"token_ids":[1]}',
      '{"token_ids":[1]',
      '{"a":tru,"token_ids":[1]}',
      '{"a" 1}',
      '{"a":"unterminated}',
    ];
    for (const text of left) expect(parseWithTokenIds(bytes(text)), text).toBeUndefined();
    // Nested token_ids are only values: JSON.parse's arrays.
    expect(agrees('{"sampling_params":{"token_ids":[1,2]},"token_ids":[3]}')).toBe(true);
    // A string full of the scanner's delimiters, and multi-byte characters.
    expect(agrees('{"stop":["]}\\",[{", "é中😀"],"token_ids":[5]}')).toBe(true);
    // The last of two token_ids wins, as in JSON.parse.
    expect(agrees('{"token_ids":[1],"token_ids":[2,3]}')).toBe(true);
    expect(agrees('{"token_ids":null}')).toBe(true);
    expect(agrees('{}')).toBe(true);
  });
});
