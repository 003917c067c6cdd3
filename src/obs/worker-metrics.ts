/**
 * How an API server's output worker finds where to record request metrics. The main thread shares
 * the region, the index of its request-metrics slots and the request timeline through
 * worker_threads' environment data before it starts the worker; every Worker created afterwards
 * receives a clone (SharedArrayBuffers are shared, not copied). This keeps the output worker's start
 * message (output/messages.ts) about output alone: metrics are an observer that attaches to the
 * output loop when it finds its share, and an output loop run without one (tests, tools) records none.
 */
import { getEnvironmentData, setEnvironmentData } from 'node:worker_threads';
import { slotsView } from '../shm/words.js';
import { RequestRecorder } from './request-recorder.js';
import { RequestTimeline } from './request-timeline.js';
import { threadHealthPoll } from './thread-health-share.js';

const ENVIRONMENT_KEY = 'ringserve:request-metrics';

export interface RequestMetricsShare {
  /** The buffer holding the request-metrics slots (the cluster's region). */
  metricsSab: SharedArrayBuffer;
  /** f64 index of RM_* slot 0 (layout.requestMetricsIndex). */
  metricsIndex: number;
  timelineSab: SharedArrayBuffer;
  maxModelLen: number;
}

/** Main thread, before the output worker starts. */
export function shareRequestMetrics(share: RequestMetricsShare): void {
  setEnvironmentData(ENVIRONMENT_KEY, share as unknown as Parameters<typeof setEnvironmentData>[1]);
}

/** Stops sharing (tests that start several output paths in one process). */
export function unshareRequestMetrics(): void {
  setEnvironmentData(ENVIRONMENT_KEY, undefined);
}

/**
 * The recorder of the output side of this API server (its output worker, or the main thread for the
 * inline baseline), or null when no share was set up for this thread. `promptLen(slot)`: the prompt
 * length of the slot's current request.
 */
export function recorderFromEnvironment(
  promptLen: (slot: number) => number,
): RequestRecorder | null {
  const share = getEnvironmentData(ENVIRONMENT_KEY) as RequestMetricsShare | undefined;
  if (share === undefined) return null;
  const poll = threadHealthPoll();
  return new RequestRecorder({
    ...(poll === null ? {} : { onStep: poll }),
    slots: slotsView(share.metricsSab),
    base: share.metricsIndex,
    timeline: new RequestTimeline(share.timelineSab),
    promptLen,
    maxModelLen: share.maxModelLen,
  });
}
