import { createError } from '../errors.js';

/**
 * Codes of the router's merge threads (merge-pool.ts), made by the one factory in src/errors.ts and
 * documented in docs/errors.md. They live beside the code that raises them, as the server's output
 * codes do (src/server/cross-thread/errors.ts), so a merge thread loads only this small module.
 */

/**
 * A merge thread exited (or was replaced) while it held a request's merge state: that request
 * fails, the thread is replaced, and requests on the other threads go on.
 */
export const RS_ERR_ROUTER_MERGE_WORKER = createError(
  'RS_ERR_ROUTER_MERGE_WORKER',
  'the router merge thread failed: %s',
  500,
);
