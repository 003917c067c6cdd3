/**
 * The engine's output budget (src/engine/output-room.ts): what one output costs, when a server is
 * held, and, against a real ring with its head anywhere, that whatever the room accepted is written
 * without waiting; a write the room did not budget fails loudly instead of waiting.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { maxOutputBytes, OutputRoom } from '../../src/engine/output-room.js';
import { StepBatchWriter } from '../../src/engine/step-batch-writer.js';
import { StepOutputs } from '../../src/engine/step-outputs.js';
import { outputRingConsumer, outputRingProducer } from '../../src/shm/region.js';
import { RECORD_HEADER_BYTES } from '../../src/shm/ring.js';
import { StepColumn, StepRecordView, stepRecordBytes } from '../../src/wire/messages.js';
import { testRegion, unlinkTestRegions } from './helpers.js';

const LAYERS = 3;
const TOPK = 2;
const ROW_IDS = LAYERS * TOPK;

afterEach(unlinkTestRegions);

function setup(outputRingBytes: number) {
  const region = testRegion({ apiServerCount: 1, requestRingBytes: 4096, outputRingBytes });
  const producer = outputRingProducer(region, 0);
  const consumer = outputRingConsumer(region, 0);
  const gone: number[] = [];
  const sink = {
    producer: () => producer,
    slotGen: () => 3,
    serverGone: (k: number) => gone.push(k),
  };
  return { producer, consumer, sink, gone };
}

/** A small deterministic generator, so a failing trial can be replayed. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function addOutput(out: StepOutputs, slot: number, maskIds: number, routingRows: number): void {
  const j = out.addRow(0, slot, 1);
  out.token[j] = slot;
  const at = out.reserveMask(maskIds);
  for (let m = 0; m < maskIds; m++) out.maskIds[at + m] = slot * 1000 + m;
  out.maskStart[j] = at;
  out.maskCount[j] = maskIds;
  out.maskLength += maskIds;
  const r = out.reserveRoutingRows(routingRows);
  for (let e = 0; e < routingRows * ROW_IDS; e++) out.routing[r + e] = (slot + e) % 128;
  out.routingStart[j] = out.routingRowCount;
  out.routingRows[j] = routingRows;
  out.routingRowCount += routingRows;
}

describe('OutputRoom', () => {
  it('bounds an output by its record share: never less than what a record of it takes', () => {
    const room = new OutputRoom(1, ROW_IDS, 1);
    for (const [n, masks, rows] of [
      [1, 0, 0],
      [1, 7, 3],
      [5, 0, 0],
      [3, 1001, 17],
      [64, 64 * 3, 64],
    ] as const) {
      const record = RECORD_HEADER_BYTES + stepRecordBytes(n, masks, rows, ROW_IDS, 1);
      // n outputs sharing masks and rows evenly (the remainder on the first).
      let bound = 0;
      for (let i = 0; i < n; i++) {
        const m = Math.floor(masks / n) + (i === 0 ? masks % n : 0);
        const r = Math.floor(rows / n) + (i === 0 ? rows % n : 0);
        bound += room.outputBytes(m, r);
      }
      expect(bound).toBeGreaterThanOrEqual(record);
    }
  });

  it('holds a server at the first output that does not fit, and refuses its later ones', () => {
    const room = new OutputRoom(2, ROW_IDS, 1);
    const c = room.outputBytes(10, 1);
    // Room for two outputs and the wrap's waste (at most what was charged, here).
    room.open(0, 4 * c, 1 << 20, 1 << 18);
    room.unlimit(1);
    expect(room.tryCharge(0, 10, 1)).toBe(true);
    expect(room.tryCharge(0, 10, 1)).toBe(true);
    expect(room.anyHeld).toBe(false);
    expect(room.tryCharge(0, 10, 1)).toBe(false);
    expect(room.isHeld(0)).toBe(true);
    expect(room.tryCharge(0, 0, 0)).toBe(false); // smaller, still refused: order is kept
    expect(room.anyHeld).toBe(true);
    expect(room.tryCharge(1, 1 << 20, 1 << 10)).toBe(true); // unlimited
    expect(room.tryCharge(-1, 0, 0)).toBe(true); // no such server: nothing to protect
    room.open(0, 4 * c, 1 << 20, 1 << 18); // the next step starts afresh
    expect(room.isHeld(0)).toBe(false);
    expect(room.tryCharge(0, 10, 1)).toBe(true);
  });

  it('caps one output at 3/8 of the ring and says how many routing rows fit under it', () => {
    const room = new OutputRoom(1, ROW_IDS, 1);
    room.open(0, 1 << 16, 1 << 16, 1 << 14);
    expect(room.outputLimit(0)).toBe(maxOutputBytes(1 << 16));
    const rows = room.routingRowsWithin(0, 100);
    expect(room.outputBytes(100, rows)).toBeLessThanOrEqual(room.outputLimit(0));
    expect(room.outputBytes(100, rows + 1)).toBeGreaterThan(room.outputLimit(0));
    expect(() => room.tryCharge(0, 0, rows + 100)).toThrow(/over its limit/);
    room.unlimit(0);
    expect(room.routingRowsWithin(0, 100)).toBe(Number.POSITIVE_INFINITY);
  });
});

describe('StepBatchWriter with an OutputRoom', () => {
  it('writes whatever the room accepted, wherever the ring head is, without waiting', () => {
    const next = rng(7);
    for (let trial = 0; trial < 60; trial++) {
      const capacity = 4096 << Math.floor(next() * 3);
      const { producer, consumer, sink, gone } = setup(capacity);
      const writer = new StepBatchWriter(1, LAYERS, TOPK, 1);
      const room = new OutputRoom(1, ROW_IDS, 1);
      // Move the ring's head somewhere and leave some of it unread.
      const filler = Math.floor(next() * capacity * 0.9);
      for (let done = 0; done < filler; ) {
        const bytes = 8 + 8 * Math.floor(next() * 40);
        if (producer.tryReserve(9, bytes) < 0) break;
        producer.commit();
        done += bytes + RECORD_HEADER_BYTES;
        if (next() < 0.7) {
          consumer.next();
          consumer.release();
        }
      }
      for (let step = 0; step < 4; step++) {
        writer.measure(room, sink);
        const out = new StepOutputs(4);
        out.shapeRouting(LAYERS, TOPK, 128);
        const wanted: number[] = [];
        for (let slot = 0; slot < 200; slot++) {
          // Mostly small outputs, some as large as one output may be.
          const masks =
            next() < 0.5 ? 0 : Math.floor(next() * (next() < 0.2 ? capacity / 10 : 200));
          const rows = next() < 0.5 ? 0 : Math.floor(next() * 60);
          if (room.outputBytes(masks, rows) > room.outputLimit(0)) continue;
          if (!room.tryCharge(0, masks, rows)) break;
          addOutput(out, slot, masks, rows);
          wanted.push(slot);
        }
        expect(() => writer.write(out, sink, 0, 0)).not.toThrow();
        // Read back what this step wrote: every output, in order.
        const view = new StepRecordView();
        const slots: number[] = [];
        while (consumer.next()) {
          if (consumer.type !== 16) continue;
          const rec = view.attach(consumer, consumer.offset);
          for (let j = 0; j < rec.count; j++) slots.push(consumer.i32[rec.at(StepColumn.Slot, j)]!);
        }
        expect(slots).toEqual(wanted);
        // Half the time the consumer does not hand the bytes back yet: the next step has less room.
        if (next() < 0.5) consumer.release();
      }
      expect(gone).toEqual([]);
      unlinkTestRegions();
    }
  });

  it('fails loudly, without waiting, when a record finds no room it was budgeted', () => {
    const { producer, sink } = setup(4096);
    while (producer.tryReserve(9, 512) >= 0) producer.commit();
    producer.commit();
    const out = new StepOutputs(4);
    out.shapeRouting(LAYERS, TOPK, 128);
    addOutput(out, 1, 100, 4);
    const writer = new StepBatchWriter(1, LAYERS, TOPK, 1);
    expect(() => writer.write(out, sink, 0, 0)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_RING_FULL', message: expect.stringMatching(/bug/) }),
    );
  });
});
