/**
 * How a request ends early, against the fake engine (fake-engine-client.ts): a client that leaves
 * before, after or while its answer is encoded, /abort_requests, an ABORT that finds the request
 * ring full, and the engine dying under requests in flight.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { SlotState } from '../../src/server/main/slot-table.js';
import { FinishReason } from '../../src/wire/types.js';
import { until } from '../shm/helpers.js';
import {
  type CoordinatorRig,
  generateBody,
  startCoordinatorRig,
  thrown,
} from './coordinator-rig.js';

const { Length, Abort } = FinishReason;

let rig: CoordinatorRig;

afterEach(async () => {
  await rig?.close();
});

describe('abort races', () => {
  it('a client gone before the final output: ABORT, no answer, the slot back on confirmation', () => {
    rig = startCoordinatorRig();
    const reply = rig.submit(generateBody({}, { request_id: 'c' }));
    const [slot] = rig.slotsOf('c');
    rig.emit(slot!, { token: 1 });
    reply.close();
    expect(rig.engine.aborts).toEqual([slot]);
    rig.emit(slot!, { token: 2 });
    rig.confirmAborts();
    expect(reply.answered).toBe(false);
    expect(rig.coordinator.table.slots.taken).toBe(0);
  });

  it('a client gone after the final output: no ABORT, the answer was sent once', async () => {
    rig = startCoordinatorRig();
    const reply = rig.submit(generateBody({}, { request_id: 'c' }));
    rig.generate(rig.slotsOf('c')[0]!, [1, 2], Length);
    await rig.settle();
    reply.close();
    expect(reply.body).not.toBeNull();
    expect(rig.engine.aborts).toEqual([]);
  });

  it('a client gone while its answer is encoded: no ABORT, no answer, the slot free after the encode', async () => {
    rig = startCoordinatorRig();
    const reply = rig.submit(generateBody({}, { request_id: 'c' }));
    const [slot] = rig.slotsOf('c');
    rig.generate(slot!, [1, 2], Length);
    reply.close();
    expect(rig.coordinator.table.slots.state(slot!)).toBe(SlotState.Ended);
    await rig.settle();
    expect(reply.answered).toBe(false);
    expect(rig.engine.aborts).toEqual([]);
    expect(rig.coordinator.table.slots.taken).toBe(0);
  });

  it('abort_requests ends the request in the engine, which answers what it had with finish abort', async () => {
    rig = startCoordinatorRig();
    const reply = rig.submit(generateBody({}, { request_id: 'q' }));
    const [slot] = rig.slotsOf('q');
    rig.emit(slot!, { token: 1 });
    expect(rig.coordinator.abortById('nope')).toBe(false);
    expect(rig.coordinator.abortById('q')).toBe(true);
    expect(rig.coordinator.abortById('q')).toBe(true);
    expect(rig.engine.aborts).toEqual([slot]);
    rig.emit(slot!, { token: 2, finish: Abort });
    await rig.settle();
    expect(reply.json().choices[0]).toMatchObject({ token_ids: [1, 2], finish_reason: 'abort' });
    expect(rig.coordinator.table.slots.taken).toBe(0);
  });

  it('an ABORT that finds the ring full is queued, never thrown, and written once there is room', async () => {
    rig = startCoordinatorRig();
    const reply = rig.submit(generateBody({}, { request_id: 'w' }));
    const [slot] = rig.slotsOf('w');
    rig.engine.abortRoom = false;
    expect(() => reply.close()).not.toThrow();
    expect(rig.engine.aborts).toEqual([]);
    expect(rig.coordinator.table.slots.state(slot!)).toBe(SlotState.AbortQueued);
    rig.engine.abortRoom = true;
    await until(() => rig.engine.aborts.length === 1, 5_000, 'the queued ABORT');
    expect(rig.engine.aborts).toEqual([slot]);
    rig.confirmAborts();
    expect(rig.coordinator.table.slots.taken).toBe(0);
  });

  it("a queued ABORT is dropped when its sequence ends on its own, and never hits the slot's next request", async () => {
    rig = startCoordinatorRig(1);
    const reply = rig.submit(generateBody({}, { request_id: 'w' }));
    const [slot] = rig.slotsOf('w');
    rig.engine.abortRoom = false;
    reply.close();
    rig.generate(slot!, [1], Length);
    expect(rig.coordinator.table.slots.taken).toBe(0);
    rig.submit(generateBody({}, { request_id: 'next' }));
    expect(rig.slotsOf('next')).toEqual([slot]);
    rig.engine.abortRoom = true;
    rig.coordinator.table.slots.retryAborts();
    expect(rig.engine.aborts).toEqual([]);
    expect(rig.coordinator.table.slots.state(slot!)).toBe(SlotState.Running);
  });
});

describe('engine death mid-request', () => {
  it('fails every request in flight with a 503, frees every slot, drops owed ABORTs', async () => {
    rig = startCoordinatorRig();
    const plain = rig.submit(generateBody({ n: 2 }, { request_id: 'p' }));
    const stream = rig.submit(generateBody({}, { request_id: 's', stream: true }));
    const gone = rig.submit(generateBody({}, { request_id: 'g' }));
    const [streamSlot] = rig.slotsOf('s');
    const [goneSlot] = rig.slotsOf('g');
    const goneGen = rig.engine.genOf(goneSlot!);
    rig.emit(streamSlot!, { token: 1 });
    rig.engine.abortRoom = false;
    gone.close();
    rig.coordinator.engineDown();
    for (const reply of [plain, stream]) {
      expect(reply.error).toMatchObject({ code: 'RS_ERR_ENGINE_DEAD', statusCode: 503 });
    }
    expect(stream.chunks).toHaveLength(1);
    expect(gone.answered).toBe(false);
    expect(rig.coordinator.table.slots.taken).toBe(0);
    expect(rig.coordinator.table.active).toBe(0);
    expect(thrown(() => rig.submit(generateBody())).code).toBe('RS_ERR_ENGINE_DEAD');
    rig.engine.abortRoom = true;
    rig.coordinator.table.slots.retryAborts();
    expect(rig.engine.aborts).toEqual([]);
    rig.coordinator.engineUp();
    const next = rig.submit(generateBody({}, { request_id: 'n' }));
    // A dead engine's late output lands nowhere.
    rig.step([{ slot: goneSlot!, gen: goneGen, token: 5, finish: Length }]);
    rig.generate(rig.slotsOf('n')[0]!, [3], Length);
    await rig.settle();
    expect(next.json().choices[0]!.token_ids).toEqual([3]);
  });
});
