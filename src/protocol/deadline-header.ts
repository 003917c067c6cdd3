/**
 * The `x-request-deadline-ms` request header (docs/contract.md): milliseconds from the request's
 * arrival, so that no clock is shared with the client. An API server counts it from its own
 * arrival (src/server/main/http/deadline.ts); the router counts it from the client's arrival and
 * sends each instance what is left (src/router/client-call.ts).
 */
import { RS_ERR_REQ_INVALID_FIELD } from '../errors.js';

export const DEADLINE_HEADER = 'x-request-deadline-ms';
/** setTimeout's longest delay (about 24.8 days). */
export const MAX_DEADLINE_MS = 2_147_483_647;
const DIGITS = /^[0-9]{1,10}$/;

/**
 * The header's milliseconds, or null without the header. A value that is not a whole number of
 * milliseconds in [1, MAX_DEADLINE_MS] is a 400 naming the header.
 */
export function deadlineHeaderMs(header: string | string[] | undefined): number | null {
  if (header === undefined) return null;
  const text = Array.isArray(header) ? header.join(',') : header.trim();
  const ms = DIGITS.test(text) ? Number(text) : Number.NaN;
  if (!(ms >= 1 && ms <= MAX_DEADLINE_MS)) {
    const shown = JSON.stringify(text.slice(0, 40));
    throw new RS_ERR_REQ_INVALID_FIELD(
      DEADLINE_HEADER,
      `must be a whole number of milliseconds in [1, ${MAX_DEADLINE_MS}], got ${shown}`,
    );
  }
  return ms;
}
