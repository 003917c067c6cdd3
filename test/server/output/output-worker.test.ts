import { readdirSync, readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeGenerateBody } from '../../../src/client/decode.js';
import { SseParser, StreamAccumulator } from '../../../src/client/stream.js';
import type { RingserveError } from '../../../src/errors.js';
import { AccumulatorTable, SlotState } from '../../../src/server/cross-thread/accumulators.js';
import {
  createArenaBuffer,
  reserveArenaBuffer,
} from '../../../src/server/cross-thread/block-arena.js';
import {
  RS_ERR_OUTPUT_BAD_STEP,
  RS_ERR_OUTPUT_WORKER_FAILED,
} from '../../../src/server/cross-thread/errors.js';
import type { OutputBatch } from '../../../src/server/cross-thread/messages.js';
import { ResponsePacker } from '../../../src/server/cross-thread/response-packer.js';
import { ResponseFormCode, SlotMetaTable } from '../../../src/server/cross-thread/slot-meta.js';
import { OutputWorker } from '../../../src/server/main/output-worker-handle.js';
import { outputRingOffset } from '../../../src/shm/layout.js';
import {
  createRegion,
  outputRingProducer,
  type Region,
  unlinkRegion,
} from '../../../src/shm/region.js';
import type { RingProducer } from '../../../src/shm/ring.js';
import type { ThreadPriority } from '../../../src/shm/thread-priority.js';
import { RecordType } from '../../../src/wire/messages.js';
import { uniqueRegionName, until } from '../../shm/helpers.js';
import { TINY_BYTES, tiny, tinyId } from '../tiny-tokens.js';
import { metaFields } from './harness.js';
import { type StepRow, stepBytes, TINY_GEOMETRY, writeStep } from './step-records.js';

interface Rig {
  region: Region;
  producer: RingProducer;
  meta: SlotMetaTable;
  acc: AccumulatorTable;
  arena: SharedArrayBuffer;
  worker: OutputWorker;
  batches: OutputBatch[];
  failures: string[];
  /** Each failure's error as onFailure got it, and whether it was fatal. */
  errors: { error: RingserveError; fatal: boolean }[];
  send(rows: StepRow[]): void;
}

const regions: string[] = [];
let rig: Rig | undefined;

afterEach(async () => {
  await rig?.worker.stop(5_000).catch(() => {});
  rig = undefined;
  for (const name of regions.splice(0)) unlinkRegion(name);
});

async function startRig(
  opts: { arena?: SharedArrayBuffer; priority?: ThreadPriority } = {},
): Promise<Rig> {
  const name = uniqueRegionName('output');
  regions.push(name);
  // A 16 KiB output ring: the tests' records wrap it many times.
  const region = createRegion(name, { requestRingBytes: 4096, outputRingBytes: 16 * 1024 });
  const producer = outputRingProducer(region, 0);
  const meta = new SlotMetaTable(16);
  const acc = new AccumulatorTable(16);
  const arena = opts.arena ?? createArenaBuffer(64 * 1024, 64 * 1024 * 1024);
  const batches: OutputBatch[] = [];
  const failures: string[] = [];
  const errors: Rig['errors'] = [];
  const worker = await OutputWorker.start({
    ringSab: region.sab,
    ringOffset: outputRingOffset(region.params, 0),
    ringCapacity: region.params.outputRingBytes,
    meta,
    acc,
    arenaSab: arena,
    serverIndex: 0,
    // The served tokenizer's table, shared with the thread as an API server shares it.
    tokenBytes: TINY_BYTES.shared,
    specialTokenIds: tiny.eosTokenIds,
    onBatch: (b) => batches.push(b),
    onFailure: (error, fatal) => {
      failures.push(error.message);
      errors.push({ error, fatal });
    },
    waitMs: 20,
    ...(opts.priority === undefined ? {} : { priority: opts.priority }),
  });
  const send = (rows: StepRow[]): void => {
    const at = producer.reserve(RecordType.Step, stepBytes(rows, TINY_GEOMETRY), 5_000);
    writeStep(producer, at, rows, TINY_GEOMETRY);
    producer.commit();
  };
  rig = { region, producer, meta, acc, arena, worker, batches, failures, errors, send };
  return rig;
}

function listed(batches: OutputBatch[], key: 'finished' | 'released' | 'stopped'): number[] {
  return batches.flatMap((b) => Array.from(b[key]));
}

describe('output worker thread fed by a real ring', () => {
  it('accumulates a request from many records, reports it finished, and frees it on request', async () => {
    const r = await startRig();
    r.meta.write(3, 41, metaFields({ promptLen: 2 }));
    const tokens: number[] = [];
    r.send([{ slot: 3, gen: 41, routingFirstPos: 0, routing: [1, 2, 3, 4, 5, 6, 7, 8] }]);
    for (let i = 0; i < 2000; i++) {
      tokens.push(i % 997);
      r.send([
        {
          slot: 3,
          gen: 41,
          token: i % 997,
          logprob: -1,
          maskIds: [i % 997],
          routingFirstPos: 2 + i - 1,
          routing: i === 0 ? [] : [9, 9, 9, 9],
          finish: i === 1999 ? 2 : 0,
        },
      ]);
    }
    await until(() => listed(r.batches, 'finished').includes(3), 10_000, 'the finished batch');
    expect(listed(r.batches, 'released')).toEqual([3]);
    expect(r.failures).toEqual([]);
    const body = new ResponsePacker(r.meta.sab, r.acc.sab, r.arena, TINY_BYTES).pack({
      slots: [3],
      form: 'packed',
      requestId: 'w',
      model: 'sim-tiny',
      created: 1,
    });
    const choice = decodeGenerateBody(body, 'application/json').choices[0]!;
    expect(Array.from(choice.tokenIds)).toEqual(tokens);
    expect(choice.routedExperts!.shape).toEqual([2001, 2, 2]);
    r.worker.free(3);
    await until(() => r.acc.state(3) === SlotState.Idle, 5_000, 'the free to be applied');
    expect(r.acc.columnClass(3, 0)).toBe(-1);
  });

  it('streams SSE deltas that decode to the same arrays as the packed response, then [DONE]', async () => {
    const r = await startRig();
    r.meta.write(
      1,
      7,
      metaFields({ stream: true, promptLen: 2, includeUsage: true, form: ResponseFormCode.Packed }),
    );
    r.worker.stream(1, 7, 'abc', 'sim-tiny', 1_764_400_000);
    r.send([{ slot: 1, gen: 7, routingFirstPos: 0, routing: [1, 2, 3, 4] }]);
    for (let i = 0; i < 50; i++) {
      r.send([
        {
          slot: 1,
          gen: 7,
          token: 300 + i,
          logprob: -0.5,
          maskIds: [300 + i, 1],
          routingFirstPos: 1 + i,
          routing: [5, 6, 7, 8],
          finish: i === 49 ? 1 : 0,
          stopTokenId: i === 49 ? 349 : -1,
        },
      ]);
      if (i % 10 === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await until(
      () => r.batches.some((b) => b.streams !== null && Array.from(b.streams.done).includes(1)),
      10_000,
      'the last stream event',
    );
    const parser = new SseParser();
    const acc = new StreamAccumulator();
    let done = 0;
    let chunks = 0;
    for (const b of r.batches) {
      if (b.streams === null) continue;
      const bytes = new Uint8Array(b.streams.bytes);
      for (let i = 0; i < b.streams.slots.length; i++) {
        expect([b.streams.slots[i], b.streams.generations[i]]).toEqual([1, 7]);
        const from = i === 0 ? 0 : b.streams.ends[i - 1]!;
        for (const e of parser.push(bytes.subarray(from, b.streams.ends[i]!))) {
          if (e.kind === 'done') done++;
          else {
            acc.push(e.json);
            chunks++;
          }
        }
      }
    }
    expect(done).toBe(1);
    expect(parser.leftover).toBe('');
    // Coalesced: fewer events than tokens, plus the usage event.
    expect(chunks).toBeLessThan(51);
    const streamed = acc.result();
    expect(streamed.requestId).toBe('generate-tokens-abc');
    expect(streamed.usage?.completionTokens).toBe(50);
    const whole = decodeGenerateBody(
      new ResponsePacker(r.meta.sab, r.acc.sab, r.arena, TINY_BYTES).pack({
        slots: [1],
        form: 'packed',
        requestId: 'abc',
        model: 'sim-tiny',
        created: 1,
      }),
      'application/json',
    ).choices[0]!;
    const s = streamed.choices[0]!;
    expect(s.finishReason).toBe('stop');
    expect(s.stopReason).toBe(349);
    expect(Array.from(s.tokenIds)).toEqual(Array.from(whole.tokenIds));
    expect(Array.from(s.logprobs!)).toEqual(Array.from(whole.logprobs!));
    expect(Array.from(s.mask!.ids)).toEqual(Array.from(whole.mask!.ids));
    expect(s.routedExperts!.start).toBe(whole.routedExperts!.start);
    expect(Array.from(s.routedExperts!.data)).toEqual(Array.from(whole.routedExperts!.data));
  });

  it('finishes a stop-string match itself and asks for the engine abort; ignores stale generations', async () => {
    const r = await startRig();
    r.meta.write(0, 5, metaFields({ stop: ['!!'], promptLen: 1, routedExperts: false }));
    const bang = tinyId('!');
    r.send([
      { slot: 0, gen: 4, token: bang },
      { slot: 0, gen: 5, token: bang },
    ]);
    r.send([{ slot: 0, gen: 5, token: bang }]);
    r.send([{ slot: 0, gen: 5, token: tinyId('"') }]);
    await until(() => listed(r.batches, 'stopped').includes(0), 5_000, 'the stop-string finish');
    expect(listed(r.batches, 'finished')).toEqual([0]);
    expect(listed(r.batches, 'released')).toEqual([]);
    expect(r.acc.completionTokens(0)).toBe(2);
    r.send([{ slot: 0, gen: 5, finish: 3 }]);
    await until(() => listed(r.batches, 'released').includes(0), 5_000, 'the release');
  });

  it("reports a malformed STEP record with the scatter's coded error, and goes on", async () => {
    const r = await startRig();
    // A record that declares 1000 rows in 512 bytes.
    const at = r.producer.reserve(RecordType.Step, 512, 5_000);
    r.producer.i32.fill(0, at >> 2, (at + 512) >> 2);
    r.producer.i32[at >> 2] = 1000;
    r.producer.i32[(at >> 2) + 5] = 1;
    r.producer.commit();
    await until(() => r.errors.length > 0, 5_000, 'the error message');
    const [{ error, fatal }] = r.errors as [Rig['errors'][number]];
    expect(fatal).toBe(false);
    expect(error).toBeInstanceOf(RS_ERR_OUTPUT_WORKER_FAILED);
    expect(error.message).toMatch(/^the output worker failed: RS_ERR_OUTPUT_BAD_STEP: /);
    // The scatter's error, rebuilt on this thread from its plain data (errorFromData).
    expect(error.cause).toBeInstanceOf(RS_ERR_OUTPUT_BAD_STEP);
    expect(error.cause).toMatchObject({ code: 'RS_ERR_OUTPUT_BAD_STEP', statusCode: 500 });
    r.meta.write(1, 3, metaFields({ promptLen: 1, routedExperts: false }));
    r.send([{ slot: 1, gen: 3, token: 5, finish: 2 }]);
    await until(() => listed(r.batches, 'finished').includes(1), 5_000, 'a later request');
  });

  it('after engine-down, running requests are dropped; a request started later is not', async () => {
    const r = await startRig();
    r.meta.write(2, 9, metaFields());
    r.send([{ slot: 2, gen: 9, token: 1, maskIds: [1] }]);
    await until(() => r.acc.state(2) === SlotState.Running, 5_000, 'the request to start');
    r.worker.engineDown();
    r.meta.write(4, 10, metaFields());
    r.send([{ slot: 4, gen: 10, token: 2 }]);
    await until(() => r.acc.state(2) === SlotState.Idle, 5_000, 'the drop');
    r.send([{ slot: 4, gen: 10, token: 3, finish: 2 }]);
    await until(
      () => listed(r.batches, 'finished').includes(4),
      5_000,
      'the later request to finish',
    );
    expect(r.acc.completionTokens(4)).toBe(2);
    expect(listed(r.batches, 'finished')).not.toContain(2);
  });

  it('runs on a reserved arena, in a thread below the main thread', async () => {
    const r = await startRig({
      arena: reserveArenaBuffer(64 * 1024 * 1024),
      priority: { nice: 3, policy: 'batch' },
    });
    // The kernel's view of this process's threads: (nice, policy) from /proc stat fields 19, 41.
    const view = (tid: string) => {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return { nice: Number(fields[19 - 3]), policy: Number(fields[41 - 3]) };
    };
    const main = view(String(process.pid));
    const threads = readdirSync('/proc/self/task').map(view);
    expect(threads.filter((t) => t.policy === 3)).toEqual([
      { nice: Math.min(19, main.nice + 3), policy: 3 },
    ]);
    r.meta.write(1, 7, metaFields({ promptLen: 1, routedExperts: false }));
    for (let i = 0; i < 300; i++) {
      r.send([{ slot: 1, gen: 7, token: i, logprob: -1, maskIds: [i], finish: i === 299 ? 2 : 0 }]);
    }
    await until(() => listed(r.batches, 'finished').includes(1), 10_000, 'the finished batch');
    const body = new ResponsePacker(r.meta.sab, r.acc.sab, r.arena, TINY_BYTES).pack({
      slots: [1],
      form: 'msgpack',
      requestId: 'r',
      model: 'sim-tiny',
      created: 1,
    });
    const choice = decodeGenerateBody(body, 'application/msgpack').choices[0]!;
    expect(Array.from(choice.tokenIds)).toEqual(Array.from({ length: 300 }, (_, i) => i));
    expect(r.failures).toEqual([]);
  });

  it('stops within its bound and detaches from the ring', async () => {
    const r = await startRig();
    await r.worker.stop(2_000);
    expect(r.producer.peerAlive()).toBe(false);
    rig = undefined;
  });
});
