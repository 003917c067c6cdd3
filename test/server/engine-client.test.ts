/**
 * EngineClient against a real request ring (a region in /dev/shm, no engine process): a full ring
 * refuses an ADD with RS_ERR_RING_FULL, an engine gone from the ring with RS_ERR_RING_PEER_GONE,
 * and an ABORT that finds no room reports it (false) instead of throwing or waiting.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { parseGenerateRequest } from '../../src/protocol/generate-request.js';
import { EngineClient } from '../../src/server/main/engine-client.js';
import {
  createRegion,
  type Region,
  requestRingConsumer,
  unlinkRegion,
} from '../../src/shm/region.js';
import { type AddFields, RecordType, readAbortSlot } from '../../src/wire/messages.js';
import { uniqueRegionName } from '../shm/helpers.js';

const regions: string[] = [];

afterEach(() => {
  for (const name of regions.splice(0)) unlinkRegion(name);
});

function region(): Region {
  const name = uniqueRegionName('engine-client');
  regions.push(name);
  return createRegion(name, { requestRingBytes: 4096, outputRingBytes: 4096 });
}

const { params, promptTokenIds } = parseGenerateRequest(
  { token_ids: new Array(100).fill(3), sampling_params: { max_tokens: 4 } },
  {
    vocabSize: 1000,
    maxModelLen: 4096,
    defaultReturnSamplingMask: false,
    defaultReturnRoutedExperts: false,
  },
);

function add(slot: number): AddFields {
  return {
    slot,
    slotGen: 1,
    promptTokenIds,
    params,
    priority: 0,
    cacheSalt: null,
    arrivalTimeMs: 0,
  };
}

/** ADDs, then ABORTs, until the ring takes no more; returns the ADD's error. */
function fill(client: EngineClient): unknown {
  let error: unknown = null;
  for (let slot = 0; error === null; slot++) {
    try {
      client.add(add(slot));
    } catch (e) {
      error = e;
    }
  }
  let aborts = 0;
  while (client.abort(0)) aborts++;
  expect(aborts).toBeLessThan(4096 / 16);
  return error;
}

describe('EngineClient', () => {
  it('a full ring: ADD fails with RS_ERR_RING_FULL, ABORT returns false, then writes once there is room', () => {
    const r = region();
    const client = new EngineClient(r, 0);
    expect(fill(client)).toMatchObject({ code: 'RS_ERR_RING_FULL', statusCode: 503 });
    expect(() => client.abort(7)).not.toThrow();
    expect(client.abort(7)).toBe(false);
    const engine = requestRingConsumer(r, 0);
    while (engine.next());
    engine.release();
    expect(client.abort(7)).toBe(true);
    expect(engine.next()).toBe(true);
    expect(engine.type).toBe(RecordType.Abort);
    expect(readAbortSlot(engine, engine.offset)).toBe(7);
  });

  it('an engine gone from the ring: ADD fails with RS_ERR_RING_PEER_GONE, not ring full', () => {
    const r = region();
    const client = new EngineClient(r, 0);
    requestRingConsumer(r, 0).detach();
    expect(fill(client)).toMatchObject({ code: 'RS_ERR_RING_PEER_GONE', statusCode: 503 });
    expect(client.abort(1)).toBe(false);
  });

  it('has nothing to abort while the engine is down, and refuses ADDs with RS_ERR_ENGINE_DEAD', () => {
    const client = new EngineClient(region(), 0);
    client.setUp(false);
    expect(client.abort(1)).toBe(true);
    expect(() => client.add(add(1))).toThrow(
      expect.objectContaining({ code: 'RS_ERR_ENGINE_DEAD' }),
    );
  });
});
