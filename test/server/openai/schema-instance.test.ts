/**
 * sampleSchemaInstance gives instances ajv accepts for realistic tool schemas over many seeds,
 * with formats checked here (ajv-formats is not a dependency), the same instance for the same
 * draws, `{}` for a missing or empty schema, and no exception for odd or unsatisfiable schemas.
 */
import { Ajv } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { sampleSchemaInstance } from '../../../src/server/main/openai/schema-instance.js';

/** mulberry32: the tests' own draws, independent of the code under test. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 0x1_0000_0000;
  };
}

const FORMATS: Record<string, (s: string) => boolean> = {
  date: (s) => /^\d{4}-\d{2}-\d{2}$/.test(s) && !Number.isNaN(Date.parse(`${s}T00:00:00Z`)),
  'date-time': (s) =>
    /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(s) &&
    !Number.isNaN(Date.parse(s)),
  time: (s) => /^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(s),
  email: (s) => /^[a-z0-9._%+-]+@[a-z0-9-]+(\.[a-z0-9-]+)+$/i.test(s),
  uri: (s) => URL.canParse(s) && /^[a-z][a-z0-9+.-]*:/i.test(s),
  hostname: (s) => /^([a-z0-9]([a-z0-9-]*[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]*[a-z0-9])?$/i.test(s),
  ipv4: (s) => /^((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)$/.test(s),
  uuid: (s) => /^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(s),
  duration: (s) => /^P\d+D$/.test(s),
};

function ajvWithFormats<T extends Pick<Ajv, 'addFormat'>>(ajv: T): T {
  for (const [name, check] of Object.entries(FORMATS)) ajv.addFormat(name, check);
  return ajv;
}
const draft7 = ajvWithFormats(new Ajv({ strict: false, allowUnionTypes: true }));
const draft2020 = ajvWithFormats(new Ajv2020({ strict: false, allowUnionTypes: true }));

const WEATHER = {
  type: 'object',
  properties: {
    city: { type: 'string', description: 'City name', minLength: 1 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['city'],
  additionalProperties: false,
};

const SEARCH = {
  type: 'object',
  properties: {
    query: { type: 'string', minLength: 3, maxLength: 40 },
    category: { type: 'string', enum: ['news', 'images', 'videos', 'shopping'] },
    sites: { type: 'array', items: { type: 'string', format: 'hostname' }, maxItems: 3 },
    languages: {
      type: 'array',
      items: { enum: ['en', 'fr', 'de'] },
      minItems: 1,
      uniqueItems: true,
    },
    safe: { type: 'boolean' },
    limit: { type: 'integer', minimum: 1, maximum: 50, default: 10 },
  },
  required: ['query', 'limit'],
};

/** As pydantic writes it: $defs, $ref, Optional as anyOf with null, nested models. */
const PYDANTIC_ORDER = {
  $defs: {
    Address: {
      type: 'object',
      properties: {
        street: { type: 'string', title: 'Street' },
        zip: { type: 'string', pattern: '^\\d{5}(-\\d{4})?$' },
        country: { type: 'string', const: 'US' },
      },
      required: ['street', 'zip', 'country'],
      title: 'Address',
    },
    Item: {
      type: 'object',
      properties: {
        sku: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{4}$' },
        quantity: { type: 'integer', exclusiveMinimum: 0, maximum: 100 },
        price: { type: 'number', minimum: 0, exclusiveMaximum: 1000 },
      },
      required: ['sku', 'quantity'],
    },
  },
  type: 'object',
  properties: {
    customer_email: { type: 'string', format: 'email' },
    shipping: { $ref: '#/$defs/Address' },
    billing: { anyOf: [{ $ref: '#/$defs/Address' }, { type: 'null' }], default: null },
    items: { type: 'array', items: { $ref: '#/$defs/Item' }, minItems: 1, maxItems: 4 },
    note: { anyOf: [{ type: 'string', maxLength: 20 }, { type: 'null' }] },
  },
  required: ['customer_email', 'shipping', 'items'],
  additionalProperties: false,
};

/** Draft-07 style: definitions, integer ranges with multipleOf and exclusive bounds. */
const SCHEDULE = {
  definitions: {
    slot: {
      type: 'object',
      properties: {
        start: { type: 'string', format: 'date-time' },
        minutes: { type: 'integer', minimum: 15, maximum: 240, multipleOf: 15 },
      },
      required: ['start', 'minutes'],
      additionalProperties: false,
    },
  },
  type: 'object',
  properties: {
    date: { type: 'string', format: 'date' },
    at: { type: 'string', format: 'time' },
    slots: { type: 'array', items: { $ref: '#/definitions/slot' }, maxItems: 2 },
    priority: { type: 'integer', exclusiveMinimum: -3, exclusiveMaximum: 3 },
    ratio: { type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 1 },
    big: { type: 'integer', minimum: 1_000_000 },
    negative: { type: 'number', maximum: -5.5 },
    step: { type: 'number', multipleOf: 0.25, minimum: 1, maximum: 3 },
    id: { type: 'string', format: 'uuid' },
    link: { type: 'string', format: 'uri' },
    host_ip: { type: 'string', format: 'ipv4' },
    within: { type: 'string', format: 'duration' },
  },
  required: ['date', 'slots', 'priority', 'ratio', 'big', 'negative', 'step'],
};

/** anyOf / oneOf / allOf, type arrays, const, additionalProperties schemas, minProperties. */
const COMBINATORS = {
  type: 'object',
  properties: {
    target: {
      oneOf: [
        {
          type: 'object',
          properties: { kind: { const: 'user' }, id: { type: 'integer' } },
          required: ['kind', 'id'],
        },
        {
          type: 'object',
          properties: { kind: { const: 'group' }, name: { type: 'string' } },
          required: ['kind', 'name'],
        },
      ],
    },
    amount: { oneOf: [{ type: 'integer' }, { type: 'number' }] },
    value: { type: ['string', 'integer', 'null'] },
    either: {
      anyOf: [
        { type: 'string', format: 'email' },
        { type: 'integer', minimum: 10 },
      ],
    },
    merged: {
      allOf: [
        { type: 'object', properties: { a: { type: 'integer', minimum: 0 } }, required: ['a'] },
        { properties: { a: { maximum: 5 }, b: { type: 'boolean' } }, required: ['b'] },
      ],
    },
    labels: {
      type: 'object',
      additionalProperties: { type: 'string', maxLength: 8 },
      minProperties: 2,
      maxProperties: 3,
    },
    not_red: { type: 'string', enum: ['red', 'green', 'blue'], not: { const: 'red' } },
    anything: {},
    contains_one: {
      type: 'array',
      items: { type: 'integer' },
      contains: { const: 42 },
      maxItems: 3,
    },
  },
  required: ['target', 'amount', 'value', 'either', 'merged', 'labels', 'not_red', 'contains_one'],
};

/** Patterns the generator reads: classes, groups, alternation, quantifiers, escapes. */
const PATTERNS = {
  type: 'object',
  properties: {
    code: { type: 'string', pattern: '^[A-Z]{2}\\d{3,5}$' },
    slug: { type: 'string', pattern: '^[a-z0-9]+(?:-[a-z0-9]+)*$', maxLength: 30 },
    phone: { type: 'string', pattern: '^\\+?[1-9]\\d{6,14}$' },
    color: { type: 'string', pattern: '^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$' },
    choice: { type: 'string', pattern: '^(yes|no|maybe)$' },
    unanchored: { type: 'string', pattern: 'ab+c' },
    not_space: { type: 'string', pattern: '^[^\\s]{4}$' },
    version: { type: 'string', pattern: '^v\\d+\\.\\d+\\.\\d+$' },
  },
  required: ['code', 'slug', 'phone', 'color', 'choice', 'unanchored', 'not_space', 'version'],
  additionalProperties: false,
};

/** A recursive schema: the sampler must stop. */
const TREE = {
  $defs: {
    node: {
      type: 'object',
      properties: {
        label: { type: 'string' },
        children: { type: 'array', items: { $ref: '#/$defs/node' } },
      },
      required: ['label', 'children'],
    },
  },
  $ref: '#/$defs/node',
};

/** Draft 2020 tuples (prefixItems) and draft-07 tuples (items as an array). */
const TUPLES_2020 = {
  type: 'object',
  properties: {
    point: {
      type: 'array',
      prefixItems: [{ type: 'number' }, { type: 'number' }],
      items: false,
      minItems: 2,
    },
    range: {
      type: 'array',
      prefixItems: [{ type: 'string', format: 'date' }],
      items: { type: 'integer' },
    },
  },
  required: ['point', 'range'],
};
const TUPLES_07 = {
  type: 'object',
  properties: {
    pair: {
      type: 'array',
      items: [{ type: 'string' }, { type: 'boolean' }],
      additionalItems: false,
    },
    matrix: {
      type: 'array',
      items: {
        type: 'array',
        items: { type: 'integer', minimum: 0, maximum: 9 },
        minItems: 2,
        maxItems: 2,
      },
      minItems: 2,
      maxItems: 2,
    },
  },
  required: ['pair', 'matrix'],
};

const CORPUS_07: Record<string, object> = {
  WEATHER,
  SEARCH,
  SCHEDULE,
  COMBINATORS,
  PATTERNS,
  TUPLES_07,
};
const CORPUS_2020: Record<string, object> = { PYDANTIC_ORDER, TREE, TUPLES_2020 };

const seed = fc.integer({ min: 0, max: 0xffff_ffff });

describe('sampleSchemaInstance', () => {
  for (const [name, schema] of Object.entries(CORPUS_07)) {
    it(`${name}: every instance validates (draft-07)`, () => {
      const validate = draft7.compile(schema);
      fc.assert(
        fc.property(seed, (s) => {
          const value = sampleSchemaInstance(schema, rng(s));
          expect(
            validate(value),
            `${JSON.stringify(value)}: ${JSON.stringify(validate.errors)}`,
          ).toBe(true);
        }),
        { numRuns: 300 },
      );
    });
  }
  for (const [name, schema] of Object.entries(CORPUS_2020)) {
    it(`${name}: every instance validates (draft 2020-12)`, () => {
      const validate = draft2020.compile(schema);
      fc.assert(
        fc.property(seed, (s) => {
          const value = sampleSchemaInstance(schema, rng(s));
          expect(
            validate(value),
            `${JSON.stringify(value)}: ${JSON.stringify(validate.errors)}`,
          ).toBe(true);
        }),
        { numRuns: 300 },
      );
    });
  }

  it('draws optional properties and both branches over seeds, and keeps values short', () => {
    const seen = { unit: 0, noUnit: 0, billingNull: 0, billing: 0 };
    for (let s = 0; s < 200; s++) {
      const w = sampleSchemaInstance(WEATHER, rng(s)) as Record<string, unknown>;
      if ('unit' in w) seen.unit++;
      else seen.noUnit++;
      const o = sampleSchemaInstance(PYDANTIC_ORDER, rng(s)) as Record<string, unknown>;
      if (o.billing === null) seen.billingNull++;
      else if (o.billing !== undefined) seen.billing++;
      expect(JSON.stringify(w).length).toBeLessThan(120);
    }
    for (const n of Object.values(seen)) expect(n).toBeGreaterThan(5);
  });

  it('gives the same instance for the same draws', () => {
    for (const schema of [...Object.values(CORPUS_07), ...Object.values(CORPUS_2020)]) {
      for (let s = 0; s < 20; s++) {
        expect(sampleSchemaInstance(schema, rng(s))).toEqual(sampleSchemaInstance(schema, rng(s)));
      }
    }
  });

  it('gives {} for a missing or empty schema', () => {
    for (const schema of [undefined, null, {}, { description: 'no arguments' }, true]) {
      expect(sampleSchemaInstance(schema, rng(1))).toEqual({});
    }
    expect(sampleSchemaInstance({ type: 'object', properties: {} }, rng(1))).toEqual({});
  });

  it('honours draft 4 boolean exclusive bounds', () => {
    const schema = {
      type: 'object',
      properties: {
        n: {
          type: 'integer',
          minimum: 0,
          exclusiveMinimum: true,
          maximum: 2,
          exclusiveMaximum: true,
        },
        x: {
          type: 'number',
          minimum: 0,
          exclusiveMinimum: true,
          maximum: 0.5,
          exclusiveMaximum: true,
        },
      },
      required: ['n', 'x'],
    };
    for (let s = 0; s < 100; s++) {
      const v = sampleSchemaInstance(schema, rng(s)) as { n: number; x: number };
      expect(v.n).toBe(1);
      expect(v.x > 0 && v.x < 0.5).toBe(true);
    }
  });

  it('never throws on odd or unsatisfiable schemas', () => {
    const odd: unknown[] = [
      { type: 'object', properties: { a: false }, required: ['a'] },
      { type: 'integer', minimum: 5, maximum: 1 },
      { type: 'string', minLength: 10, maxLength: 2 },
      { type: 'string', pattern: '(?<=a)b\\1' },
      { type: 'string', pattern: '[' },
      { type: 'object', properties: { x: { $ref: '#/$defs/missing' } }, required: ['x'] },
      { $ref: '#' },
      { allOf: [{ type: 'string' }, { type: 'integer' }] },
      { oneOf: [] },
      { anyOf: [false] },
      { type: 'array', items: { enum: ['a'] }, minItems: 3, uniqueItems: true },
      { type: 'unknown-type' },
      { properties: 'not an object', required: 'x' },
      { type: 'number', multipleOf: 0.1, minimum: 0.15, maximum: 0.18 },
      { type: 'array', minItems: 1e9 },
      { type: 'string', minLength: 1e12 },
      { type: 'string', pattern: '^[^!-~]$' },
      { type: 'object', minProperties: 1e6 },
      // Recursive schemas that loop or branch.
      { $defs: { a: { allOf: [{ $ref: '#/$defs/a' }] } }, $ref: '#/$defs/a' },
      { type: 'object', properties: { l: { $ref: '#' }, r: { $ref: '#' } }, required: ['l', 'r'] },
      { oneOf: [{ $ref: '#' }, { $ref: '#' }, { $ref: '#' }] },
      { anyOf: [{ $ref: '#' }, { type: 'array', items: { $ref: '#' }, minItems: 3 }] },
    ];
    const started = performance.now();
    for (const schema of odd) {
      for (let s = 0; s < 10; s++) sampleSchemaInstance(schema, rng(s));
    }
    expect(performance.now() - started).toBeLessThan(20_000);
    fc.assert(
      fc.property(fc.anything(), seed, (schema, s) => {
        sampleSchemaInstance(schema, rng(s));
      }),
      { numRuns: 500 },
    );
  });
});
