/**
 * The limits on a request's stop strings. The output side keeps each request's stop strings in a
 * fixed-size row of shared memory (src/server/cross-thread/slot-meta.ts), so these bounds are what it can
 * hold; request parsing refuses more with a 400 on `sampling_params.stop`.
 */

/** Stop strings per request, and their total UTF-8 bytes. */
export const MAX_STOP_STRINGS = 16;
export const STOP_BYTES_LIMIT = 1024;

/** Why `stop` cannot be stored (too many strings, too many bytes, an empty one), or null. */
export function stopStringsProblem(stop: readonly string[]): string | null {
  if (stop.length > MAX_STOP_STRINGS) {
    return `at most ${MAX_STOP_STRINGS} stop strings are supported, got ${stop.length}`;
  }
  let bytes = 0;
  for (const s of stop) {
    if (s.length === 0) return 'stop strings must not be empty';
    bytes += Buffer.byteLength(s, 'utf8');
  }
  if (bytes > STOP_BYTES_LIMIT) {
    return `stop strings may total at most ${STOP_BYTES_LIMIT} UTF-8 bytes, got ${bytes}`;
  }
  return null;
}
