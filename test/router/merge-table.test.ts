/**
 * A merge thread's table (merge-table.ts) without a thread: it holds a request from its prefill
 * answer to its answer, forgets it on a failure or a drop, and answers a request it does not hold
 * (its thread was replaced) with RS_ERR_ROUTER_MERGE_WORKER.
 */
import { describe, expect, it } from 'vitest';
import { GenerateResponseEncoder } from '../../src/protocol/generate-response.js';
import { KvOutcome, type MergeSpec, type MergeTask } from '../../src/router/merge-messages.js';
import { MergeTable } from '../../src/router/merge-table.js';
import { decodeColumns, mainThreadAnswer, PROMPT, prefillColumns } from './pd-fakes.js';

const encoder = new GenerateResponseEncoder();
const c = { tokens: 12 };
const MSGPACK = 'application/msgpack';

function spec(requestId: string): MergeSpec {
  return {
    requestId,
    form: 'packed',
    stream: false,
    clientKv: null,
    promptLogprobsK: -1,
    promptTokenIds: null,
  };
}

function task(op: MergeTask['op'], id: number, bytes: Uint8Array | null, s: MergeSpec | null) {
  return { op, id, bytes, contentType: MSGPACK, upstream: 'http://x', spec: s } as MergeTask;
}

describe('MergeTable', () => {
  it('holds a request from its prefill answer to its merged answer', () => {
    const table = new MergeTable();
    const p = table.run(
      task('prefill', 1, encoder.encode(prefillColumns(c), 'msgpack'), spec('a')),
    );
    expect(p.handle).toEqual(prefillColumns(c).kvTransferParams);
    expect(table.size).toBe(1);
    const m = table.run(task('merge', 1, encoder.encode(decodeColumns(c), 'msgpack'), null));
    expect(m.kv).toBe(KvOutcome.Imported);
    const body = { token_ids: PROMPT, sampling_params: {} };
    expect(Buffer.from(m.out!).equals(mainThreadAnswer(c, 'packed', 'a', body))).toBe(true);
    expect(table.size).toBe(0);
  });

  it('forgets a request whose answer does not decode (502), and one dropped', () => {
    const table = new MergeTable();
    const prefill = encoder.encode(prefillColumns(c), 'msgpack');
    table.run(task('prefill', 1, prefill, spec('a')));
    expect(() => table.run(task('merge', 1, Uint8Array.of(0xc1), null))).toThrow(
      expect.objectContaining({ code: 'RS_ERR_ROUTER_UPSTREAM', statusCode: 502 }),
    );
    table.run(task('prefill', 2, encoder.encode(prefillColumns(c), 'msgpack'), spec('b')));
    table.run(task('drop', 2, null, null));
    expect(table.size).toBe(0);
  });

  it('answers RS_ERR_ROUTER_MERGE_WORKER (500) for a request it does not hold', () => {
    const table = new MergeTable();
    const bytes = encoder.encode(decodeColumns(c), 'msgpack');
    for (const op of ['merge', 'chunk', 'end'] as const) {
      expect(() => table.run(task(op, 9, bytes, null))).toThrow(
        expect.objectContaining({ code: 'RS_ERR_ROUTER_MERGE_WORKER', statusCode: 500 }),
      );
    }
  });
});
