import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type ChatDeltaPart,
  type ChatParseOptions,
  ChatStreamParser,
  parseChatOutput,
} from '../../../src/protocol/chat-parse/chat-output.js';
import { HermesCallReader } from '../../../src/protocol/chat-parse/hermes-stream.js';
import { loadsPython } from '../../../src/protocol/chat-parse/python-json.js';

/**
 * Hermes calls streamed in argument fragments (chat-stream.ts, hermes-stream.ts): the fragments
 * of a call join to the arguments parseChatOutput gives for the whole text (json.dumps form), each
 * push only extends what went out before, and a call of some length arrives in several fragments.
 */

const OPTS: ChatParseOptions = {
  reasoning: 'qwen3',
  thinking: false,
  tools: 'hermes',
  toolChoice: 'auto',
};

function ids(): () => string {
  let n = 0;
  return () => `chatcmpl-tool-${n++}`;
}

interface Streamed {
  content: string;
  names: string[];
  /** Each call's arguments fragments, in order. */
  fragments: string[][];
  /** After each push, each call's arguments joined so far. */
  snapshots: string[][];
}

function run(deltas: readonly string[]): Streamed {
  const parser = new ChatStreamParser(OPTS, ids());
  const r: Streamed = { content: '', names: [], fragments: [], snapshots: [] };
  const joined: string[] = [];
  deltas.forEach((d, i) => {
    const parts: ChatDeltaPart[] = parser.push(d, i === deltas.length - 1);
    for (const p of parts) {
      if (p.kind === 'content') r.content += p.text;
      else if (p.kind === 'tool_call' && p.id !== undefined) {
        if (p.arguments !== '') throw new Error('a call’s first part with arguments');
        r.names[p.index] = p.name ?? '';
        r.fragments[p.index] = [];
        joined[p.index] = '';
      } else if (p.kind === 'tool_call') {
        if (!p.arguments) throw new Error('an empty arguments fragment');
        r.fragments[p.index]!.push(p.arguments ?? '');
        joined[p.index] += p.arguments ?? '';
      }
    }
    r.snapshots.push([...joined]);
  });
  return r;
}

function chars(text: string): string[] {
  return [...Array.from(text), ''];
}

/** The fragments each push of `deltas` sends for call 0. */
function perPush(deltas: readonly string[]): string[] {
  const parser = new ChatStreamParser(OPTS, ids());
  return deltas.map((d, i) =>
    parser
      .push(d, i === deltas.length - 1)
      .map((p) => (p.kind === 'tool_call' && p.id === undefined ? (p.arguments ?? '') : ''))
      .join(''),
  );
}

function wholeArgs(text: string): string[] {
  return parseChatOutput(text, OPTS, ids()).toolCalls.map((c) => c.arguments);
}

const call = (json: string): string => `<tool_call>\n${json}\n</tool_call>`;

describe('hermes arguments, streamed', () => {
  it('writes each token as json.dumps does once it can no longer change', () => {
    const text = call(
      '{"name":"f","arguments":{"x":1.50,"s":"a\\/b\\u00e9\\u001F\\"","n":[1e2,-0,true,null,-Infinity],"e":{},"l":[ ]}}',
    );
    expect(
      perPush([
        '<tool_call>\n{"name":"f","arguments":{"x":1.5',
        '0',
        ',"s":"a\\',
        '/b\\u00',
        'e9\\u001F\\"","n":[1e2',
        ',-0,t',
        'rue,null,-Infinity],"e":{},"l":[ ]}}\n</tool_call>',
        '',
      ]),
    ).toEqual([
      '{"x": ',
      '',
      '1.5, "s": "a',
      '/b',
      'é\\u001f\\"", "n": [',
      '100.0, 0, ',
      'true, null, -Infinity], "e": {}, "l": []}',
      '',
    ]);
    expect(wholeArgs(text)).toEqual([
      '{"x": 1.5, "s": "a/bé\\u001f\\"", "n": [100.0, 0, true, null, -Infinity], "e": {}, "l": []}',
    ]);
  });

  it('holds a high surrogate until the unit after it is known', () => {
    expect(
      perPush([
        '<tool_call>{"name": "f", "arguments": ["\\ud83d',
        '\\ude00 \\ud83d',
        '"]}</tool_call>',
        '',
      ]),
    ).toEqual(['["', '😀 ', '\ud83d"]', '']);
  });

  it('announces a call whose arguments come before its name once the name is known', () => {
    const text = call('{"arguments": {"q": "x", "n": 2}, "name": "search", "extra": [1]}');
    const r = run(chars(text));
    expect(r.names).toEqual(['search']);
    expect(r.fragments[0]!.join('')).toBe('{"q": "x", "n": 2}');
    expect(r.fragments[0]!.join('')).toBe(wholeArgs(text)[0]);
  });

  it('streams empty, string and scalar arguments', () => {
    for (const [json, args] of [
      ['{"name": "f", "arguments": {}}', '{}'],
      ['{"name": "f", "arguments": []}', '[]'],
      ['{"name": "f", "arguments": "a\\nb"}', '"a\\nb"'],
      ['{"name": "f", "arguments": 1e400}', 'Infinity'],
      ['{"name": "f", "arguments": null}', 'null'],
    ] as const) {
      const text = call(json);
      expect(wholeArgs(text)).toEqual([args]);
      expect(run(chars(text)).fragments[0]!.join(''), json).toBe(args);
    }
  });

  it('a repeated key: each occurrence goes out, the joined string parses to the same value', () => {
    const text = call('{"name": "f", "arguments": {"a": 1, "b": 2, "a": 3}}');
    const joined = run(chars(text)).fragments[0]!.join('');
    expect(joined).toBe('{"a": 1, "b": 2, "a": 3}');
    expect(wholeArgs(text)).toEqual(['{"a": 3, "b": 2}']);
    expect(JSON.parse(joined)).toEqual(JSON.parse(wholeArgs(text)[0]!));
    // In one delta nothing went out before the region closed: the whole-output string.
    const once = run([text, '']);
    expect(once.fragments[0]!.join('')).toBe('{"a": 3, "b": 2}');
  });

  it('a repeated "arguments" key: the first one streams (json.loads keeps the last)', () => {
    const text = call('{"name": "f", "arguments": {"a": 1}, "arguments": {"b": 2}}');
    expect(run(chars(text)).fragments[0]!.join('')).toBe('{"a": 1}');
    expect(wholeArgs(text)).toEqual(['{"b": 2}']);
  });

  it('never lets a `</tool_call>` inside a string out as arguments', () => {
    const text = '<tool_call>{"name": "f", "arguments": {"a": "x</tool_call>"}}</tool_call>';
    const r = run(chars(text));
    // The region ends inside the string: a bad first region, all content.
    expect(r.fragments[0]!.join('')).toBe('{"a": "x');
    expect(r.content).toBe(text);
  });
});

describe('the reader alone', () => {
  it('rejects what json.loads rejects, and knows the name', () => {
    const ok = new HermesCallReader();
    ok.feed(' \n{"name": "g\\u0065t", "arguments": {"a": [1, {"b": null}]}} \n');
    expect([ok.name, ok.ready, ok.failed]).toEqual(['get', true, false]);
    for (const bad of [
      '[',
      '{"name": "f",}',
      '{"name": "f" "arguments": 1}',
      '{"a": [1,]}',
      '{"a": 01}',
      '{"a": 1.}',
      '{"a": "\t"}',
      '{"a": "\\x"}',
      '{"a": "\\u12g4"}',
      '{"a": tru}',
      '{"a": 1} x',
      '{"a": -}',
    ]) {
      const r = new HermesCallReader();
      r.feed(bad.slice(0, 5));
      r.feed(bad.slice(5));
      expect(r.failed, bad).toBe(true);
    }
    const notString = new HermesCallReader();
    notString.feed('{"name": 3, "arguments": {');
    expect([notString.name, notString.ready]).toEqual([null, false]);
  });
});

// ---- Property: generated calls, written with varied whitespace and escapes. ----

const ws = fc.constantFrom('', '', ' ', '\n  ', '\t', '\r\n');

const stringBody = fc
  .array(
    fc.oneof(
      fc.string({ unit: 'grapheme', maxLength: 4 }).map((s) => JSON.stringify(s).slice(1, -1)),
      fc.constantFrom(
        'Paris',
        '\\/',
        '\\u00e9',
        '\\u00E9',
        '\\u001F',
        '\\u0000',
        '\\"',
        '\\\\',
        '\\ud83d\\ude00',
        '\\ud83d',
        '\\udc00',
        '\\n',
        '\\b',
        'é',
        '😀',
        '\\u0041',
        '<tool_',
      ),
    ),
    { maxLength: 6 },
  )
  .map((xs) => `"${xs.join('')}"`);

const numberText = fc.oneof(
  fc.integer().map(String),
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => JSON.stringify(d)),
  fc.constantFrom(
    '1.50',
    '-0',
    '-0.0',
    '0.0',
    '1e2',
    '1E-7',
    '2e+3',
    '12345678901234567890',
    '-1.5e+300',
    '1e400',
    '0.1',
  ),
);
const scalar = fc.oneof(
  stringBody,
  numberText,
  fc.constantFrom('true', 'false', 'null', 'NaN', 'Infinity', '-Infinity'),
);

const { json, object } = fc.letrec<{ json: string; array: string; object: string }>((tie) => ({
  json: fc.oneof({ maxDepth: 3, depthIdentifier: 'json' }, scalar, tie('array'), tie('object')),
  array: fc
    .array(fc.tuple(ws, tie('json'), ws), { maxLength: 4 })
    .chain((items) =>
      ws.map((w) =>
        items.length === 0 ? `[${w}]` : `[${items.map(([a, v, b]) => a + v + b).join(',')}]`,
      ),
    ),
  object: fc
    .uniqueArray(fc.tuple(ws, stringBody, ws, ws, tie('json'), ws), {
      maxLength: 4,
      // Distinct keys as json.loads reads them: a repeated one cannot stream exactly.
      selector: (t) => JSON.parse(t[1]) as string,
    })
    .chain((members) =>
      ws.map((w) =>
        members.length === 0
          ? `{${w}}`
          : `{${members.map(([a, k, b, c, v, d]) => `${a}${k}${b}:${c}${v}${d}`).join(',')}}`,
      ),
    ),
}));

/** A region with its members in some order, maybe an extra one. */
const region = fc
  .tuple(
    fc.oneof({ weight: 3, arbitrary: object }, { weight: 1, arbitrary: json }),
    fc.constantFrom('get_weather', 'search', 'f\\u00e9'),
    fc.array(ws, { minLength: 8, maxLength: 8 }),
    fc.constantFrom('name-first', 'args-first', 'extra-after', 'extra-before'),
  )
  .map(([args, name, w, order]) => {
    const nameMember = `${w[0]}"name"${w[1]}:${w[2]}"${name}"${w[3]}`;
    const argsMember = `${w[4]}"arguments"${w[5]}:${w[6]}${args}${w[7]}`;
    const extra = `${w[3]}"id"${w[2]}:${w[1]}[1, "x"]${w[0]}`;
    const members =
      order === 'name-first'
        ? [nameMember, argsMember]
        : order === 'args-first'
          ? [argsMember, nameMember]
          : order === 'extra-after'
            ? [nameMember, argsMember, extra]
            : [extra, nameMember, argsMember];
    return { nameFirst: order !== 'args-first', body: `${w[0]}{${members.join(',')}}${w[7]}` };
  });

/** Cut into deltas of 1 to 3 code points, the last one final and empty. */
function smallDeltas(text: string, sizes: readonly number[]): string[] {
  const cps = Array.from(text);
  const out: string[] = [];
  let at = 0;
  for (let k = 0; at < cps.length; k++) {
    const n = sizes.length === 0 ? 1 : (sizes[k % sizes.length] as number);
    out.push(cps.slice(at, at + n).join(''));
    at += n;
  }
  out.push('');
  return out;
}

describe('any hermes call streamed in small deltas', () => {
  it('joins to the whole-output arguments, only ever extends them, and comes in fragments', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(region, fc.boolean()), { minLength: 1, maxLength: 2 }),
        fc.array(fc.integer({ min: 1, max: 3 }), { maxLength: 20 }),
        (regions, sizes) => {
          const text = regions
            .map(([r, close]) => `<tool_call>${r.body}${close ? '</tool_call>' : ''}`)
            // Only the last region may be left open.
            .map((s, i, all) => (i < all.length - 1 && !s.endsWith('>') ? `${s}</tool_call>` : s))
            .join('\n');
          const whole = wholeArgs(text);
          expect(whole.length).toBe(regions.length);
          const r = run(smallDeltas(text, sizes));
          expect(r.fragments.map((f) => f.join(''))).toEqual(whole);
          const retracted = r.snapshots.find((snap) =>
            snap.some((sofar, i) => !whole[i]!.startsWith(sofar)),
          );
          expect(retracted).toBeUndefined();
          whole.forEach((args, i) => {
            // A container or a string of some length, after the name: its opening and its end
            // come in different deltas, so there are at least two fragments.
            if (regions[i]![0].nameFirst && args.length >= 10 && '{["'.includes(args[0]!)) {
              expect(r.fragments[i]!.length, args).toBeGreaterThan(1);
            }
            // Never half a surrogate pair in one fragment and its other half in the next.
            const frags = r.fragments[i]!;
            for (let k = 1; k < frags.length; k++) {
              const last = frags[k - 1]!.charCodeAt(frags[k - 1]!.length - 1);
              const next = frags[k]!.charCodeAt(0);
              if (last >= 0xd800 && last <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
                expect.fail(`a surrogate pair across fragments: ${JSON.stringify(frags)}`);
              }
            }
          });
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe('the reader on broken calls', () => {
  it('is whole exactly where json.loads gives an object, and knows its name', () => {
    const piece = fc.constantFrom(
      '{',
      '}',
      '[',
      ']',
      ',',
      ':',
      ' ',
      '"',
      '\\',
      '1',
      '-',
      '.',
      'e',
      'x',
      'nul',
      '\t',
      '\u001f',
    );
    fc.assert(
      fc.property(
        region,
        fc.constantFrom('none', 'insert', 'delete', 'cut'),
        fc.nat(),
        piece,
        fc.nat(40),
        (reg, how, where, inserted, chunk) => {
          let text = reg.body;
          const at = where % (text.length + 1);
          if (how === 'insert') text = text.slice(0, at) + inserted + text.slice(at);
          else if (how === 'delete') text = text.slice(0, at) + text.slice(at + 1);
          else if (how === 'cut') text = text.slice(0, at);
          const r = new HermesCallReader();
          for (let i = 0; i < text.length; i += chunk + 1) r.feed(text.slice(i, i + chunk + 1));
          const obj = loadsPython(text);
          expect(r.complete, text).toBe(obj instanceof Map);
          if (r.failed) expect(obj).not.toBeInstanceOf(Map);
          if (obj instanceof Map && typeof obj.get('name') === 'string') {
            expect(r.name).toBe(obj.get('name'));
          }
        },
      ),
      { numRuns: 1000 },
    );
  });
});
