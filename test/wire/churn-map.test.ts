import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ChurnMap } from '../../src/wire/churn-map.js';

type Op<K> =
  | { op: 'set'; key: K; value: number }
  | { op: 'delete'; key: K }
  | { op: 'get'; key: K }
  | { op: 'clear' };

/** Runs `ops` on a ChurnMap and on a JS Map (the model) and compares them after each. */
function agreesWithMap<K extends string | number>(ops: Op<K>[]): void {
  const table = new ChurnMap<K, number>();
  const model = new Map<K, number>();
  for (const o of ops) {
    if (o.op === 'set') {
      expect(table.set(o.key, o.value)).toBe(table);
      model.set(o.key, o.value);
    } else if (o.op === 'delete') {
      expect(table.delete(o.key)).toBe(model.delete(o.key));
    } else if (o.op === 'get') {
      expect(table.get(o.key)).toBe(model.get(o.key));
      expect(table.has(o.key)).toBe(model.has(o.key));
    } else {
      table.clear();
      model.clear();
    }
    expect(table.size).toBe(model.size);
  }
  // The same entries in the same (insertion) order; keys keep their type.
  expect([...table]).toEqual([...model]);
  expect([...table.keys()]).toEqual([...model.keys()]);
  expect([...table.values()]).toEqual([...model.values()]);
}

// Names an object would otherwise inherit or treat specially, beside ordinary ids.
const specialNames = fc.constantFrom(
  '__proto__',
  'constructor',
  'toString',
  'hasOwnProperty',
  'valueOf',
  '',
  '0',
  '-1',
  '4294967295',
  '1e3',
);
const stringKey = fc.oneof(specialNames, fc.string({ maxLength: 6 }));
// Integer keys as the engines make them (server * 2^32 + slot), and small ones.
const numberKey = fc.oneof(
  fc.integer({ min: 0, max: 70 }),
  fc
    .tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 5 }))
    .map(([s, i]) => s * 2 ** 32 + i),
);

function opsOf<K>(key: fc.Arbitrary<K>): fc.Arbitrary<Op<K>[]> {
  return fc.array(
    fc.oneof(
      {
        weight: 4,
        arbitrary: fc.record({ op: fc.constant('set' as const), key, value: fc.integer() }),
      },
      { weight: 3, arbitrary: fc.record({ op: fc.constant('delete' as const), key }) },
      { weight: 3, arbitrary: fc.record({ op: fc.constant('get' as const), key }) },
      { weight: 1, arbitrary: fc.constant({ op: 'clear' as const }) },
    ),
    { maxLength: 200 },
  );
}

describe('ChurnMap', () => {
  it('answers as a Map does for string keys, inherited names included', () => {
    fc.assert(fc.property(opsOf(stringKey), (ops) => agreesWithMap(ops)));
  });

  it('answers as a Map does for integer keys, above 2^32 included', () => {
    fc.assert(fc.property(opsOf(numberKey), (ops) => agreesWithMap(ops)));
  });

  it('does not see an entry through a name every object inherits', () => {
    const table = new ChurnMap<string, number>();
    expect(table.get('toString')).toBeUndefined();
    expect(table.has('__proto__')).toBe(false);
    expect(table.delete('constructor')).toBe(false);
    table.set('__proto__', 1);
    expect(table.get('__proto__')).toBe(1);
    expect([...table]).toEqual([['__proto__', 1]]);
  });

  it('lets entries be deleted while it is iterated, as a Map does', () => {
    const table = new ChurnMap<number, string>();
    for (let i = 0; i < 50; i++) table.set(2 ** 32 + i, `v${i}`);
    const seen: number[] = [];
    for (const [key] of table) {
      seen.push(key);
      if (key % 2 === 0) table.delete(key);
      table.delete(key + 1);
    }
    // Each key deleted before its turn is not visited.
    expect(seen).toEqual(Array.from({ length: 25 }, (_, i) => 2 ** 32 + 2 * i));
    expect(table.size).toBe(0);
  });
});
