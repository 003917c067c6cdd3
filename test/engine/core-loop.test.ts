/**
 * The core loop over a real region, in this process, with the test as two API servers: one never
 * drains its output ring (a stopped frontend), the other does. The stopped one is held, not
 * failed: the other's requests all complete, the loop sleeps instead of spinning, and once the
 * ring is drained every held request completes with the tokens an unheld run gives. A held server
 * whose consumer is gone is detected and its requests dropped.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { CoreLoop } from '../../src/engine/core-loop.js';
import { outputRingOffset, RING_HEAD, RING_TAIL } from '../../src/shm/layout.js';
import { outputRingConsumer, type Region, requestRingProducer } from '../../src/shm/region.js';
import type { RingConsumer } from '../../src/shm/ring.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import {
  ABORT_BYTES,
  addRecordBytes,
  RecordType,
  StepColumn,
  StepRecordView,
  writeAbort,
  writeAdd,
} from '../../src/wire/messages.js';
import { type EngineRequest, FinishReason } from '../../src/wire/types.js';
import { key, prompt, request, runAll, tinyConfig } from '../sim/helpers.js';
import { until } from '../until.js';
import { testRegion, unlinkTestRegions } from './helpers.js';

const OUTPUT_RING = 1 << 16;
const SLOTS = 4;

interface Running {
  region: Region;
  engine: SimEngine;
  loop: CoreLoop;
  done: Promise<void>;
  consumers: RingConsumer[];
  gone: number[];
  /** engine.step calls so far. */
  steps(): number;
}

let running: Running | null = null;

afterEach(async () => {
  if (running === null) return;
  running.loop.stop();
  await running.done;
  unlinkTestRegions();
  running = null;
});

function start(): Running {
  const region = testRegion({
    apiServerCount: 2,
    requestRingBytes: 1 << 16,
    outputRingBytes: OUTPUT_RING,
  });
  const engine = new SimEngine(tinyConfig());
  let steps = 0;
  const step = engine.step.bind(engine);
  engine.step = (out, room) => {
    steps++;
    return step(out, room);
  };
  const gone: number[] = [];
  const loop = new CoreLoop(region, engine, { serverGone: (k) => gone.push(k) });
  const consumers = [outputRingConsumer(region, 0), outputRingConsumer(region, 1)];
  running = { region, engine, loop, done: loop.run(), consumers, gone, steps: () => steps };
  return running;
}

/**
 * Long requests with masks (50 ids: top_k 50, top_p 1) and routing rows: ~260 bytes of output ring
 * per token, so four of them fill a 64 KiB ring long before they finish.
 */
function requests(server: number): EngineRequest[] {
  return Array.from({ length: SLOTS }, (_, slot) =>
    request(
      slot,
      { seed: 100 * server + slot, maxTokens: 200 + 10 * slot, ignoreEos: true, topK: 50, topP: 1 },
      { server, promptTokenIds: prompt(30, server * SLOTS + slot) },
    ),
  );
}

function send(r: Running, req: EngineRequest): void {
  const producer = requestRingProducer(r.region, req.server);
  const fields = {
    slot: req.slot,
    slotGen: 1,
    promptTokenIds: req.promptTokenIds,
    params: req.params,
    priority: req.priority,
    cacheSalt: null,
    arrivalTimeMs: req.arrivalTimeMs,
  };
  const at = producer.reserve(RecordType.Add, addRecordBytes(fields), 1_000);
  writeAdd(producer, at, fields);
  producer.commit();
}

function sendAbort(r: Running, server: number, slot: number): void {
  const producer = requestRingProducer(r.region, server);
  writeAbort(producer, producer.reserve(RecordType.Abort, ABORT_BYTES, 1_000), slot);
  producer.commit();
}

interface Answer {
  tokens: number[];
  finish: number;
}

/** Reads everything in server k's output ring into per-slot answers. */
function drain(r: Running, k: number, into: Map<number, Answer>): void {
  const consumer = r.consumers[k]!;
  const view = new StepRecordView();
  while (consumer.next()) {
    const rec = view.attach(consumer, consumer.offset);
    for (let j = 0; j < rec.count; j++) {
      const slot = consumer.i32[rec.at(StepColumn.Slot, j)]!;
      const a = into.get(slot) ?? { tokens: [], finish: FinishReason.None };
      const token = consumer.i32[rec.at(StepColumn.Token, j)]!;
      if (token >= 0) a.tokens.push(token);
      a.finish = consumer.i32[rec.at(StepColumn.Finish, j)]!;
      into.set(slot, a);
    }
  }
  consumer.release();
}

function ringUsed(r: Running, k: number): number {
  const ring = outputRingOffset(r.region.params, k);
  const i32 = r.region.i32;
  return (
    (Atomics.load(i32, (ring + RING_HEAD) >> 2) - Atomics.load(i32, (ring + RING_TAIL) >> 2)) | 0
  );
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The loop runs in this process: polled every 5 ms, for at most 20 s. */
const SOON = { timeoutMs: 20_000, intervalMs: 5 };
const finished = (answers: Map<number, Answer>): number =>
  [...answers.values()].filter((a) => a.finish !== FinishReason.None).length;

describe('CoreLoop with an API server that does not drain its output ring', () => {
  it('holds it while the other completes, sleeps instead of spinning, and loses nothing', async () => {
    const r = start();
    const stopped = new Map<number, Answer>();
    const served = new Map<number, Answer>();
    for (const req of [...requests(0), ...requests(1)]) send(r, req);
    await until(
      () => {
        drain(r, 1, served);
        return finished(served);
      },
      (n) => n === SLOTS,
      { ...SOON, what: 'server 1 to complete' },
    );
    // Server 0's ring filled up to the hold and stayed there; nothing of it was dropped.
    expect(ringUsed(r, 0)).toBeGreaterThan(OUTPUT_RING / 2);
    expect(r.gone).toEqual([]);
    expect(r.engine.stats().running).toBe(SLOTS);
    // Everything with work is held: the loop waits on the doorbell between measurements (a
    // spinning loop would step thousands of times in this window).
    const before = r.steps();
    await sleep(200);
    expect(r.steps() - before).toBeLessThan(300);
    // A request of the held server is aborted meanwhile: its confirmation waits too.
    sendAbort(r, 0, 3);
    await sleep(20);
    await until(
      () => {
        drain(r, 0, stopped);
        return finished(stopped);
      },
      (n) => n === SLOTS,
      { ...SOON, what: 'server 0 to complete once drained' },
    );
    const expected = runAll(tinyConfig(), [...requests(0), ...requests(1)]);
    for (let slot = 0; slot < SLOTS; slot++) {
      expect(served.get(slot)?.tokens).toEqual(expected.get(key(1, slot))?.tokens);
      expect(served.get(slot)?.finish).toBe(FinishReason.Length);
    }
    for (let slot = 0; slot < SLOTS - 1; slot++) {
      expect(stopped.get(slot)?.tokens).toEqual(expected.get(key(0, slot))?.tokens);
      expect(stopped.get(slot)?.finish).toBe(FinishReason.Length);
    }
    expect(stopped.get(SLOTS - 1)?.finish).toBe(FinishReason.Abort);
    expect(r.engine.numFreeBlocks).toBe(r.engine.config.numGpuBlocks);
  });

  it('drops the requests of a held server whose consumer is gone, and goes on', async () => {
    const r = start();
    for (const req of requests(0)) send(r, req);
    await until(
      () => ringUsed(r, 0),
      (used) => used > OUTPUT_RING / 2,
      { ...SOON, what: 'server 0 to be held' },
    );
    await sleep(20);
    expect(r.gone).toEqual([]);
    r.consumers[0]!.detach();
    await until(
      () => r.gone.length,
      (n) => n > 0,
      { ...SOON, what: 'server 0 to be found gone' },
    );
    expect(r.gone).toEqual([0]);
    await until(
      () => r.engine.stats().running,
      (n) => n === 0,
      { ...SOON, what: 'its blocks to be freed' },
    );
    expect(r.engine.numFreeBlocks).toBe(r.engine.config.numGpuBlocks);
    // The other server is served as before.
    const served = new Map<number, Answer>();
    for (const req of requests(1)) send(r, req);
    await until(
      () => {
        drain(r, 1, served);
        return finished(served);
      },
      (n) => n === SLOTS,
      { ...SOON, what: 'server 1 to complete' },
    );
  });
});
