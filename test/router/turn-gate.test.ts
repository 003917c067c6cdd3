/**
 * The router's turn gate (turn-gate.ts): steps beyond a turn's room wait for later turns, in the
 * order they came; a turn that accepted a connection takes none, for at most 8 turns in a row.
 */
import { describe, expect, it } from 'vitest';
import { TurnGate } from '../../src/router/turn-gate.js';

/** Resolves after `n` turns of the event loop (a setImmediate each). */
async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve));
}

describe('TurnGate', () => {
  it('passes perTurn steps at once, then one turn at a time, in order', async () => {
    const gate = new TurnGate(2);
    const order: number[] = [];
    const steps = Array.from({ length: 7 }, (_, i) =>
      Promise.resolve(gate.pass()).then(() => order.push(i)),
    );
    await Promise.resolve();
    expect(order).toEqual([0, 1]);
    expect(gate.waiting).toBe(5);
    await turns(1);
    expect(order).toEqual([0, 1, 2, 3]);
    await Promise.all(steps);
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(gate.waiting).toBe(0);
  });

  it('keeps a thousand waiters in order across the ring growing', async () => {
    const gate = new TurnGate(3);
    const order: number[] = [];
    await Promise.all(
      Array.from({ length: 1000 }, (_, i) =>
        Promise.resolve(gate.pass()).then(() => order.push(i)),
      ),
    );
    expect(order).toEqual(Array.from({ length: 1000 }, (_, i) => i));
  });

  it('holds steps while connections are being accepted, at most 8 turns in a row', async () => {
    const gate = new TurnGate(1);
    await turns(2);
    let passed = false;
    gate.noteAccept();
    await turns(1); // the accepting turn: no room
    const step = Promise.resolve(gate.pass()).then(() => {
      passed = true;
    });
    for (let i = 0; i < 3; i++) {
      gate.noteAccept();
      await turns(1);
    }
    expect(passed).toBe(false);
    // Accepting every turn: the step still goes within 9 turns.
    for (let i = 0; i < 9 && !passed; i++) {
      gate.noteAccept();
      await turns(1);
    }
    await step;
    expect(passed).toBe(true);
  });

  it('refuses a room that is not a positive integer', () => {
    expect(() => new TurnGate(0)).toThrow(RangeError);
    expect(() => new TurnGate(1.5)).toThrow(RangeError);
  });
});
