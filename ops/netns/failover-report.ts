/**
 * What the load generator's records (load.ts) say about one failover run: which requests failed
 * and whether each was one the dead node had taken, how long the balancer took to stop sending to
 * the dead node and to take it back, whether the drained node finished what it had, and whether
 * each session stayed on its node while that node lived and served. Pure: the netns test (test/ops/netns.test.ts) feeds it the records and the times of its
 * faults, and its unit test feeds it made-up ones.
 */
import type { LoadRecord, LoadResult } from './load.js';

/** Wall-clock ms of each fault and of what the balancer's admin socket showed after it. */
export interface FaultTimes {
  /** The node SIGKILLed, and the one SIGSTOPped (HAProxy server names). */
  killed: string;
  stopped: string;
  /** Just before the SIGKILL was sent, and once every process of the node was gone. */
  kill: number;
  killDone: number;
  /** First poll that showed the killed node DOWN. */
  down: number;
  stop: number;
  cont: number;
  /** The killed node's ringserve started again, and its log said it serves. */
  restart: number;
  ready: number;
  /** First poll that showed the restarted node UP. */
  up: number;
  /** The node sent SIGTERM (it drains: /health 503, then exits), and when it was marked DOWN. */
  drained: string;
  drain: number;
  drainDown: number;
}

export interface FailoverReport {
  sent: number;
  /** Requests that never ended, or ended by the client's deadline: no answer at all. */
  lost: number;
  /** Requests answered with an error status or cut (socket error), or a short answer. */
  failed: number;
  /** Of those, the ones the killed node had in flight when it died. */
  failedOnKilled: number;
  /** Failed requests that were not in flight on the killed node: each is a defect. */
  failedElsewhere: LoadRecord[];
  failoverMs: number;
  /** Restart to UP in the balancer (the node's own start included), and to its first answer. */
  rejoinMs: number;
  rejoinFirstAnswerMs: number | null;
  /** Requests sent after the killed node was marked down (and before its restart) it still got. */
  sentToDeadNode: number;
  /** Sessions with more than one request, and the ones that moved while their node lived. */
  sessions: number;
  stickyViolations: string[];
  /** Requests the stopped node held through its stop and then answered. */
  heldThroughStop: number;
  /** SIGTERM to DOWN for the drained node, and the requests it had then and still answered. */
  drainMs: number;
  drainedAnswered: number;
}

/**
 * A failure is the killed node's if that node took it and it was running when the node died: sent
 * before the node was gone, ended after the kill began.
 */
function inFlightOnKilled(r: LoadRecord, t: FaultTimes): boolean {
  return r.servedBy === t.killed && r.start <= t.killDone && r.end >= t.kill;
}

function stickyViolations(records: readonly LoadRecord[], t: FaultTimes): [number, string[]] {
  const bySession = new Map<string, LoadRecord[]>();
  for (const r of records) {
    if (r.session === null || r.servedBy === null) continue;
    const list = bySession.get(r.session) ?? [];
    list.push(r);
    bySession.set(r.session, list);
  }
  const violations: string[] = [];
  let sessions = 0;
  for (const [session, list] of bySession) {
    if (list.length < 2) continue;
    sessions++;
    list.sort((a, b) => a.start - b.start);
    for (let i = 1; i < list.length; i++) {
      const before = list[i - 1]!;
      const after = list[i]!;
      if (before.servedBy === after.servedBy) continue;
      // Only a session whose node died or drains may move, and only once it has.
      if (before.servedBy === t.killed && after.start >= t.kill) continue;
      if (before.servedBy === t.drained && after.start >= t.drain) continue;
      violations.push(
        `${session}: turn ${before.turn} on ${before.servedBy}, turn ${after.turn} on ${after.servedBy}`,
      );
    }
  }
  return [sessions, violations];
}

export function analyze(result: LoadResult, t: FaultTimes, maxTokens: number): FailoverReport {
  const { records } = result;
  const unanswered = records.filter((r) => r.error === 'deadline').length;
  const failedRecords = records.filter(
    (r) => r.error !== 'deadline' && (r.status !== 200 || r.tokens !== maxTokens),
  );
  const onKilled = failedRecords.filter((r) => inFlightOnKilled(r, t));
  const rejoinAnswers = records
    .filter((r) => r.servedBy === t.killed && r.status === 200 && r.start >= t.restart)
    .map((r) => r.end);
  const [sessions, violations] = stickyViolations(records, t);
  return {
    sent: result.sent,
    lost: result.sent - records.length + unanswered,
    failed: failedRecords.length,
    failedOnKilled: onKilled.length,
    failedElsewhere: failedRecords.filter((r) => !inFlightOnKilled(r, t)),
    failoverMs: t.down - t.kill,
    rejoinMs: t.up - t.restart,
    rejoinFirstAnswerMs: rejoinAnswers.length > 0 ? Math.min(...rejoinAnswers) - t.restart : null,
    sentToDeadNode: records.filter(
      (r) => r.servedBy === t.killed && r.start > t.down && r.start < t.restart,
    ).length,
    sessions,
    stickyViolations: violations,
    heldThroughStop: records.filter(
      (r) => r.servedBy === t.stopped && r.status === 200 && r.start < t.cont && r.end > t.cont,
    ).length,
    drainMs: t.drainDown - t.drain,
    drainedAnswered: records.filter(
      (r) => r.servedBy === t.drained && r.status === 200 && r.start < t.drain && r.end > t.drain,
    ).length,
  };
}
