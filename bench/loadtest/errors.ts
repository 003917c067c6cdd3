import { createError } from '../../src/errors.js';

/**
 * Codes of the benchmarks (bench/), made by the one factory in src/errors.ts and documented in
 * docs/errors.md. A benchmark never hangs: every wait on a cluster, a child process or an answer
 * has a bound and ends in one of these.
 */

/** A wait ran past its bound: a cluster that does not start, a child that does not answer. */
export const RS_ERR_BENCH_TIMEOUT = createError(
  'RS_ERR_BENCH_TIMEOUT',
  '%s did not happen within %s ms',
  500,
);

/** A process the benchmark started (cluster, load generator, probe, bare server) failed. */
export const RS_ERR_BENCH_CHILD_FAILED = createError(
  'RS_ERR_BENCH_CHILD_FAILED',
  'the %s process failed: %s',
  500,
);

/** A /metrics answer is not Prometheus text, or lacks a series the benchmark reads. */
export const RS_ERR_BENCH_METRICS = createError('RS_ERR_BENCH_METRICS', '/metrics: %s', 500);
