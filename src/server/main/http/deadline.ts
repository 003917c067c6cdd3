/**
 * A generate request's deadline: `--request-timeout` seconds, or the request's own
 * `x-request-deadline-ms` header (milliseconds from its arrival, so no clock is shared with the
 * client) when that is shorter. A header that is not a whole number of milliseconds in range is a
 * 400 naming it.
 */
import { RS_ERR_REQ_INVALID_FIELD } from '../../../errors.js';
import type { RequestDeadline } from '../request-coordinator.js';

export const DEADLINE_HEADER = 'x-request-deadline-ms';
/** setTimeout's longest delay (about 24.8 days). */
const MAX_DEADLINE_MS = 2_147_483_647;
const DIGITS = /^[0-9]{1,10}$/;

export function requestDeadline(
  header: string | string[] | undefined,
  requestTimeoutS: number,
): RequestDeadline | null {
  const timeoutMs = requestTimeoutS > 0 ? Math.min(requestTimeoutS * 1000, MAX_DEADLINE_MS) : null;
  if (header === undefined) {
    return timeoutMs === null ? null : { ms: timeoutMs, source: '--request-timeout' };
  }
  const text = Array.isArray(header) ? header.join(',') : header.trim();
  const ms = DIGITS.test(text) ? Number(text) : Number.NaN;
  if (!(ms >= 1 && ms <= MAX_DEADLINE_MS)) {
    const shown = JSON.stringify(text.slice(0, 40));
    throw new RS_ERR_REQ_INVALID_FIELD(
      DEADLINE_HEADER,
      `must be a whole number of milliseconds in [1, ${MAX_DEADLINE_MS}], got ${shown}`,
    );
  }
  if (timeoutMs !== null && timeoutMs <= ms) return { ms: timeoutMs, source: '--request-timeout' };
  return { ms, source: DEADLINE_HEADER };
}
