/**
 * The coordinator and a request's life against a fake engine that replays canned step records (no
 * cluster, no threads): answers, n > 1 groups, refused and half-sent requests, abort races, engine
 * death, and the rule that a slot is reused only once the engine has confirmed its sequence's end.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { RS_ERR_RING_FULL, RS_ERR_RING_PEER_GONE } from '../../src/errors.js';
import { SlotState } from '../../src/server/main/slot-table.js';
import { childSeed } from '../../src/wire/child-seed.js';
import { RejectReason } from '../../src/wire/reject.js';
import { FinishReason } from '../../src/wire/types.js';
import {
  type CoordinatorRig,
  generateBody,
  startCoordinatorRig,
  thrown,
} from './coordinator-rig.js';
import { tinyChars } from './tiny-tokens.js';

const { Stop, Length, Error: Failed } = FinishReason;

let rig: CoordinatorRig;

afterEach(async () => {
  await rig?.close();
});

const ringFull = () => new RS_ERR_RING_FULL(0, 512, 20);

describe('a request from ADD to a free slot', () => {
  it('answers from the step records and frees the slot only after the final output', async () => {
    rig = startCoordinatorRig();
    const reply = rig.submit(generateBody({}, { request_id: 'a' }));
    const [slot] = rig.slotsOf('a');
    expect(rig.engine.adds).toHaveLength(1);
    expect(rig.coordinator.table.slots.state(slot!)).toBe(SlotState.Running);
    rig.emit(slot!, { token: 65 });
    rig.emit(slot!, { token: 66 });
    expect(reply.answered).toBe(false);
    rig.emit(slot!, { token: 67, finish: Length });
    await rig.settle();
    expect(reply.json().choices[0]).toMatchObject({
      token_ids: [65, 66, 67],
      finish_reason: 'length',
    });
    expect(rig.coordinator.table.slots.taken).toBe(0);
    expect(rig.coordinator.table.active).toBe(0);
    expect(rig.done).toMatchObject([{ requestId: 'a', ok: true }]);
    expect(rig.engine.aborts).toEqual([]);
  });

  it('streams, and ends the stream with [DONE] on the final output', () => {
    rig = startCoordinatorRig();
    const reply = rig.submit(generateBody({}, { request_id: 's', stream: true }));
    const [slot] = rig.slotsOf('s');
    expect(reply.streaming).toBe(true);
    rig.emit(slot!, { token: 65 });
    expect(reply.chunks).toHaveLength(1);
    rig.emit(slot!, { token: 66, finish: Stop, stopTokenId: 66 });
    expect(reply.ended).toBe(true);
    expect(reply.text()).toContain('"request_id":"generate-tokens-s"');
    expect(reply.text().endsWith('data: [DONE]\n\n')).toBe(true);
    expect(rig.coordinator.table.slots.taken).toBe(0);
  });

  it('answers n > 1 once every choice has finished, in choice order, choice i seeded seed + i', async () => {
    rig = startCoordinatorRig();
    const reply = rig.submit(generateBody({ n: 3 }, { request_id: 'n' }));
    const slots = rig.slotsOf('n');
    expect(rig.engine.adds.map((a) => a.params.seed)).toEqual([
      7,
      childSeed(7, 1),
      childSeed(7, 2),
    ]);
    rig.generate(slots[2]!, [70, 71], Length);
    rig.generate(slots[0]!, [50], Stop);
    await rig.settle();
    expect(reply.answered).toBe(false);
    rig.generate(slots[1]!, [60, 61, 62], Length);
    await rig.settle();
    const choices = reply.json().choices;
    expect(choices.map((c) => [c.index, c.token_ids])).toEqual([
      [0, [50]],
      [1, [60, 61, 62]],
      [2, [70, 71]],
    ]);
    expect(rig.coordinator.table.slots.taken).toBe(0);
  });

  it('fails n > 1 with the first failed choice at once, aborts the others, answers once', async () => {
    rig = startCoordinatorRig();
    const reply = rig.submit(generateBody({ n: 2 }, { request_id: 'f' }));
    const [first, second] = rig.slotsOf('f');
    rig.emit(first!, { token: 50 });
    rig.emit(second!, { token: -1, finish: Failed, rejectReason: RejectReason.KvCacheTooSmall });
    expect(reply.error).toMatchObject({ code: 'RS_ERR_ENGINE_REQUEST_FAILED', statusCode: 500 });
    expect(rig.engine.aborts).toEqual([first]);
    expect(rig.coordinator.table.slots.state(first!)).toBe(SlotState.Aborting);
    rig.confirmAborts();
    await rig.settle();
    expect(rig.coordinator.table.slots.taken).toBe(0);
    expect(rig.done).toMatchObject([{ requestId: 'f', ok: false }]);
  });

  it('answers a stop string at its token, and keeps the slot until the engine confirms the abort', async () => {
    rig = startCoordinatorRig();
    const reply = rig.submit(generateBody({ stop: ['ab'] }, { request_id: 'x' }));
    const [slot] = rig.slotsOf('x');
    const [a, b, c] = tinyChars('abc') as [number, number, number];
    rig.emit(slot!, { token: a });
    rig.emit(slot!, { token: b });
    await rig.settle();
    expect(reply.json().choices[0]).toMatchObject({
      token_ids: [a, b],
      finish_reason: 'stop',
    });
    expect(rig.engine.aborts).toEqual([slot]);
    rig.emit(slot!, { token: c });
    expect(rig.coordinator.table.slots.taken).toBe(1);
    rig.confirmAborts();
    expect(rig.coordinator.table.slots.taken).toBe(0);
  });
});

describe('the slot state machine', () => {
  it('reuses a slot only after the engine confirmed its end, under a new generation', async () => {
    rig = startCoordinatorRig(1);
    const a = rig.submit(generateBody({}, { request_id: 'a' }));
    const [slot] = rig.slotsOf('a');
    const genA = rig.engine.genOf(slot!);
    a.close();
    expect(rig.coordinator.table.active).toBe(0);
    expect(rig.coordinator.table.slots.state(slot!)).toBe(SlotState.Aborting);
    // The client has gone but the engine still runs the sequence: no slot for anyone else.
    expect(thrown(() => rig.submit(generateBody())).code).toBe('RS_ERR_SERVER_QUEUE_FULL');
    rig.confirmAborts();
    expect(rig.coordinator.table.slots.state(slot!)).toBe(SlotState.Free);
    const b = rig.submit(generateBody({}, { request_id: 'b' }));
    expect(rig.slotsOf('b')).toEqual([slot]);
    const genB = rig.engine.genOf(slot!);
    expect(genB).not.toBe(genA);
    // A late output of the old generation lands nowhere.
    rig.step([{ slot: slot!, gen: genA, token: 99, finish: Length }]);
    await rig.settle();
    expect(b.answered).toBe(false);
    rig.generate(slot!, [1, 2], Length);
    await rig.settle();
    expect(b.json().choices[0]!.token_ids).toEqual([1, 2]);
    expect(a.answered).toBe(false);
  });

  it('refuses a request id in flight on this server with a 409, and takes it again once answered', async () => {
    rig = startCoordinatorRig();
    rig.submit(generateBody({}, { request_id: 'dup' }));
    const e = thrown(() => rig.submit(generateBody({}, { request_id: 'dup' })));
    expect(e).toMatchObject({
      code: 'RS_ERR_REQ_DUPLICATE_ID',
      statusCode: 409,
      param: 'request_id',
    });
    // The X-Request-Id header wins over the body's id.
    expect(thrown(() => rig.submit(generateBody(), 'dup')).statusCode).toBe(409);
    expect(rig.coordinator.table.slots.taken).toBe(1);
    rig.generate(rig.slotsOf('dup')[0]!, [1], Length);
    await rig.settle();
    rig.submit(generateBody({}, { request_id: 'dup' }));
    expect(rig.coordinator.table.active).toBe(1);
  });
});

describe('a request the engine did not fully receive', () => {
  it('a full request ring refuses the request (503, ring full) and leaves no slot taken', () => {
    rig = startCoordinatorRig();
    rig.engine.addFailures.set(0, ringFull);
    const reply = rig.submit.bind(rig);
    const e = thrown(() => reply(generateBody({}, { request_id: 'r' })));
    expect(e).toMatchObject({ code: 'RS_ERR_RING_FULL', statusCode: 503 });
    expect(rig.coordinator.table.slots.taken).toBe(0);
    expect(rig.coordinator.table.byId('r')).toBeUndefined();
    expect(rig.engine.aborts).toEqual([]);
  });

  it('a gone engine keeps its own error, not "ring full"', () => {
    rig = startCoordinatorRig();
    rig.engine.addFailures.set(0, () => new RS_ERR_RING_PEER_GONE(0, 'consumer', 1234));
    expect(thrown(() => rig.submit(generateBody())).code).toBe('RS_ERR_RING_PEER_GONE');
    expect(rig.coordinator.table.slots.taken).toBe(0);
  });

  it('a failed ADD with n > 1 frees at once the slots the engine never received, the others on its confirmation', () => {
    rig = startCoordinatorRig(4);
    rig.engine.addFailures.set(1, ringFull);
    expect(thrown(() => rig.submit(generateBody({ n: 3 }))).code).toBe('RS_ERR_RING_FULL');
    const sent = rig.engine.adds.map((a) => a.slot);
    expect(sent).toHaveLength(1);
    expect(rig.engine.aborts).toEqual(sent);
    expect(rig.coordinator.table.slots.taken).toBe(1);
    expect(rig.coordinator.table.active).toBe(0);
    rig.confirmAborts();
    expect(rig.coordinator.table.slots.taken).toBe(0);
    // Every slot can be taken again.
    rig.submit(generateBody({ n: 4 }));
    expect(rig.coordinator.table.slots.available).toBe(0);
  });
});
