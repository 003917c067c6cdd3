/**
 * ops/netns/failover-report.ts on made-up records: what counts as a failure of the killed node, as
 * a lost request, and as a session that moved while its node lived. The netns test trusts these
 * verdicts on a real run.
 */
import { describe, expect, it } from 'vitest';
import { analyze, type FaultTimes } from '../../ops/netns/failover-report.js';
import type { LoadRecord } from '../../ops/netns/load.js';

const T: FaultTimes = {
  killed: 'node0',
  stopped: 'node1',
  kill: 1_000,
  killDone: 1_050,
  down: 3_500,
  stop: 3_600,
  restart: 3_700,
  ready: 6_000,
  up: 8_000,
  cont: 13_600,
  drained: 'node2',
  drain: 20_000,
  drainDown: 23_000,
};

function rec(over: Partial<LoadRecord>): LoadRecord {
  return {
    start: 0,
    end: 500,
    session: null,
    turn: 0,
    status: 200,
    servedBy: 'node2',
    error: null,
    tokens: 8,
    ...over,
  };
}

describe('analyze', () => {
  it("counts a 502 from the killed node during its death as the killed node's, nothing else", () => {
    const records = [
      rec({ servedBy: 'node0', start: 900, end: 1_001, status: 502, tokens: 0 }),
      rec({ servedBy: 'node2', start: 900, end: 1_001, status: 502, tokens: 0 }),
      rec({ servedBy: 'node0', start: 1_040, end: 1_060, status: 502, tokens: 0 }),
      rec({ servedBy: 'node0', start: 1_100, end: 1_200, status: 502, tokens: 0 }),
      rec({ servedBy: 'node2', status: 200, tokens: 7 }),
      rec({ servedBy: null, start: 900, end: 1_002, status: 0, error: 'UND_ERR_SOCKET' }),
    ];
    const report = analyze({ sent: records.length, records }, T, 8);
    expect(report.failed).toBe(6);
    expect(report.failedOnKilled).toBe(2);
    expect(report.failedElsewhere).toHaveLength(4);
    expect(report.lost).toBe(0);
  });

  it('counts requests never ended and those cut by the deadline as lost', () => {
    const records = [rec({ error: 'deadline', status: 0 }), rec({})];
    const report = analyze({ sent: 3, records }, T, 8);
    expect(report.lost).toBe(2);
    expect(report.failed).toBe(0);
  });

  it('lets a session move only off the killed node, after it died', () => {
    const records = [
      rec({ session: 'a', turn: 0, start: 0, servedBy: 'node0' }),
      rec({ session: 'a', turn: 1, start: 1_500, servedBy: 'node2' }),
      rec({ session: 'b', turn: 0, start: 0, servedBy: 'node1' }),
      rec({ session: 'b', turn: 1, start: 5_000, end: 13_700, servedBy: 'node1' }),
      rec({ session: 'c', turn: 0, start: 0, servedBy: 'node1' }),
      rec({ session: 'c', turn: 1, start: 600, servedBy: 'node2' }),
      rec({ session: 'd', turn: 0, start: 0, servedBy: 'node0' }),
      rec({ session: 'd', turn: 1, start: 600, servedBy: 'node2' }),
      rec({ session: 'e', turn: 0, start: 19_800, end: 20_300, servedBy: 'node2' }),
      rec({ session: 'e', turn: 1, start: 20_400, servedBy: 'node0' }),
      rec({ session: 'f', turn: 0, start: 19_000, end: 19_500, servedBy: 'node2' }),
      rec({ session: 'f', turn: 1, start: 19_600, servedBy: 'node1' }),
    ];
    const report = analyze({ sent: records.length, records }, T, 8);
    expect(report.sessions).toBe(6);
    expect(report.stickyViolations).toEqual([
      'c: turn 0 on node1, turn 1 on node2',
      'd: turn 0 on node0, turn 1 on node2',
      'f: turn 0 on node2, turn 1 on node1',
    ]);
    expect(report.heldThroughStop).toBe(1);
    expect(report.drainedAnswered).toBe(1);
  });

  it('times the failover and the rejoin from the fault times and the first answer', () => {
    const records = [
      rec({ servedBy: 'node0', start: 8_100, end: 8_600 }),
      rec({ servedBy: 'node0', start: 4_000, end: 4_100, status: 502, tokens: 0 }),
    ];
    const report = analyze({ sent: records.length, records }, T, 8);
    expect(report.failoverMs).toBe(2_500);
    expect(report.rejoinMs).toBe(4_300);
    expect(report.rejoinFirstAnswerMs).toBe(4_900);
    expect(report.sentToDeadNode).toBe(0);
    expect(report.drainMs).toBe(3_000);
  });
});
