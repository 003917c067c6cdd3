/**
 * The one info line per finished request. Token counts and the finish reason come from what the
 * output side recorded (the request timeline, src/obs/request-timeline.ts); `fallback` names the
 * finish when it recorded nothing (a failure before any output, a client that left).
 */
import type { Logger } from '../../obs/log.js';
import type { RequestTimeline } from '../../obs/request-timeline.js';
import { finishReasonName } from '../../wire/types.js';
import type { RequestRecord } from './request-record.js';

export function logFinished(
  log: Logger | null,
  timeline: RequestTimeline | null,
  record: RequestRecord,
  status: number,
  fallback: string | null,
): void {
  if (log === null || !log.isLevelEnabled('info')) return;
  const { group, timings } = record;
  const outcome = timeline?.outcome(group.slots[0]!, group.gens[0]!) ?? null;
  const ttftMs = outcome?.ttftMs ?? null;
  log.info(
    {
      request_id: record.identity.requestId,
      status,
      prompt_tokens: record.request.promptTokenIds.length,
      completion_tokens: outcome?.completionTokens ?? null,
      finish_reason: (outcome === null ? null : finishReasonName(outcome.finish)) ?? fallback,
      latency_ms: tenths(performance.now() - timings.startMs),
      ttft_ms: ttftMs === null ? null : tenths(ttftMs),
      stream: record.stream,
    },
    'request finished',
  );
}

/** Milliseconds to one decimal, for log lines. */
const tenths = (ms: number): number => Math.round(ms * 10) / 10;
