/**
 * The slot state machine on its own (slot-table.ts): which transitions exist, that a slot returns
 * to the free stack only from Ended, that ABORTs go through one ordered queue that is retried and
 * pruned, and that every taking draws a fresh generation.
 */
import { describe, expect, it } from 'vitest';
import { SlotState, SlotTable } from '../../src/server/main/slot-table.js';
import { FakeEngineClient } from './fake-engine-client.js';

const { Free, Reserved, Running, AbortQueued, Aborting, Ended } = SlotState;

function table(capacity = 4) {
  const engine = new FakeEngineClient(4096);
  return { engine, slots: new SlotTable<string>(capacity, engine) };
}

describe('SlotTable', () => {
  it('walks Free -> Reserved -> Running -> Aborting -> Ended -> Free, and no shortcut frees a slot', () => {
    const { engine, slots } = table();
    const slot = slots.take('r');
    const gen = slots.gen(slot);
    expect(slots.state(slot)).toBe(Reserved);
    expect(slots.release(slot, gen)).toBe(false);
    slots.sent(slot, gen);
    expect(slots.state(slot)).toBe(Running);
    expect(slots.release(slot, gen)).toBe(false);
    slots.abort(slot, gen);
    expect([slots.state(slot), engine.aborts]).toEqual([Aborting, [slot]]);
    slots.abort(slot, gen);
    expect(engine.aborts).toEqual([slot]);
    expect(slots.release(slot, gen)).toBe(false);
    slots.ended(slot, gen + 1);
    expect(slots.state(slot)).toBe(Aborting);
    slots.ended(slot, gen);
    expect(slots.state(slot)).toBe(Ended);
    expect(slots.current(slot, gen)).toBe('r');
    expect(slots.release(slot, gen)).toBe(true);
    expect([slots.state(slot), slots.current(slot, gen), slots.taken]).toEqual([
      Free,
      undefined,
      0,
    ]);
  });

  it('ends a sequence the engine never received at once, without an ABORT', () => {
    const { engine, slots } = table();
    const slot = slots.take('r');
    slots.abort(slot, slots.gen(slot));
    expect(slots.state(slot)).toBe(Ended);
    expect(engine.aborts).toEqual([]);
    expect(slots.release(slot, slots.gen(slot))).toBe(true);
  });

  it('draws a new generation at every taking, and hands slots out until none is free', () => {
    const { slots } = table(2);
    const a = slots.take('a');
    const b = slots.take('b');
    expect(slots.take('c')).toBe(-1);
    expect(new Set([a, b]).size).toBe(2);
    const genA = slots.gen(a);
    slots.abort(a, genA);
    slots.release(a, genA);
    expect(slots.take('d')).toBe(a);
    expect(slots.gen(a)).not.toBe(genA);
    expect(slots.current(a, genA)).toBeUndefined();
    expect([...slots.records()].sort()).toEqual(['b', 'd']);
  });

  it('queues ABORTs in order while the ring is full, retries them, and drops the ones that ended', () => {
    const { engine, slots } = table();
    const taken = ['a', 'b', 'c'].map((r) => {
      const slot = slots.take(r);
      slots.sent(slot, slots.gen(slot));
      return slot;
    });
    const [a, b, c] = taken as [number, number, number];
    engine.abortRoom = false;
    slots.abort(a, slots.gen(a));
    slots.abort(b, slots.gen(b));
    expect([slots.state(a), slots.state(b)]).toEqual([AbortQueued, AbortQueued]);
    engine.abortRoom = true;
    // Behind a queue, a new ABORT waits its turn: the ring sees them in order.
    slots.ended(a, slots.gen(a));
    slots.abort(c, slots.gen(c));
    expect(engine.aborts).toEqual([b, c]);
    expect([slots.state(a), slots.state(b), slots.state(c)]).toEqual([Ended, Aborting, Aborting]);
    slots.retryAborts();
    expect(engine.aborts).toEqual([b, c]);
  });

  it('ends everything when the engine dies and owes no ABORT any more', () => {
    const { engine, slots } = table();
    const a = slots.take('a');
    slots.sent(a, slots.gen(a));
    const b = slots.take('b');
    engine.abortRoom = false;
    slots.abort(a, slots.gen(a));
    slots.endAll();
    expect([slots.state(a), slots.state(b)]).toEqual([Ended, Ended]);
    engine.abortRoom = true;
    slots.retryAborts();
    expect(engine.aborts).toEqual([]);
    slots.close();
  });
});
