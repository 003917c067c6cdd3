/**
 * The data-parallel rank on the request ring (wire/messages.ts): i32 17 of the ADD's fixed part
 * (f64[8], i32[18]: 136 bytes), -1 for none; read back as the rank or null, the rest of the record
 * unchanged. Through a real request ring to the simulator, which ignores it (its only rank is 0).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { requestRingConsumer, requestRingProducer } from '../../src/shm/region.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import {
  type AddFields,
  addRecordBytes,
  RecordType,
  readAdd,
  regionViews,
  writeAdd,
} from '../../src/wire/messages.js';
import { FinishReason, type SamplingParams } from '../../src/wire/types.js';
import { testRegion, unlinkTestRegions } from '../engine/helpers.js';
import { drain, key } from '../sim/helpers.js';

afterEach(unlinkTestRegions);

const params: SamplingParams = {
  temperature: 1,
  topP: 1,
  topK: 0,
  minP: 0,
  seed: 11,
  maxTokens: 5,
  minTokens: 0,
  stopTokenIds: new Int32Array([9]),
  ignoreEos: true,
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

const KV = Uint8Array.from([0x81, 0xa1, 0x61, 0x07]); // {"a": 7}

function add(dataParallelRank: number | null | undefined): AddFields {
  const fields: AddFields = {
    slot: 6,
    slotGen: 41,
    promptTokenIds: new Int32Array([1, 2, 3, 4]),
    params,
    priority: 2,
    cacheSalt: Buffer.from('salt'),
    arrivalTimeMs: 9,
    loraId: 3,
    kvParams: KV,
    script: Int32Array.from([20, 21]),
    scriptEnds: true,
  };
  if (dataParallelRank !== undefined) fields.dataParallelRank = dataParallelRank;
  return fields;
}

const FIXED = 64 + 18 * 4; // f64[8], i32[18]
const rankAt = (offset: number) => ((offset + 64) >> 2) + 17;

describe('ADD data_parallel_rank', () => {
  it('round-trips a rank in i32 17; the rest of the record reads as before', () => {
    const v = regionViews(new SharedArrayBuffer(8192));
    for (const rank of [0, 1, 7, 255]) {
      const fields = add(rank);
      const bytes = addRecordBytes(fields);
      expect(bytes).toBe(FIXED + (4 + 1 + 2) * 4 + 4 + KV.length);
      writeAdd(v, 64, fields);
      expect(v.i32[rankAt(64)]).toBe(rank);
      const read = readAdd(v, 64, bytes, 0)!;
      expect(read.dataParallelRank).toBe(rank);
      expect(read).toMatchObject({ slot: 6, priority: 2, loraId: 3, cacheSalt: 'salt' });
      expect(Array.from(read.promptTokenIds)).toEqual([1, 2, 3, 4]);
      expect(Array.from(read.params.stopTokenIds)).toEqual([9]);
      expect(Array.from(read.script!)).toEqual([20, 21]);
      expect(Array.from(read.kvParams!)).toEqual(Array.from(KV));
    }
  });

  it('none (null or absent) is -1 on the ring and null when read', () => {
    const v = regionViews(new SharedArrayBuffer(8192));
    for (const rank of [null, undefined]) {
      const fields = add(rank);
      v.i32[rankAt(64)] = 5; // what an earlier record left there
      writeAdd(v, 64, fields);
      expect(v.i32[rankAt(64)]).toBe(-1);
      const read = readAdd(v, 64, addRecordBytes(fields), 0)!;
      expect(read.dataParallelRank).toBeNull();
      expect(Array.from(read.promptTokenIds)).toEqual([1, 2, 3, 4]);
    }
    // Any negative word is none.
    const fields = add(null);
    writeAdd(v, 64, fields);
    v.i32[rankAt(64)] = -7;
    expect(readAdd(v, 64, addRecordBytes(fields), 0)!.dataParallelRank).toBeNull();
  });

  it('a record one byte short of its fixed part is malformed', () => {
    const v = regionViews(new SharedArrayBuffer(4096));
    const fields: AddFields = { ...add(1), promptTokenIds: new Int32Array(0), script: null };
    const bare = { ...fields, params: { ...params, stopTokenIds: new Int32Array(0) } };
    bare.cacheSalt = null;
    bare.kvParams = null;
    expect(addRecordBytes(bare)).toBe(FIXED);
    writeAdd(v, 64, bare);
    expect(readAdd(v, 64, FIXED, 0)!.dataParallelRank).toBe(1);
    expect(readAdd(v, 64, FIXED - 1, 0)).toBeNull();
  });

  it('through a real request ring, the simulator runs a ranked request as an unranked one', () => {
    const region = testRegion({ apiServerCount: 1 });
    const producer = requestRingProducer(region, 0);
    const consumer = requestRingConsumer(region, 0);
    const answers: number[][] = [];
    for (const rank of [0, null]) {
      // No adapter, script or kv params: the simulator runs it as a plain request.
      const fields: AddFields = {
        ...add(rank),
        loraId: 0,
        script: null,
        scriptEnds: false,
        kvParams: null,
      };
      const at = producer.reserve(RecordType.Add, addRecordBytes(fields), 1_000);
      writeAdd(producer, at, fields);
      producer.commit();
      expect(consumer.next()).toBe(true);
      const req = readAdd(consumer, consumer.offset, consumer.length, 0)!;
      consumer.release();
      expect(req.dataParallelRank).toBe(rank);
      const engine = new SimEngine({ preset: 'tiny', maxSpeed: true });
      engine.add(req);
      const c = drain(engine).get(key(0, 6))!;
      expect(c.finish).toBe(FinishReason.Length);
      answers.push(c.tokens);
    }
    expect(answers[0]).toHaveLength(5);
    expect(answers[0]).toEqual(answers[1]);
  });
});
