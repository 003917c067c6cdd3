/**
 * The one record of a request on the main thread, from the moment it is accepted until its slots
 * are free again: who it is, how it is answered, its sequences and how far they have come, and when
 * it started. The coordinator owns it; the slot table and the output paths reach it by (slot, gen).
 * It holds a handful of objects whatever the request's length: per-token data lives in shared
 * memory (or, for the inline baseline, in that path's own per-token objects).
 */
import type { GenerateRequest } from '../../protocol/generate-request.js';
import type { ResponseForm } from '../../protocol/generate-response.js';
import { ChoiceGroup } from './choice-group.js';
import type { ReplySink } from './reply-sink.js';

/** What names a response, fixed when the request is accepted. */
export interface ResponseIdentity {
  /** Client-visible id, without the `generate-tokens-` prefix. */
  requestId: string;
  model: string;
  /** Unix seconds. */
  created: number;
}

export interface RequestTimings {
  /** performance.now() when the request was accepted (latency in the log line and onDone). */
  readonly startMs: number;
  /** Wall-clock ms of arrival, as every choice's ADD record carries it. */
  readonly arrivalMs: number;
}

export interface RequestRecord {
  readonly identity: ResponseIdentity;
  /** The parsed body: prompt, sampling parameters, stop strings, stream options. */
  readonly request: GenerateRequest;
  readonly form: ResponseForm;
  readonly stream: boolean;
  readonly reply: ReplySink;
  /** Its sequences (choice i in group.slots[i] under group.gens[i]) and their completion. */
  readonly group: ChoiceGroup;
  readonly timings: RequestTimings;
  /** The client's answer is complete: sent, failed, or the client left. */
  settled: boolean;
  /** Its answer is being encoded from its slots' data: the slots stay taken until that is done. */
  encoding: boolean;
  /** Fires when its deadline passes unanswered (--request-timeout, x-request-deadline-ms); else null. */
  deadline: NodeJS.Timeout | null;
}

/** A new record for `request`, accepted now under `requestId`, answered to `reply` in `form`. */
export function newRequestRecord(
  requestId: string,
  model: string,
  request: GenerateRequest,
  form: ResponseForm,
  reply: ReplySink,
): RequestRecord {
  const arrivalMs = Date.now();
  return {
    identity: { requestId, model, created: Math.floor(arrivalMs / 1000) },
    request,
    form,
    stream: request.stream,
    reply,
    group: new ChoiceGroup(request.n),
    timings: { startMs: performance.now(), arrivalMs },
    settled: false,
    encoding: false,
    deadline: null,
  };
}
