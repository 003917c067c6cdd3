/**
 * A scripted answer on the request ring (wire/messages.ts): the ADD's script ids after the stop
 * ids, its length in i32 16 of the fixed part, ScriptEnds a flag bit; read back as a copy, and a
 * record whose script length does not fit (negative, past MAX_SCRIPT_TOKENS, past the record) is
 * malformed. Through a real request ring to the simulator, the script comes out as the answer.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { requestRingConsumer, requestRingProducer } from '../../src/shm/region.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import {
  type AddFields,
  AddFlag,
  addRecordBytes,
  MAX_SCRIPT_TOKENS,
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
  topP: 0.97,
  topK: 50,
  minP: 0,
  seed: 3,
  maxTokens: 64,
  minTokens: 0,
  stopTokenIds: new Int32Array([9, 10]),
  ignoreEos: false,
  presencePenalty: 0,
  frequencyPenalty: 0,
  repetitionPenalty: 1,
  logprobs: true,
  topLogprobs: 2,
  promptLogprobs: -1,
  returnSamplingMask: true,
  returnRoutedExperts: false,
  routedExpertsPromptStart: 0,
};

const SCRIPT = Int32Array.from([11, 12, 13, 997, 14, 15]);
const KV = Uint8Array.from([0x81, 0xa1, 0x61, 0x07]); // {"a": 7}

function add(script: Int32Array | null, scriptEnds: boolean): AddFields {
  return {
    slot: 4,
    slotGen: 77,
    promptTokenIds: new Int32Array([1, 2, 3]),
    params,
    priority: 0,
    cacheSalt: Buffer.from('salty'),
    arrivalTimeMs: 5,
    kvParams: KV,
    script,
    scriptEnds,
  };
}

const FIXED = 64 + 18 * 4; // f64[8], i32[18]
const scriptLenAt = (offset: number) => ((offset + 64) >> 2) + 16;

describe('ADD scripted answer', () => {
  it('travels after the stop ids, the flag in its bit; the rest of the record reads as before', () => {
    const v = regionViews(new SharedArrayBuffer(8192));
    for (const ends of [true, false]) {
      const fields = add(SCRIPT, ends);
      const bytes = addRecordBytes(fields);
      expect(bytes).toBe(FIXED + (3 + 2 + SCRIPT.length) * 4 + 5 + KV.length);
      writeAdd(v, 64, fields);
      expect((v.i32[((64 + 64) >> 2) + 4]! & AddFlag.ScriptEnds) !== 0).toBe(ends);
      const read = readAdd(v, 64, bytes, 0)!;
      expect(Array.from(read.script!)).toEqual(Array.from(SCRIPT));
      expect(read.scriptEnds).toBe(ends);
      expect(Array.from(read.promptTokenIds)).toEqual([1, 2, 3]);
      expect(Array.from(read.params.stopTokenIds)).toEqual([9, 10]);
      expect(read.cacheSalt).toBe('salty');
      expect(Array.from(read.kvParams!)).toEqual(Array.from(KV));
      // A copy: the producer overwriting the ring later does not change the request.
      v.i32.fill(0, (64 + FIXED) >> 2, (64 + bytes) >> 2);
      expect(Array.from(read.script!)).toEqual(Array.from(SCRIPT));
    }
  });

  it('none reads back as null; an empty script that ends the answer stays one', () => {
    const v = regionViews(new SharedArrayBuffer(4096));
    for (const [script, ends, want, wantEnds] of [
      [null, false, null, false],
      [null, true, null, false], // no script: nothing to end
      [new Int32Array(0), false, null, false],
      [new Int32Array(0), true, [], true],
    ] as const) {
      const fields = add(script, ends);
      writeAdd(v, 64, fields);
      const read = readAdd(v, 64, addRecordBytes(fields), 0)!;
      expect(read.script ? Array.from(read.script) : read.script).toEqual(want);
      expect(read.scriptEnds).toBe(wantEnds);
    }
    // Fields without the script keys at all (older writers) read as none.
    const { script: _s, scriptEnds: _e, ...bare } = add(null, false);
    writeAdd(v, 64, bare);
    expect(readAdd(v, 64, addRecordBytes(bare), 0)!.script).toBeNull();
  });

  it('a record whose script length is negative, too long or past the record is malformed', () => {
    const v = regionViews(new SharedArrayBuffer(1 << 20));
    const fields = add(SCRIPT, true);
    const bytes = addRecordBytes(fields);
    writeAdd(v, 64, fields);
    expect(readAdd(v, 64, bytes, 0)).not.toBeNull();
    expect(readAdd(v, 64, bytes - 1, 0)).toBeNull();
    v.i32[scriptLenAt(64)] = SCRIPT.length + 2; // 8 bytes more than written: past the record
    expect(readAdd(v, 64, bytes, 0)).toBeNull();
    v.i32[scriptLenAt(64)] = -1;
    expect(readAdd(v, 64, (1 << 20) - 128, 0)).toBeNull();
    v.i32[scriptLenAt(64)] = MAX_SCRIPT_TOKENS + 1;
    expect(readAdd(v, 64, (1 << 20) - 128, 0)).toBeNull();
    v.i32[scriptLenAt(64)] = 0x7fffffff;
    expect(readAdd(v, 64, (1 << 20) - 128, 0)).toBeNull();
  });

  it('a script of a few thousand tokens fits a default request ring and comes out as the answer', () => {
    const long = Int32Array.from({ length: 4000 }, (_, i) => (i * 7) % 990);
    const region = testRegion({ apiServerCount: 1 });
    const producer = requestRingProducer(region, 0);
    const fields: AddFields = {
      ...add(long, true),
      params: { ...params, maxTokens: 4002, stopTokenIds: new Int32Array(0) },
    };
    const at = producer.reserve(RecordType.Add, addRecordBytes(fields), 1_000);
    writeAdd(producer, at, fields);
    producer.commit();
    const consumer = requestRingConsumer(region, 0);
    expect(consumer.next()).toBe(true);
    expect(consumer.type).toBe(RecordType.Add);
    const req = readAdd(consumer, consumer.offset, consumer.length, 0)!;
    consumer.release();
    expect(req.script).toHaveLength(4000);
    const engine = new SimEngine({ preset: 'tiny', maxSpeed: true });
    engine.add(req);
    const c = drain(engine).get(key(0, 4))!;
    expect(c.tokens).toEqual([...long, 999]);
    expect(c.finish).toBe(FinishReason.Stop);
  });
});
