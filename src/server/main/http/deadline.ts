/**
 * A generate request's deadline: `--request-timeout` seconds, or the request's own
 * `x-request-deadline-ms` header (src/protocol/deadline-header.ts: milliseconds from its arrival)
 * when that is shorter. A header that is not a whole number of milliseconds in range is a 400
 * naming it.
 */
import {
  DEADLINE_HEADER,
  deadlineHeaderMs,
  MAX_DEADLINE_MS,
} from '../../../protocol/deadline-header.js';
import type { RequestDeadline } from '../request-coordinator.js';

export function requestDeadline(
  header: string | string[] | undefined,
  requestTimeoutS: number,
): RequestDeadline | null {
  const timeoutMs = requestTimeoutS > 0 ? Math.min(requestTimeoutS * 1000, MAX_DEADLINE_MS) : null;
  const ms = deadlineHeaderMs(header);
  if (ms === null)
    return timeoutMs === null ? null : { ms: timeoutMs, source: '--request-timeout' };
  if (timeoutMs !== null && timeoutMs <= ms) return { ms: timeoutMs, source: '--request-timeout' };
  return { ms, source: DEADLINE_HEADER };
}
