import { format } from 'node:util';

/**
 * Every error ringserve raises on purpose is made here, the way fastify's `@fastify/error` does it:
 * one factory, a stable code, a printf-style message template and an HTTP status. Codes are
 * `RS_ERR_<AREA>_<WHAT>` and are never reused for another meaning; docs/errors.md documents each one
 * and test/errors.test.ts pins the list, so adding a code means adding its row there too.
 */

/** An error carrying a stable code, the HTTP status it maps to, and the field or flag it is about. */
export class RingserveError extends Error {
  readonly code: string;
  readonly statusCode: number;
  /** The request field path (`sampling_params.top_p`) or CLI flag (`--port`) at fault, else null. */
  readonly param: string | null;

  constructor(code: string, message: string, statusCode: number, param: string | null) {
    super(message);
    this.name = 'RingserveError';
    this.code = code;
    this.statusCode = statusCode;
    this.param = param;
  }
}

/** A constructor made by createError; `new RS_ERR_X(...templateArgs)`. */
export interface RingserveErrorConstructor {
  new (...args: unknown[]): RingserveError;
  readonly code: string;
  readonly statusCode: number;
  readonly template: string;
}

export interface CreateErrorOptions {
  /** Which template argument names the field or flag (copied to `param`). */
  paramArg?: number;
  /** A fixed `param` for errors that are always about one field (e.g. `model`). */
  param?: string;
}

/** One entry of the code registry, as documented in docs/errors.md. */
export interface ErrorCodeInfo {
  code: string;
  statusCode: number;
  template: string;
}

const registry = new Map<string, ErrorCodeInfo>();
/** The constructor of each code, so an error mapped from its code is an instance of it too. */
const constructors = new Map<string, RingserveErrorConstructor>();
const CODE_PATTERN = /^RS_ERR_[A-Z0-9]+_[A-Z0-9_]+$/;

/**
 * Make an error constructor with a stable `code`, a `%s` message template and an HTTP status.
 * Extra template arguments are appended by util.format, missing ones leave `%s` in place, so a
 * caller passing the wrong count still gets a readable message rather than a second error.
 */
export function createError(
  code: string,
  template: string,
  statusCode: number,
  options: CreateErrorOptions = {},
): RingserveErrorConstructor {
  if (!CODE_PATTERN.test(code))
    throw new TypeError(`error code ${code} is not RS_ERR_<AREA>_<WHAT>`);
  if (registry.has(code)) throw new TypeError(`error code ${code} is defined twice`);
  registry.set(code, { code, statusCode, template });
  const { paramArg, param: fixedParam = null } = options;
  const ctor = class extends RingserveError {
    static readonly code = code;
    static readonly statusCode = statusCode;
    static readonly template = template;
    constructor(...args: unknown[]) {
      const param = paramArg === undefined ? fixedParam : String(args[paramArg]);
      super(code, format(template, ...args), statusCode, param);
    }
  };
  Object.defineProperty(ctor, 'name', { value: code });
  constructors.set(code, ctor);
  return ctor;
}

/** All registered codes in definition order. */
export function listErrorCodes(): ErrorCodeInfo[] {
  return [...registry.values()];
}

export function isRingserveError(err: unknown): err is RingserveError {
  return err instanceof RingserveError;
}

// Request validation (400). `param` is the field path, e.g. `sampling_params.top_p`, `token_ids[3]`.
export const RS_ERR_REQ_INVALID_FIELD = createError('RS_ERR_REQ_INVALID_FIELD', '%s: %s', 400, {
  paramArg: 0,
});
export const RS_ERR_REQ_INVALID_BODY = createError(
  'RS_ERR_REQ_INVALID_BODY',
  'request body is not valid: %s',
  400,
);
// 409 as the contract says: the body is fine, it conflicts with a request this server is running.
export const RS_ERR_REQ_DUPLICATE_ID = createError(
  'RS_ERR_REQ_DUPLICATE_ID',
  'request id %s is already in flight',
  409,
  { param: 'request_id' },
);

// HTTP layer.
export const RS_ERR_HTTP_BODY_TOO_LARGE = createError(
  'RS_ERR_HTTP_BODY_TOO_LARGE',
  'request body is too large: %s',
  413,
);
export const RS_ERR_HTTP_UNSUPPORTED_MEDIA_TYPE = createError(
  'RS_ERR_HTTP_UNSUPPORTED_MEDIA_TYPE',
  'unsupported Content-Type %s: send application/json or application/msgpack',
  415,
);
export const RS_ERR_HTTP_ROUTE_NOT_FOUND = createError(
  'RS_ERR_HTTP_ROUTE_NOT_FOUND',
  'route %s %s not found',
  404,
);
export const RS_ERR_MODEL_NOT_FOUND = createError(
  'RS_ERR_MODEL_NOT_FOUND',
  'the model `%s` does not exist',
  404,
  { param: 'model' },
);
export const RS_ERR_AUTH_UNAUTHORIZED = createError(
  'RS_ERR_AUTH_UNAUTHORIZED',
  'missing or wrong API key',
  401,
);
// Node's HTTP parser refused the request before any route saw it (client-error.ts answers).
export const RS_ERR_HTTP_MALFORMED = createError(
  'RS_ERR_HTTP_MALFORMED',
  'the HTTP request could not be parsed: %s',
  400,
);
export const RS_ERR_HTTP_HEADERS_TOO_LARGE = createError(
  'RS_ERR_HTTP_HEADERS_TOO_LARGE',
  'the request headers are larger than the server accepts',
  431,
);
export const RS_ERR_HTTP_CLIENT_TIMEOUT = createError(
  'RS_ERR_HTTP_CLIENT_TIMEOUT',
  'the request was not received in time',
  408,
);

// Server state (429/503): the request is refused, the server itself is fine.
export const RS_ERR_SERVER_QUEUE_FULL = createError(
  'RS_ERR_SERVER_QUEUE_FULL',
  'the request queue is full (%s requests waiting); retry later',
  429,
);
export const RS_ERR_SERVER_DRAINING = createError(
  'RS_ERR_SERVER_DRAINING',
  'the server is draining or shutting down',
  503,
);
export const RS_ERR_ENGINE_DEAD = createError(
  'RS_ERR_ENGINE_DEAD',
  'the engine core is not running: %s',
  503,
);
export const RS_ERR_ENGINE_UNAVAILABLE = createError(
  'RS_ERR_ENGINE_UNAVAILABLE',
  'the engine cannot take requests: %s',
  503,
);
export const RS_ERR_ENGINE_UNRESPONSIVE = createError(
  'RS_ERR_ENGINE_UNRESPONSIVE',
  'the engine core did not answer within %s ms',
  503,
);
export const RS_ERR_ENGINE_REQUEST_FAILED = createError(
  'RS_ERR_ENGINE_REQUEST_FAILED',
  'the engine could not run request %s: %s',
  500,
);
export const RS_ERR_ENGINE_ROUTING_SHAPE = createError(
  'RS_ERR_ENGINE_ROUTING_SHAPE',
  'request %s failed: %s',
  503,
);
// --request-timeout or the request's x-request-deadline-ms passed before its answer was complete.
export const RS_ERR_REQ_DEADLINE_EXCEEDED = createError(
  'RS_ERR_REQ_DEADLINE_EXCEEDED',
  'request %s was not answered within its deadline of %s ms (%s); it was aborted',
  504,
);

// The control plane (pause, resume, update_weights, reset_prefix_cache) through the region's control
// block: src/wire/control-channel.ts raises them, the control routes answer with them.
export const RS_ERR_CONTROL_TIMEOUT = createError(
  'RS_ERR_CONTROL_TIMEOUT',
  'the engine did not acknowledge the %s command within %s ms',
  503,
);
export const RS_ERR_CONTROL_REFUSED = createError(
  'RS_ERR_CONTROL_REFUSED',
  'the engine refused the %s command: %s',
  409,
);
export const RS_ERR_CONTROL_FAILED = createError(
  'RS_ERR_CONTROL_FAILED',
  'the engine failed to carry out the %s command (result %s): %s',
  500,
);
// What a control command names is not there: a LoRA adapter's files, an adapter not loaded.
export const RS_ERR_CONTROL_NOT_FOUND = createError(
  'RS_ERR_CONTROL_NOT_FOUND',
  'the %s command: %s',
  404,
);
export const RS_ERR_CONTROL_BAD_ARGUMENT = createError(
  'RS_ERR_CONTROL_BAD_ARGUMENT',
  'the %s command does not fit the control block: %s',
  500,
);

// Shared memory, rings and the native addon (src/shm/). The addon throws the same codes from C++
// (plain Errors carrying `code`; toRingserveError maps them to these), and scripts/build-addon.mjs
// prints RS_ERR_ADDON_BUILD.
export const RS_ERR_ADDON_BUILD = createError(
  'RS_ERR_ADDON_BUILD',
  'the native addon could not be built: %s',
  500,
);
export const RS_ERR_ADDON_MISSING = createError(
  'RS_ERR_ADDON_MISSING',
  'the native addon %s is not built: run `npm ci` or `npm run build:addon` (%s)',
  500,
);
export const RS_ERR_SHM_OPEN = createError(
  'RS_ERR_SHM_OPEN',
  'cannot open shared-memory region %s: %s',
  500,
);
export const RS_ERR_SHM_MMAP = createError(
  'RS_ERR_SHM_MMAP',
  'cannot map shared-memory region %s: %s',
  500,
);
export const RS_ERR_SHM_EXISTS = createError(
  'RS_ERR_SHM_EXISTS',
  'shared-memory region %s already exists',
  500,
);
export const RS_ERR_SHM_NOT_FOUND = createError(
  'RS_ERR_SHM_NOT_FOUND',
  'shared-memory region %s does not exist',
  500,
);
export const RS_ERR_SHM_NO_SPACE = createError(
  'RS_ERR_SHM_NO_SPACE',
  'no room in /dev/shm for region %s: %s',
  500,
);
export const RS_ERR_SHM_UNLINK = createError(
  'RS_ERR_SHM_UNLINK',
  'cannot unlink shared-memory region %s: %s',
  500,
);
export const RS_ERR_SHM_BAD_NAME = createError(
  'RS_ERR_SHM_BAD_NAME',
  'bad shared-memory region name %s',
  500,
);
export const RS_ERR_SHM_BAD_ARGUMENT = createError(
  'RS_ERR_SHM_BAD_ARGUMENT',
  'bad argument to a shared-memory call: %s',
  500,
);
export const RS_ERR_SHM_FUTEX = createError('RS_ERR_SHM_FUTEX', 'futex call failed: %s', 500);
export const RS_ERR_SHM_PRIORITY = createError(
  'RS_ERR_SHM_PRIORITY',
  'cannot set the scheduling priority of a thread: %s',
  500,
);
export const RS_ERR_SHM_BAD_MAGIC = createError(
  'RS_ERR_SHM_BAD_MAGIC',
  'region %s is not a ringserve region (magic 0x%s)',
  500,
);
export const RS_ERR_SHM_LAYOUT_VERSION = createError(
  'RS_ERR_SHM_LAYOUT_VERSION',
  'region %s has layout version %s, this build reads version %s',
  500,
);
export const RS_ERR_SHM_BAD_LAYOUT = createError(
  'RS_ERR_SHM_BAD_LAYOUT',
  'bad region layout: %s',
  500,
);
export const RS_ERR_RING_FULL = createError(
  'RS_ERR_RING_FULL',
  'ring at offset %s: no room for a %s-byte record within %s ms',
  503,
);
export const RS_ERR_RING_RECORD_TOO_LARGE = createError(
  'RS_ERR_RING_RECORD_TOO_LARGE',
  'a %s-byte record cannot fit a %s-byte ring (largest payload %s bytes)',
  500,
);
export const RS_ERR_RING_PEER_GONE = createError(
  'RS_ERR_RING_PEER_GONE',
  'ring at offset %s: the %s (pid %s) is gone',
  503,
);
export const RS_ERR_RING_BAD_CAPACITY = createError(
  'RS_ERR_RING_BAD_CAPACITY',
  'ring capacity %s must be a power of two in [64, 2^30]',
  500,
);
export const RS_ERR_RING_BAD_TYPE = createError(
  'RS_ERR_RING_BAD_TYPE',
  'record type %s must be an integer in [1, 2^31-1] (0 marks padding)',
  500,
);
export const RS_ERR_RING_CORRUPT = createError(
  'RS_ERR_RING_CORRUPT',
  'ring at offset %s is corrupt: %s',
  500,
);

// Configuration. `param` is the flag, e.g. `--port`.
export const RS_ERR_CONFIG_INVALID = createError('RS_ERR_CONFIG_INVALID', '%s: %s', 500, {
  paramArg: 0,
});

// Encoders: a caller handed columns that do not describe a valid response (a bug, not bad input).
export const RS_ERR_PROTOCOL_BAD_COLUMNS = createError(
  'RS_ERR_PROTOCOL_BAD_COLUMNS',
  'response columns are inconsistent: %s',
  500,
);

// The TypeScript client (src/client/).
export const RS_ERR_CLIENT_HTTP = createError('RS_ERR_CLIENT_HTTP', 'server answered %s: %s', 502);
export const RS_ERR_CLIENT_DECODE = createError(
  'RS_ERR_CLIENT_DECODE',
  'response could not be decoded: %s',
  502,
);
export const RS_ERR_CLIENT_INVARIANT = createError(
  'RS_ERR_CLIENT_INVARIANT',
  'response breaks an invariant: %s',
  502,
);
export const RS_ERR_CLIENT_TIMEOUT = createError(
  'RS_ERR_CLIENT_TIMEOUT',
  'no complete answer within %s ms',
  504,
);

// The P/D router (src/router/): what an upstream instance answered that it cannot merge.
export const RS_ERR_ROUTER_SHORT_ROWS = createError(
  'RS_ERR_ROUTER_SHORT_ROWS',
  'decode answer for choice %s lacks routing rows: %s',
  502,
);
export const RS_ERR_ROUTER_UPSTREAM = createError(
  'RS_ERR_ROUTER_UPSTREAM',
  '%s instance %s failed: %s',
  502,
);
export const RS_ERR_ROUTER_NO_INSTANCE = createError(
  'RS_ERR_ROUTER_NO_INSTANCE',
  'no healthy %s instance',
  503,
);
/** An admin call the router sent to every instance failed on some of them (fan-out.ts). */
export const RS_ERR_ROUTER_FAN_OUT = createError(
  'RS_ERR_ROUTER_FAN_OUT',
  '%s failed on %s of %s instances: %s',
  502,
);
/** POST/DELETE /instances names no member of that role. */
export const RS_ERR_ROUTER_INSTANCE_NOT_FOUND = createError(
  'RS_ERR_ROUTER_INSTANCE_NOT_FOUND',
  'no %s instance %s',
  404,
  { param: 'url' },
);
/** A membership change that would leave the router unable to serve, or races a removal. */
export const RS_ERR_ROUTER_INSTANCE_CONFLICT = createError(
  'RS_ERR_ROUTER_INSTANCE_CONFLICT',
  '%s',
  409,
  { param: 'url' },
);
/** DELETE /instances: the removed instance still had requests when the drain timeout ran out. */
export const RS_ERR_ROUTER_DRAIN_TIMEOUT = createError(
  'RS_ERR_ROUTER_DRAIN_TIMEOUT',
  '%s instance %s still has %s requests in flight after %s s: it takes no new ones and is dropped once they finish',
  503,
  { param: 'url' },
);

// The OpenAI routes.
export const RS_ERR_OPENAI_INLINE_OUTPUT = createError(
  'RS_ERR_OPENAI_INLINE_OUTPUT',
  '%s needs --output-processing workers: the inline baseline answers /inference/v1/generate only',
  501,
);

export const RS_ERR_SERVER_INTERNAL = createError(
  'RS_ERR_SERVER_INTERNAL',
  'internal error: %s',
  500,
);

// Failures injected on purpose for clients' own tests (--failure-rate, x-ringserve-fail):
// src/server/main/http/failure-injection.ts. Each answers as the real failure it imitates would.
export const RS_ERR_INJECTED_RATE_LIMIT = createError(
  'RS_ERR_INJECTED_RATE_LIMIT',
  'injected failure (rate_limit): the server is rate limiting requests; retry later',
  429,
);
export const RS_ERR_INJECTED_UNAVAILABLE = createError(
  'RS_ERR_INJECTED_UNAVAILABLE',
  'injected failure (unavailable): the engine is not available',
  503,
);
export const RS_ERR_INJECTED_CONTEXT_LENGTH = createError(
  'RS_ERR_INJECTED_CONTEXT_LENGTH',
  "injected failure (context_length): this model's maximum context length is %s tokens",
  400,
  { param: 'token_ids' },
);

// vLLM engine protocol (src/engine/vllm/): `param` is the message field at fault.
export const RS_ERR_VLLM_BAD_FIELD = createError(
  'RS_ERR_VLLM_BAD_FIELD',
  'vLLM message field %s: %s',
  500,
  { paramArg: 0 },
);
export const RS_ERR_VLLM_DECODE = createError(
  'RS_ERR_VLLM_DECODE',
  'undecodable vLLM message at %s: %s',
  500,
  { paramArg: 0 },
);
export const RS_ERR_VLLM_LAYOUT = createError(
  'RS_ERR_VLLM_LAYOUT',
  'no vLLM message layout fits the engine: %s',
  503,
);
export const RS_ERR_VLLM_HANDSHAKE = createError(
  'RS_ERR_VLLM_HANDSHAKE',
  'vLLM handshake failed: %s',
  500,
);
export const RS_ERR_ZMTP_PROTOCOL = createError(
  'RS_ERR_ZMTP_PROTOCOL',
  'ZMTP peer refused: %s',
  502,
);

/**
 * How a ringserve process ends, for whoever started it: the CLI and `ringserve-bench` for a shell
 * or a script, the supervisor's children for the supervisor (which restarts them and logs why).
 * Every `process.exit` in src/ and bench/ takes its number from here; docs/errors.md lists them.
 */
export const ExitCode = {
  /** Done, or stopped by SIGTERM/SIGINT after draining. */
  Ok: 0,
  /** Failed at start-up or while running; the log or stderr says why. */
  Failure: 1,
  /** Bad command line: an unknown command, or RS_ERR_CONFIG_INVALID (a flag out of range). */
  Usage: 2,
  /** An API server whose output worker died (sysexits' EX_SOFTWARE); the supervisor restarts it. */
  OutputWorkerFailed: 70,
  /** Stopped by SIGINT before finishing: 128 + 2, as a shell reports it. */
  Interrupted: 130,
  /** Stopped by SIGTERM before finishing: 128 + 15. */
  Terminated: 143,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** The exit code for an error that ends a process: Usage for a configuration error, else Failure. */
export function exitCodeFor(error: unknown): ExitCode {
  return error instanceof RS_ERR_CONFIG_INVALID ? ExitCode.Usage : ExitCode.Failure;
}

/** The contract's error body: `{"error": {"message", "type", "param", "code"}}`, code = HTTP status. */
export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: number };
}

// vLLM's ErrorResponse `type` values follow the OpenAI SDK's exception names.
const TYPE_BY_STATUS: ReadonlyMap<number, string> = new Map([
  [400, 'BadRequestError'],
  [401, 'AuthenticationError'],
  [403, 'PermissionDeniedError'],
  [404, 'NotFoundError'],
  [409, 'ConflictError'],
  [413, 'RequestEntityTooLargeError'],
  [408, 'RequestTimeoutError'],
  [415, 'UnsupportedMediaTypeError'],
  [431, 'RequestHeaderFieldsTooLargeError'],
  [429, 'RateLimitError'],
  [499, 'RequestAbortedError'],
  [500, 'InternalServerError'],
  [501, 'NotImplementedError'],
  [502, 'BadGatewayError'],
  [503, 'ServiceUnavailableError'],
  [504, 'TimeoutError'],
]);

export function errorTypeForStatus(statusCode: number): string {
  return (
    TYPE_BY_STATUS.get(statusCode) ?? (statusCode < 500 ? 'BadRequestError' : 'InternalServerError')
  );
}

// fastify's own content-type-parser errors, mapped to ringserve's codes so every answer has one shape.
const FASTIFY_BODY_ERRORS = new Set([
  'FST_ERR_CTP_EMPTY_JSON_BODY',
  'FST_ERR_CTP_INVALID_JSON_BODY',
  'FST_ERR_CTP_INVALID_CONTENT_LENGTH',
  'FST_ERR_CTP_EMPTY_TYPE',
  'FST_ERR_CTP_INVALID_TYPE',
]);

/**
 * Any thrown value as a RingserveError: itself; a plain Error whose `code` is a registered
 * RS_ERR_ code (the native addon throws those); fastify's body-parser errors; otherwise
 * RS_ERR_SERVER_INTERNAL (500) keeping the original as `cause`.
 */
export function toRingserveError(err: unknown): RingserveError {
  if (err instanceof RingserveError) return err;
  const e = err as { code?: unknown; statusCode?: unknown; message?: unknown } | null;
  const message = e !== null && typeof e?.message === 'string' ? e.message : String(err);
  const code = e !== null && typeof e?.code === 'string' ? e.code : '';
  const known = constructors.get(code);
  let out: RingserveError;
  if (known !== undefined) {
    // The thrower's own message, as an instance of the code's constructor (`instanceof` holds).
    out = Reflect.construct(RingserveError, [code, message, known.statusCode, null], known);
  } else if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    out = new RS_ERR_HTTP_BODY_TOO_LARGE('over the server limit (--body-limit-mb)');
  } else if (code === 'FST_ERR_BAD_URL') {
    out = new RS_ERR_HTTP_MALFORMED(message);
  } else if (code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
    out = new RS_ERR_HTTP_UNSUPPORTED_MEDIA_TYPE(
      message.replace(/^Unsupported Media Type:?\s*/, ''),
    );
  } else if (
    FASTIFY_BODY_ERRORS.has(code) ||
    // Any other fastify error that blames the request (a 400 of its own) is still bad input.
    (code.startsWith('FST_ERR_') && e?.statusCode === 400) ||
    (err instanceof SyntaxError && e?.statusCode === 400)
  ) {
    out = new RS_ERR_REQ_INVALID_BODY(message);
  } else {
    out = new RS_ERR_SERVER_INTERNAL(message);
  }
  out.cause = err;
  return out;
}

/**
 * A coded error as plain data: what crosses between threads (a packer's or the tokenizer thread's
 * failed task, the output worker's error message). A thrown Error reaches another thread through
 * structured clone without its own fields (code, statusCode, param), so every crossing sends this
 * (errorToData) and rebuilds the error on the other side (errorFromData).
 */
export interface ErrorData {
  code: string;
  message: string;
  statusCode: number;
  param: string | null;
}

/** Any thrown value as plain data, mapped as toRingserveError maps it. */
export function errorToData(err: unknown): ErrorData {
  const e = toRingserveError(err);
  return { code: e.code, message: e.message, statusCode: e.statusCode, param: e.param };
}

/**
 * The coded error back from its data: an instance of its code's constructor where this thread has
 * it registered (so `instanceof RS_ERR_X` holds as on the thread that threw), else a RingserveError;
 * code, message, status and param as sent.
 */
export function errorFromData(data: ErrorData): RingserveError {
  const args = [data.code, data.message, data.statusCode, data.param];
  const known = constructors.get(data.code);
  return known === undefined
    ? new RingserveError(data.code, data.message, data.statusCode, data.param)
    : Reflect.construct(RingserveError, args, known);
}

/** The contract's error body for any thrown value (see toRingserveError for the mapping). */
export function toErrorBody(err: unknown): ErrorBody {
  const e = toRingserveError(err);
  return {
    error: {
      message: e.message,
      type: errorTypeForStatus(e.statusCode),
      param: e.param,
      code: e.statusCode,
    },
  };
}
