import type { MetricsSnapshot } from './prom-text.js';

/**
 * The IPC messages between a benchmark and the processes it forks: the load generator, the probe
 * and the floor server. They are few per second (start, progress, stop, result), never one per request.
 */

/** The load a generator applies: closed loop, `concurrency` requests always in flight. */
export interface LoadSpec {
  /** Base URL of the server under test, e.g. http://127.0.0.1:41234 */
  url: string;
  /** Route path; the generate route unless a bare server is measured. */
  path: string;
  concurrency: number;
  promptTokens: number;
  /** Mean of the response-length distribution (a log-normal; `sigma` 0 makes every length equal). */
  meanTokens: number;
  sigma: number;
  minTokens: number;
  maxTokens: number;
  /** Prompt ids are drawn below this (clear of every preset's special and EOS ids). */
  promptIdCeiling: number;
  accept: 'json' | 'msgpack';
  /** Seed of prompts, lengths and sampling seeds: the same seed, the same load. */
  seed: number;
  /** Bound on one request, headers to last byte. */
  requestTimeoutMs: number;
  /** Save up to this many response bodies into `sampleDir` (for the client-parse measurement). */
  sampleBodies: number;
  sampleDir: string | null;
}

/** The probe: /health every healthEveryMs, /metrics every metricsEveryMs, a control cycle. */
export interface ProbeSpec {
  url: string;
  healthEveryMs: number;
  metricsEveryMs: number;
  /** 0 disables the pause -> update_weights -> resume cycle. */
  cycleEveryMs: number;
  /** Bound on one probe or control call; a call that reaches it is recorded at this latency. */
  callTimeoutMs: number;
  /**
   * The cluster's shared region, mapped to read the engine's own generated-token counter at each
   * scrape (a count that does not depend on which output path the API servers run); null: none.
   */
  regionName: string | null;
  /** The floor server (floor-server.ts), probed like /health and out of phase with it. */
  floorUrl: string;
}

/** The floor server takes no settings: it listens on an ephemeral loopback port. */
export type FloorSpec = Record<string, never>;

/** Sent once, when the floor server listens. */
export interface FloorProgress {
  url: string;
}

export type FloorResult = Record<string, never>;

export interface LoadProgress {
  done: number;
  errors: number;
  bytes: number;
  tokens: number;
}

export interface LoadResult extends LoadProgress {
  /** Epoch ms the loop started. */
  startedAtMs: number;
  /** Per finished request: epoch ms of its last byte, latency ms, body bytes, completion tokens. */
  finishedAtMs: number[];
  latencyMs: number[];
  bodyBytes: number[];
  completionTokens: number[];
  /** Requests whose token count did not match the max_tokens asked (ignore_eos makes them equal). */
  lengthMismatches: number;
  /** Requests still in flight when the generator was stopped (not counted as done). */
  cut: number;
  /** The first few error messages, with HTTP status where there was one. */
  errorSamples: string[];
  /** Files written into sampleDir, with the content type each was answered with. */
  sampledBodies: { file: string; contentType: string; tokens: number }[];
}

export interface ProbeProgress {
  healthCount: number;
  healthLastMs: number;
  healthMaxMs: number;
  cycles: number;
}

export interface ProbeResult {
  /** Per /health probe: epoch ms it was due, latency ms (timeouts at callTimeoutMs), status. */
  healthAtMs: number[];
  healthMs: number[];
  healthStatus: number[];
  /** The same for the floor server's /health. */
  floorAtMs: number[];
  floorMs: number[];
  floorStatus: number[];
  /** Per completed scrape, in order. */
  metrics: MetricsSnapshot[];
  /** The engine's generated-token counter (engine stats block), read at each scrape. */
  engineTokensAtMs: number[];
  engineTokens: number[];
  /** Scrapes that failed (status, timeout, unparsable), with the first message. */
  metricsFailures: number;
  metricsFailureSample: string | null;
  /** Per control cycle: epoch ms it began, then ms of pause, update_weights, resume, whole cycle. */
  cycleAtMs: number[];
  pauseMs: number[];
  updateMs: number[];
  resumeMs: number[];
  cycleMs: number[];
  cycleFailures: number;
  cycleFailureSample: string | null;
  /**
   * The scrape after drain: taken once the load generator's requests are done ('load-done'), no
   * API server has a request in flight, and the processes have had a second to settle; null if
   * it failed. `drainProblem` says what went wrong on the way, if anything did.
   */
  drain: MetricsSnapshot | null;
  drainProblem: string | null;
}

/** 'load-done' (to the probe, after its 'stop'): the load generator's requests have all ended. */
export type ParentMessage =
  | { type: 'start'; spec: LoadSpec | ProbeSpec | FloorSpec }
  | { type: 'stop' }
  | { type: 'load-done' };

export type ChildMessage =
  | { type: 'ready' }
  | { type: 'progress'; progress: LoadProgress | ProbeProgress | FloorProgress }
  | { type: 'result'; result: LoadResult | ProbeResult | FloorResult }
  | { type: 'failed'; message: string };
