/** The restart delay: 200 ms, doubling while a child keeps dying soon after its start, capped, reset by a stable run. */
import { describe, expect, it } from 'vitest';
import {
  RESTART_INITIAL_MS,
  RESTART_MAX_MS,
  RESTART_STABLE_MS,
  RestartBackoff,
} from '../../src/cluster/restart-backoff.js';

/** Crashes `n` times, each `uptimeMs` after the restart; returns the delays. */
function crashLoop(backoff: RestartBackoff, clock: { now: number }, n: number, uptimeMs: number) {
  const delays: number[] = [];
  for (let i = 0; i < n; i++) {
    clock.now += uptimeMs;
    const delay = backoff.nextDelay(clock.now);
    delays.push(delay);
    clock.now += delay;
    backoff.started(clock.now);
  }
  return delays;
}

describe('RestartBackoff', () => {
  it('starts at 200 ms and doubles while the child keeps dying soon after it starts', () => {
    const clock = { now: 1_000 };
    const backoff = new RestartBackoff(clock.now);
    expect(backoff.delayMs).toBe(0);
    expect(crashLoop(backoff, clock, 5, 50)).toEqual([200, 400, 800, 1600, 3200]);
    expect(backoff.restarts).toBe(5);
    expect(RESTART_INITIAL_MS).toBe(200);
  });

  it('never waits longer than the cap', () => {
    const clock = { now: 0 };
    const delays = crashLoop(new RestartBackoff(0), clock, 20, 10);
    expect(Math.max(...delays)).toBe(RESTART_MAX_MS);
    expect(delays.at(-1)).toBe(RESTART_MAX_MS);
    expect(RESTART_MAX_MS).toBe(30_000);
  });

  it('starts over after a stable run', () => {
    const clock = { now: 0 };
    const backoff = new RestartBackoff(0);
    crashLoop(backoff, clock, 4, 10);
    expect(backoff.delayMs).toBe(1600);
    expect(crashLoop(backoff, clock, 1, RESTART_STABLE_MS)).toEqual([200]);
    expect(crashLoop(backoff, clock, 1, RESTART_STABLE_MS - 1)).toEqual([400]);
  });

  it('waits 200 ms for a first crash, however soon after the start', () => {
    expect(new RestartBackoff(0).nextDelay(5)).toBe(200);
  });
});
