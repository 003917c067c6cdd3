/**
 * The engine's step writer against a real ring: every output of a step reaches its API server's
 * output ring, in order and intact, including a step too large for one record (it is split), and
 * outputs of different servers land in their own rings.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { StepBatchWriter } from '../../src/engine/step-batch-writer.js';
import { StepOutputs } from '../../src/engine/step-outputs.js';
import { outputRingConsumer, outputRingProducer, type Region } from '../../src/shm/region.js';
import { StepColumn, StepRecordView } from '../../src/wire/messages.js';
import { FinishReason } from '../../src/wire/types.js';
import { testRegion, unlinkTestRegions } from './helpers.js';

const LAYERS = 3;
const TOPK = 2;
let region: Region | null = null;

afterEach(unlinkTestRegions);

function outputs(): StepOutputs {
  const out = new StepOutputs(8);
  out.shapeRouting(LAYERS, TOPK, 128);
  return out;
}

function fill(out: StepOutputs, rows: number, masksPerRow: number, servers: number): void {
  for (let i = 0; i < rows; i++) {
    const j = out.addRow(i % servers, i, 1);
    out.token[j] = 1000 + i;
    out.logprob[j] = -i / 8;
    out.finish[j] = i === rows - 1 ? FinishReason.Length : FinishReason.None;
    const at = out.reserveMask(masksPerRow);
    for (let m = 0; m < masksPerRow; m++) out.maskIds[at + m] = i * 10_000 + m;
    out.maskStart[j] = at;
    out.maskCount[j] = masksPerRow;
    out.maskLength += masksPerRow;
    const r = out.reserveRoutingRows(1);
    for (let e = 0; e < LAYERS * TOPK; e++) out.routing[r + e] = (i + e) % 128;
    out.routingStart[j] = out.routingRowCount;
    out.routingRows[j] = 1;
    out.routingFirstPos[j] = 40 + i;
    out.routingRowCount += 1;
  }
}

/** Reads every record from server k's ring into flat arrays. */
function drain(k: number) {
  const consumer = outputRingConsumer(region!, k);
  const view = new StepRecordView();
  const got = {
    records: 0,
    slots: [] as number[],
    tokens: [] as number[],
    masks: [] as number[],
    routing: [] as number[],
  };
  while (consumer.next()) {
    got.records++;
    const rec = view.attach(consumer, consumer.offset);
    let mask = rec.maskBase;
    let routing = rec.routingByteOffset;
    for (let j = 0; j < rec.count; j++) {
      got.slots.push(consumer.i32[rec.at(StepColumn.Slot, j)]!);
      got.tokens.push(consumer.i32[rec.at(StepColumn.Token, j)]!);
      const n = consumer.i32[rec.at(StepColumn.MaskCount, j)]!;
      for (let m = 0; m < n; m++) got.masks.push(consumer.i32[mask + m]!);
      mask += n;
      const ids = consumer.i32[rec.at(StepColumn.RoutingRows, j)]! * rec.layers * rec.topk;
      for (let e = 0; e < ids; e++) got.routing.push(consumer.bytes[routing + e]!);
      routing += ids;
    }
  }
  consumer.release();
  return got;
}

function setup(servers: number, outputRingBytes: number) {
  region = testRegion({ apiServerCount: servers, requestRingBytes: 4096, outputRingBytes });
  const producers = Array.from({ length: servers }, (_, k) => outputRingProducer(region!, k));
  const failures: string[] = [];
  const sink = {
    producer: (k: number) => producers[k] ?? null,
    slotGen: () => 7,
    serverGone: (k: number, e: Error) => failures.push(`${k}: ${e.message}`),
  };
  return { sink, failures };
}

describe('StepBatchWriter', () => {
  it('splits a step larger than a quarter of the ring into several records, losing nothing', () => {
    const { sink, failures } = setup(1, 64 * 1024);
    const writer = new StepBatchWriter(1, LAYERS, TOPK, 1);
    // 16 x 500 mask ids x 4 B = 32 KB: half the ring, twice the per-record budget.
    const first = outputs();
    fill(first, 16, 500, 1);
    writer.write(first, sink, 0, 0);
    const got = drain(0);
    expect(failures).toEqual([]);
    expect(got.records).toBeGreaterThan(1);
    expect(got.slots).toEqual(Array.from({ length: 16 }, (_, i) => i));
    expect(got.tokens).toEqual(Array.from({ length: 16 }, (_, i) => 1000 + i));
    expect(got.masks).toEqual(Array.from(first.maskIds.subarray(0, first.maskLength)));
    expect(got.routing).toEqual(Array.from(first.routing.subarray(0, 16 * LAYERS * TOPK)));
  });

  it('writes each server its own outputs, in order', () => {
    const { sink, failures } = setup(3, 1 << 20);
    const out = outputs();
    fill(out, 30, 3, 3);
    new StepBatchWriter(3, LAYERS, TOPK, 1).write(out, sink, 0, 0);
    expect(failures).toEqual([]);
    for (let k = 0; k < 3; k++) {
      const got = drain(k);
      expect(got.records).toBe(1);
      expect(got.slots).toEqual(Array.from({ length: 10 }, (_, i) => i * 3 + k));
      expect(got.masks.length).toBe(30);
    }
  });

  it('reports a server whose consumer is gone instead of waiting forever', () => {
    const { sink, failures } = setup(1, 4096);
    const consumer = outputRingConsumer(region!, 0);
    consumer.detach();
    const out = outputs();
    fill(out, 64, 100, 1); // far more than the 4 KiB ring holds
    new StepBatchWriter(1, LAYERS, TOPK, 1).write(out, sink, 0, 0);
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatch(/^0: /);
  });
});
