/**
 * What a client's request carries into every instance call the router makes for it, beside its
 * body: its request id, its X-Session-ID (affinity.ts) and its `x-request-deadline-ms`.
 *
 * An instance counts a deadline from the call's arrival (src/protocol/deadline-header.ts), so the
 * router counts the client's from the client's arrival and sends each call what is left of it: the
 * decode call gets the client's budget less the prefill call and the merge, and the pair answers
 * within the client's deadline, not twice it. A deadline spent before a call is sent is the
 * router's own 504 (`RS_ERR_REQ_DEADLINE_EXCEEDED`, as an instance answers it); a malformed header
 * is a 400 naming it before any instance does work.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { performance } from 'node:perf_hooks';
import { RS_ERR_REQ_DEADLINE_EXCEEDED } from '../errors.js';
import { DEADLINE_HEADER, deadlineHeaderMs } from '../protocol/deadline-header.js';
import { sessionKey } from './affinity.js';

export class ClientCall {
  /** One id for both calls (each instance's logs, and the answer's id, name it). */
  readonly requestId: string;
  /** The client's X-Session-ID: both calls go to the session's instances; undefined: none. */
  readonly session: string | undefined;
  /** The client's deadline in ms from its arrival; null: it gave none. */
  readonly #deadlineMs: number | null;
  readonly #arrivalMs: number;

  /** Reads the request at the client's arrival; a malformed deadline throws the 400. */
  constructor(
    headers: IncomingHttpHeaders,
    body: Record<string, unknown>,
    arrivalMs: number = performance.now(),
  ) {
    this.requestId = requestIdFor(headers['x-request-id'], body);
    this.session = sessionKey(headers);
    this.#deadlineMs = deadlineHeaderMs(headers[DEADLINE_HEADER]);
    this.#arrivalMs = arrivalMs;
  }

  /**
   * The headers of one instance call, made now: the request id and, when the client gave a
   * deadline, the whole milliseconds left of it. Throws the 504 when none are left.
   */
  headers(nowMs: number = performance.now()): Record<string, string> {
    const out: Record<string, string> = { 'x-request-id': this.requestId };
    if (this.#deadlineMs === null) return out;
    const left = Math.floor(this.#deadlineMs - (nowMs - this.#arrivalMs));
    if (left < 1)
      throw new RS_ERR_REQ_DEADLINE_EXCEEDED(this.requestId, this.#deadlineMs, DEADLINE_HEADER);
    out[DEADLINE_HEADER] = String(left);
    return out;
  }
}

/** The client's X-Request-Id, else its body's `request_id` (checked by the instance), else a new one. */
function requestIdFor(
  header: string | string[] | undefined,
  body: Record<string, unknown>,
): string {
  if (typeof header === 'string' && header !== '') return header;
  return typeof body.request_id === 'string' ? body.request_id : randomUUID();
}
