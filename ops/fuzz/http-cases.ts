/**
 * What the route fuzzer sends (fast-check arbitraries): a route, headers and body bytes. Bodies are
 * random JSON values, valid generate bodies with one field swapped for a hostile value (wrong type,
 * huge or negative number, deep nesting, `__proto__`/`constructor` keys), the same as msgpack
 * (with NaN, 64-bit integers, binary, extension types), byte-level damage (truncation, flipped bytes,
 * invalid UTF-8), and hostile msgpack (declared lengths far past the data, deep nesting). Control
 * routes are fuzzed apart (controlCase): a /pause stops the engine for every other case.
 */
import fc from 'fast-check';
import { pack } from 'msgpackr';

export interface HttpCase {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  path: string;
  headers: Record<string, string>;
  body: Uint8Array | null;
}

export const GENERATE_PATH = '/inference/v1/generate';
const DATA_ROUTES = ['/health', '/liveness', '/v1/models', '/load', '/metrics'] as const;
export const CONTROL_PATHS = [
  '/pause',
  '/resume',
  '/update_weights',
  '/reset_prefix_cache',
  '/abort_requests',
  '/init_broadcaster',
  '/load_lora_adapter',
  '/v1/load_lora_adapter',
  '/v1/unload_lora_adapter',
] as const;

/** A valid generate body for the tiny preset (vocabulary 1000) that finishes in a few tokens. */
export function validGenerateBody(): Record<string, unknown> {
  return {
    token_ids: [1, 2, 3, 4],
    kv_transfer_params: { do_remote_decode: false },
    sampling_params: {
      max_tokens: 4,
      temperature: 1,
      top_p: 0.9,
      top_k: 50,
      logprobs: 1,
      seed: 7,
      return_sampling_mask: true,
      return_routed_experts: true,
    },
    stream: false,
  };
}

const FIELD_PATHS: readonly (readonly string[])[] = [
  ['token_ids'],
  ['token_ids', '0'],
  ['sampling_params'],
  ['sampling_params', 'max_tokens'],
  ['sampling_params', 'temperature'],
  ['sampling_params', 'top_p'],
  ['sampling_params', 'top_k'],
  ['sampling_params', 'min_p'],
  ['sampling_params', 'seed'],
  ['sampling_params', 'n'],
  ['sampling_params', 'logprobs'],
  ['sampling_params', 'stop'],
  ['sampling_params', 'stop_token_ids'],
  ['sampling_params', 'min_tokens'],
  ['sampling_params', 'repetition_penalty'],
  ['sampling_params', 'routed_experts_prompt_start'],
  ['sampling_params', 'prompt_logprobs'],
  ['stream'],
  ['stream_options'],
  ['packed'],
  ['model'],
  ['request_id'],
  ['cache_salt'],
  ['priority'],
  ['kv_transfer_params'],
  ['kv_transfer_params', 'do_remote_decode'],
  ['features'],
  ['__proto__'],
  ['constructor'],
];

function deep(depth: number, leaf: unknown): unknown {
  let v = leaf;
  for (let i = 0; i < depth; i++) v = i % 2 === 0 ? [v] : { a: v };
  return v;
}

/** Values no field accepts, or only just: the edges of every type. */
const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(
    null,
    true,
    false,
    0,
    -1,
    -0,
    1.5,
    2 ** 31,
    -(2 ** 31) - 1,
    2 ** 53 + 2,
    -(2 ** 53) - 2,
    1e308,
    -1e308,
    5e-324,
    '',
    '0',
    'NaN',
    '\u0000',
    '\ud800',
    'x'.repeat(5000),
    [],
    {},
    [null],
    [-1],
    [1e308],
    ['a'],
    { __proto__: null },
    { constructor: { prototype: { polluted: true } } },
  ),
  fc.integer(),
  fc.double(),
  fc.string({ maxLength: 40 }),
  fc.array(fc.integer({ min: -5, max: 2000 }), { maxLength: 40 }),
  // Past a few thousand levels JSON.stringify and a recursive writer run out of stack.
  fc.integer({ min: 50, max: 8000 }).map((d) => deep(d, 1)),
  fc.integer({ min: 1000, max: 8000 }).map((d) => deep(d % 2 === 0 ? d : d + 1, { x: 1 })),
  fc.jsonValue({ maxDepth: 3 }),
  // Integers past 2^53: msgpack carries them as int64/uint64 and msgpackr decodes them as bigints
  // (a JSON body carries none: JSON.stringify refuses them, so they reach the server as msgpack).
  fc.bigInt({ min: 2n ** 53n, max: 2n ** 64n - 1n }),
  fc.bigInt({ min: -(2n ** 63n), max: -(2n ** 53n) - 1n }).map((b) => ({ a: [b] })),
);

function setPath(target: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let at: Record<string, unknown> = target;
  for (let i = 0; i < path.length - 1; i++) {
    const next = at[path[i]!];
    if (typeof next !== 'object' || next === null) return;
    at = next as Record<string, unknown>;
  }
  // defineProperty: `__proto__` becomes an own key, as a hostile JSON text would carry it.
  Object.defineProperty(at, path[path.length - 1]!, {
    value,
    enumerable: true,
    writable: true,
    configurable: true,
  });
}

/** A valid body with one to three fields replaced by hostile values. */
const mutatedBody: fc.Arbitrary<Record<string, unknown>> = fc
  .array(fc.tuple(fc.constantFrom(...FIELD_PATHS), hostileValue), { minLength: 1, maxLength: 3 })
  .map((edits) => {
    const body = validGenerateBody();
    for (const [path, value] of edits) setPath(body, path, value);
    return body;
  });

const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 4 }),
  fc.anything({ maxDepth: 3, withNullPrototype: true, withBigInt: false, withDate: true }),
);

function jsonBytes(value: unknown): Uint8Array {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch {
    text = undefined;
  }
  return Buffer.from(text ?? 'null', 'utf8');
}

function msgpackBytes(value: unknown): Uint8Array {
  try {
    return pack(value);
  } catch {
    return pack(null);
  }
}

/** Byte-level damage to an encoded body. */
const damage = (bytes: Uint8Array): fc.Arbitrary<Uint8Array> =>
  fc.oneof(
    fc.constant(bytes),
    fc.nat({ max: Math.max(0, bytes.length) }).map((n) => bytes.subarray(0, n)),
    fc
      .array(fc.tuple(fc.nat({ max: Math.max(0, bytes.length - 1) }), fc.nat({ max: 255 })), {
        minLength: 1,
        maxLength: 8,
      })
      .map((flips) => {
        const out = Uint8Array.from(bytes);
        for (const [at, value] of flips) if (at < out.length) out[at] = value;
        return out;
      }),
    // Invalid UTF-8 (a lone continuation byte, an overlong form, a surrogate) spliced in.
    fc
      .tuple(
        fc.nat({ max: bytes.length }),
        fc.constantFrom([0x80], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xff, 0xfe]),
      )
      .map(([at, bad]) =>
        Buffer.concat([bytes.subarray(0, at), Buffer.from(bad), bytes.subarray(at)]),
      ),
  );

/** msgpack that lies: lengths far past the data, deep nesting, reserved and extension types. */
const hostileMsgpack: fc.Arbitrary<Uint8Array> = fc.oneof(
  fc.constantFrom(
    Buffer.from([0xdd, 0xff, 0xff, 0xff, 0xff]),
    Buffer.from([0xdf, 0x7f, 0xff, 0xff, 0xff]),
    Buffer.from([0xdb, 0xff, 0xff, 0xff, 0xff, 0x61]),
    Buffer.from([0xc6, 0xff, 0xff, 0xff, 0xff]),
    Buffer.from([0xc9, 0xff, 0xff, 0xff, 0xff, 0x01]),
    Buffer.from([0xc1]),
    Buffer.from([0xd4, 0x01, 0x02]),
    Buffer.from([0xd6, 0xff, 0, 0, 0, 1]),
    Buffer.from([0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
    Buffer.from([0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0]),
  ),
  fc
    .integer({ min: 100, max: 200_000 })
    .map((depth) => Buffer.concat([Buffer.alloc(depth, 0x91), Buffer.from([0xc0])])),
  fc.uint8Array({ maxLength: 256 }),
);

/**
 * A valid body whose free-form `kv_transfer_params` nests `depth` objects deep, written as text
 * (JSON.stringify and msgpackr's pack recurse, so past a few thousand levels they could not make
 * it): a client's hand-built or hostile body, the case that once answered 500 after generating.
 */
const deepFreeFormBody: fc.Arbitrary<{ type: string; bytes: Uint8Array }> = fc
  .tuple(fc.integer({ min: 33, max: 200_000 }), fc.boolean())
  .map(([depth, asMsgpack]) => {
    const body = { ...validGenerateBody(), kv_transfer_params: PLACEHOLDER };
    if (!asMsgpack) {
      const text = JSON.stringify(body).replace(
        JSON.stringify(PLACEHOLDER),
        `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`,
      );
      return json(Buffer.from(text, 'utf8'));
    }
    const bytes = Buffer.from(pack(body));
    const mark = Buffer.from(pack(PLACEHOLDER));
    const at = bytes.indexOf(mark);
    // fixmap of one entry, key "a", `depth` times, around the integer 1.
    const nested = Buffer.concat([Buffer.alloc(depth * 3), Buffer.from([0x01])]);
    for (let i = 0; i < depth; i++) nested.set([0x81, 0xa1, 0x61], i * 3);
    return msgpack(
      Buffer.concat([bytes.subarray(0, at), nested, bytes.subarray(at + mark.length)]),
    );
  });
const PLACEHOLDER = '__deep_free_form__';

const body: fc.Arbitrary<{ type: string; bytes: Uint8Array }> = fc.oneof(
  { weight: 4, arbitrary: mutatedBody.chain((b) => damage(jsonBytes(b))).map(json) },
  { weight: 3, arbitrary: mutatedBody.chain((b) => damage(msgpackBytes(b))).map(msgpack) },
  { weight: 2, arbitrary: anyValue.map((v) => json(jsonBytes(v))) },
  { weight: 1, arbitrary: anyValue.map((v) => msgpack(msgpackBytes(v))) },
  { weight: 1, arbitrary: hostileMsgpack.map(msgpack) },
  { weight: 1, arbitrary: deepFreeFormBody },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 512 }).map(json) },
);

function json(bytes: Uint8Array) {
  return { type: 'application/json', bytes };
}
function msgpack(bytes: Uint8Array) {
  return { type: 'application/msgpack', bytes };
}

const contentType = (natural: string): fc.Arbitrary<string | null> =>
  fc.oneof(
    { weight: 8, arbitrary: fc.constant(natural) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        null,
        'text/plain',
        'application/json; charset=latin1',
        'application/x-msgpack',
        'multipart/form-data; boundary=x',
        'application/json, application/msgpack',
      ),
    },
  );

/** Header values undici will send (visible ASCII and spaces, no CR/LF). */
const headerText = fc.string({
  unit: fc.integer({ min: 0x20, max: 0x7e }).map(String.fromCharCode),
  maxLength: 60,
});

const extraHeaders: fc.Arbitrary<Record<string, string>> = fc.record(
  {
    accept: fc.constantFrom('application/json', 'application/msgpack', '*/*', 'text/html', ''),
    'x-request-id': headerText,
    'x-request-deadline-ms': fc.oneof(
      headerText,
      fc.constantFrom('60000', '0', '-5', '1e3', '99999999999'),
    ),
  },
  { requiredKeys: [] },
);

function headersOf(type: string | null, extra: Record<string, string>): Record<string, string> {
  const headers: Record<string, string> = { ...extra };
  if (type !== null) headers['content-type'] = type;
  // A deadline short enough to fire would be a 504 by design, not a fault: keep the valid ones long.
  const deadline = headers['x-request-deadline-ms'];
  if (deadline !== undefined && /^\d+$/.test(deadline.trim()) && Number(deadline) > 0) {
    headers['x-request-deadline-ms'] = '600000';
  }
  return headers;
}

/** A case for the generate route, the read-only routes or an unknown route. */
export const dataCase: fc.Arbitrary<HttpCase> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.tuple(body, extraHeaders).chain(([b, extra]) =>
      contentType(b.type).map(
        (type): HttpCase => ({
          method: 'POST',
          path: GENERATE_PATH,
          headers: headersOf(type, extra),
          body: b.bytes,
        }),
      ),
    ),
  },
  {
    weight: 1,
    arbitrary: fc
      .tuple(
        fc.constantFrom<HttpCase['method']>('GET', 'POST', 'PUT', 'DELETE'),
        fc.oneof(
          fc.constantFrom(...DATA_ROUTES, GENERATE_PATH),
          fc.webPath(),
          fc.constantFrom('/%', '/..%2f..%2fetc', `${GENERATE_PATH}?x=%ff`, '/v1/../metrics'),
        ),
        body,
      )
      .map(
        ([method, path, b]): HttpCase => ({
          method,
          path: path.startsWith('/') ? path : `/${path}`,
          headers: { 'content-type': b.type },
          body: method === 'GET' ? null : b.bytes,
        }),
      ),
  },
);

/** A control route with a random or mutated body. */
export const controlCase: fc.Arbitrary<HttpCase> = fc
  .tuple(
    fc.constantFrom(...CONTROL_PATHS),
    fc.oneof(
      anyValue,
      fc.record({ weight_dir: hostileValue }, { requiredKeys: [] }),
      fc.record(
        { request_ids: fc.oneof(hostileValue, fc.array(headerText)) },
        { requiredKeys: [] },
      ),
      fc.record(
        {
          host: fc.oneof(hostileValue, headerText),
          port: fc.oneof(hostileValue, fc.integer({ min: -1, max: 70000 })),
          timeout: hostileValue,
          rank_offset: hostileValue,
          inference_world_size: hostileValue,
          session_id: hostileValue,
        },
        { requiredKeys: [] },
      ),
      fc.record(
        {
          lora_name: fc.oneof(hostileValue, headerText),
          lora_path: fc.oneof(hostileValue, headerText),
          load_inplace: hostileValue,
        },
        { requiredKeys: [] },
      ),
    ),
    fc.boolean(),
  )
  .chain(([path, value, asMsgpack]) =>
    damage(asMsgpack ? msgpackBytes(value) : jsonBytes(value)).map(
      (bytes): HttpCase => ({
        method: 'POST',
        path,
        headers: { 'content-type': asMsgpack ? 'application/msgpack' : 'application/json' },
        body: bytes,
      }),
    ),
  );
