import { type RingserveError, SHM_ERRORS, type ShmErrorCode } from '../errors.js';

/**
 * Builds a coded error of the shared-memory layer (src/errors.ts holds the codes and templates);
 * `args` fill the template's `%s` in order. The native addon throws the same codes (see native/).
 */
export function shmError(code: ShmErrorCode, ...args: Array<string | number>): RingserveError {
  return new SHM_ERRORS[code](...args);
}
