import { createError } from '../../errors.js';

/**
 * Codes of the API server's output side (output worker, block arena, packers), made by the one
 * factory in src/errors.ts and documented in docs/errors.md. They live beside the code that raises
 * them so worker threads load only this small module.
 */

/** A request's columns need more arena than maxByteLength allows: that request fails, others go on. */
export const RS_ERR_OUTPUT_ARENA_FULL = createError(
  'RS_ERR_OUTPUT_ARENA_FULL',
  'the output arena is full: %s',
  503,
);

/** The engine sent outputs that break the STEP format's rules (a bug on the engine side). */
export const RS_ERR_OUTPUT_BAD_STEP = createError(
  'RS_ERR_OUTPUT_BAD_STEP',
  'an engine output breaks the step format: %s',
  500,
);

/** A slot index or generation outside its range, or a table size out of range (a caller bug). */
export const RS_ERR_OUTPUT_BAD_SLOT = createError(
  'RS_ERR_OUTPUT_BAD_SLOT',
  'request slot %s: %s',
  500,
);

/** The output worker thread threw or exited; every in-flight request of the server fails. */
export const RS_ERR_OUTPUT_WORKER_FAILED = createError(
  'RS_ERR_OUTPUT_WORKER_FAILED',
  'the output worker failed: %s',
  500,
);

/** The output worker did not start or stop within its bound. */
export const RS_ERR_OUTPUT_WORKER_TIMEOUT = createError(
  'RS_ERR_OUTPUT_WORKER_TIMEOUT',
  'the output worker did not %s within %s ms',
  503,
);

/** A packer did not return a response within its bound. */
export const RS_ERR_OUTPUT_PACK_TIMEOUT = createError(
  'RS_ERR_OUTPUT_PACK_TIMEOUT',
  'encoding the response of request %s took longer than %s ms',
  503,
);

/** A packer was asked for a slot that holds no finished response of that request (a caller bug). */
export const RS_ERR_OUTPUT_NOT_FINISHED = createError(
  'RS_ERR_OUTPUT_NOT_FINISHED',
  'request slot %s holds no finished response of generation %s',
  500,
);
