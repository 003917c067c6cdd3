/** The group tracker (choice-group.ts): when a request of n choices is answered, and with what. */
import { describe, expect, it } from 'vitest';
import { ChoiceGroup } from '../../src/server/main/choice-group.js';

function group(n: number): ChoiceGroup {
  const g = new ChoiceGroup(n);
  for (let i = 0; i < n; i++) g.add(10 + i, 100 + i);
  return g;
}

describe('ChoiceGroup', () => {
  it('is complete when the last choice finishes, in any order, counting each choice once', () => {
    const g = group(3);
    expect(g.indexOf(12, 102)).toBe(2);
    expect(g.indexOf(12, 101)).toBe(-1);
    expect(g.succeeded(2)).toBe(false);
    expect(g.succeeded(2)).toBe(false);
    expect(g.succeeded(0)).toBe(false);
    expect(g.succeeded(1)).toBe(true);
  });

  it('answers the first failure only, and is never complete after one', () => {
    const g = group(3);
    expect(g.succeeded(0)).toBe(false);
    expect(g.fail(1)).toBe(true);
    expect(g.failed).toBe(true);
    expect(g.fail(2)).toBe(false);
    expect(g.fail(1)).toBe(false);
    expect(group(1).succeeded(0)).toBe(true);
    const late = group(2);
    late.fail(0);
    expect(late.succeeded(1)).toBe(false);
  });

  it('ignores a choice it does not have', () => {
    const g = group(1);
    expect(g.succeeded(-1)).toBe(false);
    expect(g.fail(5)).toBe(false);
    expect(g.succeeded(0)).toBe(true);
  });
});
