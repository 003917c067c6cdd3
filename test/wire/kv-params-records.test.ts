/**
 * kv_transfer_params on the rings (wire/messages.ts): the ADD's blob after the cache salt, bounded
 * at 64 KiB; a STEP output's kv area written by the engine's step writer (also when the step is
 * split over records, and when the bridge's backlog copies rows) and gathered by the output
 * worker's scatter for the main thread; a record whose kv column runs past its area is refused.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { StepBatchWriter } from '../../src/engine/step-batch-writer.js';
import { StepOutputs } from '../../src/engine/step-outputs.js';
import { copyRow } from '../../src/engine/vllm/bridge-rows.js';
import { outputRingConsumer, outputRingProducer } from '../../src/shm/region.js';
import {
  type AddFields,
  addRecordBytes,
  MAX_KV_PARAMS_BYTES,
  RecordType,
  readAdd,
  regionViews,
  StepColumn,
  StepRecordView,
  writeAdd,
} from '../../src/wire/messages.js';
import { FinishReason, type SamplingParams } from '../../src/wire/types.js';
import { testRegion, unlinkTestRegions } from '../engine/helpers.js';
import { makeHarness, metaFields } from '../server/output/harness.js';
import { writeStep } from '../server/output/step-records.js';

afterEach(unlinkTestRegions);

const params: SamplingParams = {
  temperature: 1,
  topP: 1,
  topK: 0,
  minP: 0,
  seed: 3,
  maxTokens: 4,
  minTokens: 0,
  stopTokenIds: new Int32Array([9, 10]),
  ignoreEos: false,
  presencePenalty: 0,
  frequencyPenalty: 0,
  repetitionPenalty: 1,
  logprobs: false,
  topLogprobs: 0,
  promptLogprobs: -1,
  returnSamplingMask: false,
  returnRoutedExperts: false,
  routedExpertsPromptStart: 0,
};

function add(kvParams: Uint8Array | null): AddFields {
  return {
    slot: 4,
    slotGen: 77,
    promptTokenIds: new Int32Array([1, 2, 3]),
    params,
    priority: 0,
    cacheSalt: Buffer.from('salty'),
    arrivalTimeMs: 5,
    kvParams,
  };
}

const KV = Uint8Array.from([0x81, 0xa1, 0x61, 0x07]); // {"a": 7}

describe('ADD kv_transfer_params', () => {
  it('travel after the cache salt, byte for byte; none reads back as null', () => {
    const v = regionViews(new SharedArrayBuffer(4096));
    const fields = add(KV);
    const bytes = addRecordBytes(fields);
    writeAdd(v, 64, fields);
    const read = readAdd(v, 64, bytes, 0)!;
    expect(Array.from(read.kvParams!)).toEqual(Array.from(KV));
    expect(read.cacheSalt).toBe('salty');
    expect(Array.from(read.params.stopTokenIds)).toEqual([9, 10]);
    writeAdd(v, 64, add(null));
    expect(readAdd(v, 64, addRecordBytes(add(null)), 0)!.kvParams).toBeNull();
  });

  it('a record whose kv length runs past it, or past 64 KiB, is malformed', () => {
    const v = regionViews(new SharedArrayBuffer(4096));
    const fields = add(KV);
    writeAdd(v, 64, fields);
    expect(readAdd(v, 64, addRecordBytes(fields) - 1, 0)).toBeNull();
    const kvLengthAt = ((64 + 64) >> 2) + 15; // i32 15 of the ADD's fixed part
    v.i32[kvLengthAt] = MAX_KV_PARAMS_BYTES + 1;
    expect(readAdd(v, 64, 4000, 0)).toBeNull();
    v.i32[kvLengthAt] = -1;
    expect(readAdd(v, 64, 4000, 0)).toBeNull();
  });
});

/** A step of 24 outputs of slots 0..23: slot 3's the last of its request with kv params, 5's too. */
function step(): StepOutputs {
  const out = new StepOutputs(4);
  out.shapeRouting(2, 2, 16);
  for (let i = 0; i < 24; i++) {
    const j = out.addRow(0, i, 0);
    out.token[j] = 100 + i;
    if (i === 3) {
      out.finish[j] = FinishReason.Length;
      out.setKv(j, KV);
    }
    if (i === 5) out.setKv(j, Uint8Array.from([0x80])); // {}
  }
  return out;
}

describe('STEP kv_transfer_params', () => {
  it('are written by the step writer and gathered by the scatter, split over records too', () => {
    for (const ringBytes of [1 << 20, 4096]) {
      const region = testRegion({
        apiServerCount: 1,
        requestRingBytes: 4096,
        outputRingBytes: ringBytes,
      });
      const producer = outputRingProducer(region, 0);
      const sink = { producer: () => producer, slotGen: () => 5, serverGone: () => {} };
      new StepBatchWriter(1, 2, 2, 1).write(step(), sink, 0, 0);
      const h = makeHarness({ slots: 24 });
      for (let s = 0; s < 24; s++) h.meta.write(s, 5, metaFields({ promptLen: 2 }));
      const consumer = outputRingConsumer(region, 0);
      const view = new StepRecordView();
      let records = 0;
      while (consumer.next()) {
        expect(consumer.type).toBe(RecordType.Step);
        records++;
        view.attach(consumer, consumer.offset);
        h.scatter.scatterStep(consumer, consumer.offset, consumer.length);
      }
      consumer.release();
      const batch = h.scatter.kvParams.toBatch()!;
      expect(Array.from(batch.slots)).toEqual([3, 5]);
      expect(Array.from(batch.generations)).toEqual([5, 5]);
      expect(Array.from(batch.ends)).toEqual([4, 5]);
      expect(Array.from(batch.bytes)).toEqual([...KV, 0x80]);
      if (ringBytes === 4096) expect(records).toBeGreaterThan(1);
    }
  });

  it("the bridge's row copies keep each row's kv bytes (appendRange, copyRow)", () => {
    const src = step();
    const whole = new StepOutputs(2);
    whole.shapeRouting(2, 2, 16);
    whole.appendRange(src, 2, 6);
    const one = new StepOutputs(2);
    one.shapeRouting(2, 2, 16);
    copyRow(src, 3, one, 0);
    const kvOf = (o: StepOutputs, i: number) =>
      Array.from(o.kvBytes.subarray(o.kvStart[i]!, o.kvStart[i]! + o.kvCount[i]!));
    expect([0, 1, 2, 3].map((i) => kvOf(whole, i))).toEqual([[], Array.from(KV), [], [0x80]]);
    expect(kvOf(one, 0)).toEqual(Array.from(KV));
  });

  it("a kv column past the record's kv area is a bad STEP record", () => {
    const h = makeHarness();
    h.meta.write(1, 5, metaFields({ promptLen: 2 }));
    const v = regionViews(new SharedArrayBuffer(64 * 1024));
    const length = writeStep(v, 64, [{ slot: 1, gen: 5, token: 3, kv: KV }], {
      layers: 2,
      topk: 2,
      idBytes: 1,
    });
    const rec = new StepRecordView().attach(v, 64);
    v.i32[rec.at(StepColumn.KvParamsBytes, 0)] = KV.length + 1;
    expect(() => h.scatter.scatterStep(v, 64, length)).toThrow(/kv entries/);
  });
});
