// Coded errors of the shared-memory layer. One factory, stable codes `RS_ERR_<AREA>_<WHAT>` (never
// reused), message templates with `%s`. The native addon throws the same codes (see native/).
// The project-wide registry (src/errors.ts) lists these codes too; this module stays dependency-free
// because it is loaded by worker threads and child processes on their hot start-up path.

export const SHM_ERROR_MESSAGES = {
  RS_ERR_ADDON_BUILD: 'the native addon could not be built: %s',
  RS_ERR_ADDON_MISSING:
    'the native addon %s is not built: run `npm ci` or `npm run build:addon` (%s)',
  RS_ERR_SHM_OPEN: 'cannot open shared-memory region %s: %s',
  RS_ERR_SHM_MMAP: 'cannot map shared-memory region %s: %s',
  RS_ERR_SHM_EXISTS: 'shared-memory region %s already exists',
  RS_ERR_SHM_NOT_FOUND: 'shared-memory region %s does not exist',
  RS_ERR_SHM_NO_SPACE: 'no room in /dev/shm for region %s: %s',
  RS_ERR_SHM_UNLINK: 'cannot unlink shared-memory region %s: %s',
  RS_ERR_SHM_BAD_NAME: 'bad shared-memory region name %s',
  RS_ERR_SHM_BAD_ARGUMENT: 'bad argument to a shared-memory call: %s',
  RS_ERR_SHM_FUTEX: 'futex call failed: %s',
  RS_ERR_SHM_BAD_MAGIC: 'region %s is not a ringserve region (magic 0x%s)',
  RS_ERR_SHM_LAYOUT_VERSION: 'region %s has layout version %s, this build reads version %s',
  RS_ERR_SHM_BAD_LAYOUT: 'bad region layout: %s',
  RS_ERR_SHM_LOCK_TIMEOUT: 'control lock of region %s not acquired within %s ms (held by pid %s)',
  RS_ERR_SHM_CONTROL_TIMEOUT: 'engine did not acknowledge control command %s within %s ms',
  RS_ERR_RING_FULL: 'ring at offset %s: no room for a %s-byte record within %s ms',
  RS_ERR_RING_RECORD_TOO_LARGE:
    'a %s-byte record cannot fit a %s-byte ring (largest payload %s bytes)',
  RS_ERR_RING_PEER_GONE: 'ring at offset %s: the %s (pid %s) is gone',
  RS_ERR_RING_BAD_CAPACITY: 'ring capacity %s must be a power of two in [64, 2^30]',
  RS_ERR_RING_BAD_TYPE: 'record type %s must be an integer in [1, 2^31-1] (0 marks padding)',
  RS_ERR_RING_CORRUPT: 'ring at offset %s is corrupt: %s',
} as const;

export type ShmErrorCode = keyof typeof SHM_ERROR_MESSAGES;

/** Every code this layer (JS and native) can raise, for the project-wide registry's pinning test. */
export const SHM_ERROR_CODES = Object.keys(SHM_ERROR_MESSAGES) as ShmErrorCode[];

export class ShmError extends Error {
  readonly code: ShmErrorCode;

  constructor(code: ShmErrorCode, message: string) {
    super(`${code}: ${message}`);
    this.name = 'ShmError';
    this.code = code;
  }
}

/** Builds the coded error; `args` fill the template's `%s` in order. */
export function shmError(code: ShmErrorCode, ...args: Array<string | number>): ShmError {
  let next = 0;
  const message = SHM_ERROR_MESSAGES[code].replace(/%s/g, () => String(args[next++] ?? ''));
  return new ShmError(code, message);
}
