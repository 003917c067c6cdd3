import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  createError,
  ExitCode,
  errorTypeForStatus,
  exitCodeFor,
  isRingserveError,
  listErrorCodes,
  RingserveError,
  RS_ERR_CONFIG_INVALID,
  RS_ERR_MODEL_NOT_FOUND,
  RS_ERR_REQ_INVALID_FIELD,
  RS_ERR_RING_FULL,
  RS_ERR_RING_PEER_GONE,
  RS_ERR_SERVER_QUEUE_FULL,
  RS_ERR_SHM_OPEN,
  toErrorBody,
  toRingserveError,
} from '../src/errors.js';

const root = fileURLToPath(new URL('..', import.meta.url));

// The pinned list: changing it is a deliberate act, with a row in docs/errors.md.
const PINNED: ReadonlyArray<readonly [string, number]> = [
  ['RS_ERR_REQ_INVALID_FIELD', 400],
  ['RS_ERR_REQ_INVALID_BODY', 400],
  ['RS_ERR_REQ_DUPLICATE_ID', 409],
  ['RS_ERR_HTTP_BODY_TOO_LARGE', 413],
  ['RS_ERR_HTTP_UNSUPPORTED_MEDIA_TYPE', 415],
  ['RS_ERR_HTTP_ROUTE_NOT_FOUND', 404],
  ['RS_ERR_MODEL_NOT_FOUND', 404],
  ['RS_ERR_AUTH_UNAUTHORIZED', 401],
  ['RS_ERR_HTTP_MALFORMED', 400],
  ['RS_ERR_HTTP_HEADERS_TOO_LARGE', 431],
  ['RS_ERR_HTTP_CLIENT_TIMEOUT', 408],
  ['RS_ERR_SERVER_QUEUE_FULL', 429],
  ['RS_ERR_SERVER_DRAINING', 503],
  ['RS_ERR_ENGINE_DEAD', 503],
  ['RS_ERR_ENGINE_UNAVAILABLE', 503],
  ['RS_ERR_ENGINE_UNRESPONSIVE', 503],
  ['RS_ERR_ENGINE_REQUEST_FAILED', 500],
  ['RS_ERR_ENGINE_ROUTING_SHAPE', 503],
  ['RS_ERR_REQ_DEADLINE_EXCEEDED', 504],
  ['RS_ERR_CONTROL_TIMEOUT', 503],
  ['RS_ERR_CONTROL_REFUSED', 409],
  ['RS_ERR_CONTROL_FAILED', 500],
  ['RS_ERR_CONTROL_NOT_FOUND', 404],
  ['RS_ERR_CONTROL_BAD_ARGUMENT', 500],
  ['RS_ERR_ADDON_BUILD', 500],
  ['RS_ERR_ADDON_MISSING', 500],
  ['RS_ERR_SHM_OPEN', 500],
  ['RS_ERR_SHM_MMAP', 500],
  ['RS_ERR_SHM_EXISTS', 500],
  ['RS_ERR_SHM_NOT_FOUND', 500],
  ['RS_ERR_SHM_NO_SPACE', 500],
  ['RS_ERR_SHM_UNLINK', 500],
  ['RS_ERR_SHM_BAD_NAME', 500],
  ['RS_ERR_SHM_BAD_ARGUMENT', 500],
  ['RS_ERR_SHM_FUTEX', 500],
  ['RS_ERR_SHM_PRIORITY', 500],
  ['RS_ERR_SHM_BAD_MAGIC', 500],
  ['RS_ERR_SHM_LAYOUT_VERSION', 500],
  ['RS_ERR_SHM_BAD_LAYOUT', 500],
  ['RS_ERR_RING_FULL', 503],
  ['RS_ERR_RING_RECORD_TOO_LARGE', 500],
  ['RS_ERR_RING_PEER_GONE', 503],
  ['RS_ERR_RING_BAD_CAPACITY', 500],
  ['RS_ERR_RING_BAD_TYPE', 500],
  ['RS_ERR_RING_CORRUPT', 500],
  ['RS_ERR_CONFIG_INVALID', 500],
  ['RS_ERR_PROTOCOL_BAD_COLUMNS', 500],
  ['RS_ERR_CLIENT_HTTP', 502],
  ['RS_ERR_CLIENT_DECODE', 502],
  ['RS_ERR_CLIENT_INVARIANT', 502],
  ['RS_ERR_CLIENT_TIMEOUT', 504],
  ['RS_ERR_ROUTER_SHORT_ROWS', 502],
  ['RS_ERR_ROUTER_UPSTREAM', 502],
  ['RS_ERR_ROUTER_NO_INSTANCE', 503],
  ['RS_ERR_ROUTER_FAN_OUT', 502],
  ['RS_ERR_ROUTER_INSTANCE_NOT_FOUND', 404],
  ['RS_ERR_ROUTER_INSTANCE_CONFLICT', 409],
  ['RS_ERR_ROUTER_DRAIN_TIMEOUT', 503],
  ['RS_ERR_OPENAI_INLINE_OUTPUT', 501],
  ['RS_ERR_SERVER_INTERNAL', 500],
  ['RS_ERR_INJECTED_RATE_LIMIT', 429],
  ['RS_ERR_INJECTED_UNAVAILABLE', 503],
  ['RS_ERR_INJECTED_CONTEXT_LENGTH', 400],
  ['RS_ERR_VLLM_BAD_FIELD', 500],
  ['RS_ERR_VLLM_DECODE', 500],
  ['RS_ERR_VLLM_LAYOUT', 503],
  ['RS_ERR_VLLM_HANDSHAKE', 500],
  ['RS_ERR_ZMTP_PROTOCOL', 502],
];

const CREATE_ERROR_CALL =
  /createError\(\s*'(RS_ERR_[A-Z0-9_]+)',\s*(?:'(?:[^'\\]|\\.)*'|`[^`]*`|"[^"]*")\s*,\s*(\d{3})\b/g;

const ERRORS_DOC = 'docs/errors.md';
/** A row of the code table: | `RS_ERR_X` | 400 | ... */
const DOC_ROW = /^\| `(RS_ERR_[A-Z0-9_]+)` +\| (\d{3}) +\|/;

/** Every table row of docs/errors.md that names an RS_ERR_ code, in order, duplicates kept. */
function documentedRows(): Array<{ code: string; status: number; line: string }> {
  const text = readFileSync(join(root, ERRORS_DOC), 'utf8');
  const rows: Array<{ code: string; status: number; line: string }> = [];
  for (const line of text.split('\n')) {
    if (!/^\|\s*`?RS_ERR_/.test(line)) continue;
    const m = DOC_ROW.exec(line);
    // A row the pattern cannot read would be skipped by every check below: refuse it instead.
    if (m === null) throw new Error(`${ERRORS_DOC}: a code row not in the table's form: ${line}`);
    rows.push({ code: m[1] as string, status: Number(m[2]), line });
  }
  return rows;
}

/** code → HTTP status, from the table rows of docs/errors.md. */
function documentedCodes(): Map<string, number> {
  return new Map(documentedRows().map((row) => [row.code, row.status]));
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return out;
  }
  for (const name of names) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...sourceFiles(path));
    else if (/\.(ts|mjs|js|cc|cpp|h)$/.test(name)) out.push(path);
  }
  return out;
}

function sourceTexts(dirs: readonly string[]): Array<{ file: string; text: string }> {
  return dirs.flatMap((dir) =>
    sourceFiles(join(root, dir)).map((file) => ({ file, text: readFileSync(file, 'utf8') })),
  );
}

/** Where codes are raised: the code, the native addon (src/shm/native/) and the build script. */
const RAISING_DIRS = ['src', 'workers', 'scripts', 'bench'];

/**
 * code → HTTP status of every registered code: the registry of src/errors.ts, and each
 * `createError('RS_ERR_X', template, status)` elsewhere in the sources (those modules are not
 * imported here, so as not to change the pinned registry above).
 */
function registeredCodes(): Map<string, number> {
  const codes = new Map<string, number>();
  for (const { code, statusCode } of listErrorCodes()) codes.set(code, statusCode);
  for (const { text } of sourceTexts(RAISING_DIRS)) {
    for (const m of text.matchAll(CREATE_ERROR_CALL)) codes.set(m[1] as string, Number(m[2]));
  }
  return codes;
}

/**
 * Registered codes nothing raises yet, each with the change that will raise it. An entry whose
 * code is raised now fails the check too: remove the entry.
 */
const NOT_RAISED_YET: Readonly<Record<string, string>> = {};

/**
 * The codes some source raises, by text: `new RS_ERR_X(` (or `new Alias(` where
 * `const Alias = RS_ERR_X;`); `"RS_ERR_X"` in the native addon's C++ (ThrowCoded); a message
 * that starts with the code (`RS_ERR_X: cause`, as scripts print it); `code: 'RS_ERR_X'` in a
 * message between threads. A code only defined, documented or compared against is not raised.
 */
function raisedCodes(): Set<string> {
  const raised = new Set<string>();
  const texts = sourceTexts(RAISING_DIRS);
  const aliases = new Map<string, string>();
  for (const { text } of texts) {
    for (const m of text.matchAll(/\bconst (\w+) = (RS_ERR_[A-Z0-9_]+);/g)) {
      aliases.set(m[1] as string, m[2] as string);
    }
  }
  for (const { file, text } of texts) {
    for (const m of text.matchAll(/\bnew (\w+)\(/g)) {
      const name = m[1] as string;
      const code = name.startsWith('RS_ERR_') ? name : aliases.get(name);
      if (code !== undefined) raised.add(code);
    }
    if (/\.(cc|cpp|h)$/.test(file)) {
      for (const m of text.matchAll(/"(RS_ERR_[A-Z0-9_]+)"/g)) raised.add(m[1] as string);
    }
    for (const m of text.matchAll(/[`'"](RS_ERR_[A-Z0-9_]+): /g)) raised.add(m[1] as string);
    for (const m of text.matchAll(/\bcode: '(RS_ERR_[A-Z0-9_]+)'/g)) raised.add(m[1] as string);
  }
  return raised;
}

describe('error code registry', () => {
  it('holds exactly the pinned codes with their statuses, in order', () => {
    expect(listErrorCodes().map((e) => [e.code, e.statusCode])).toEqual(PINNED);
  });

  it('documents every registered code with its status in docs/errors.md', () => {
    const documented = documentedCodes();
    for (const { code, statusCode } of listErrorCodes()) {
      expect(documented.get(code), code).toBe(statusCode);
    }
  });

  it('documents every RS_ERR_ code that appears anywhere in the sources', () => {
    const documented = documentedCodes();
    const found = new Set<string>();
    const statuses = new Map<string, number>();
    for (const dir of ['src', 'workers', 'scripts', 'bench', 'ops']) {
      for (const file of sourceFiles(join(root, dir))) {
        const text = readFileSync(file, 'utf8');
        for (const m of text.matchAll(/RS_ERR_[A-Z0-9]+_[A-Z0-9_]*[A-Z0-9]/g)) found.add(m[0]);
        // Codes made outside src/errors.ts, e.g. createError('RS_ERR_X_Y', 'template', 503).
        for (const m of text.matchAll(CREATE_ERROR_CALL))
          statuses.set(m[1] as string, Number(m[2]));
      }
    }
    expect(found.size).toBeGreaterThan(30);
    const missing = [...found].filter((code) => !documented.has(code));
    expect(missing).toEqual([]);
    for (const [code, status] of statuses) expect(documented.get(code), code).toBe(status);
  });

  it('finds every createError call in the sources (none the pattern cannot read)', () => {
    const calls: string[] = [];
    for (const { text } of sourceTexts(RAISING_DIRS)) {
      for (const m of text.matchAll(/createError\(\s*'(RS_ERR_[A-Z0-9_]+)'/g)) {
        calls.push(m[1] as string);
      }
    }
    expect(calls.length).toBeGreaterThan(0);
    const registered = registeredCodes();
    expect(calls.filter((code) => !registered.has(code))).toEqual([]);
  });

  it('has no row in docs/errors.md for a code nothing registers', () => {
    const registered = registeredCodes();
    const stray = documentedRows()
      .filter((row) => !registered.has(row.code))
      .map((row) => row.code);
    expect(stray, 'documented but not registered: register it or remove the row').toEqual([]);
    for (const row of documentedRows()) {
      expect(row.status, row.code).toBe(registered.get(row.code));
    }
  });

  it('has one row per code in docs/errors.md', () => {
    const seen = new Set<string>();
    const twice: string[] = [];
    for (const { code } of documentedRows()) {
      if (seen.has(code)) twice.push(code);
      seen.add(code);
    }
    expect(twice, 'documented more than once: keep one row').toEqual([]);
  });

  it('refuses a duplicate code and a code outside RS_ERR_<AREA>_<WHAT>', () => {
    expect(() => createError('RS_ERR_REQ_INVALID_FIELD', 'again', 400)).toThrow(/defined twice/);
    expect(() => createError('RS_ERR_NOAREA', 'x', 400)).toThrow(/RS_ERR_<AREA>_<WHAT>/);
    expect(() => createError('FST_ERR_X_Y', 'x', 400)).toThrow(/RS_ERR_<AREA>_<WHAT>/);
  });

  it('makes the shared-memory codes like every other', () => {
    const err = new RS_ERR_RING_FULL(4096, 64, 100);
    expect(err).toBeInstanceOf(RingserveError);
    expect(err.code).toBe('RS_ERR_RING_FULL');
    expect(err.statusCode).toBe(503);
    expect(err.message).toBe('ring at offset 4096: no room for a 64-byte record within 100 ms');
  });

  it('has a place that raises every registered code', () => {
    const defined = new Set(registeredCodes().keys());
    const raised = raisedCodes();
    const unraised = [...defined].filter((code) => !raised.has(code) && !(code in NOT_RAISED_YET));
    expect(unraised, 'registered but raised nowhere: raise it or remove it').toEqual([]);
    const stale = Object.keys(NOT_RAISED_YET).filter((code) => raised.has(code));
    expect(stale, 'raised now: take it out of NOT_RAISED_YET').toEqual([]);
  });
});

describe('createError', () => {
  it('makes errors with code, status, formatted message and param', () => {
    const err = new RS_ERR_REQ_INVALID_FIELD('sampling_params.top_p', 'must be in (0, 1], got 2');
    expect(err).toBeInstanceOf(RingserveError);
    expect(err).toBeInstanceOf(Error);
    expect(err).toBeInstanceOf(RS_ERR_REQ_INVALID_FIELD);
    expect(err.code).toBe('RS_ERR_REQ_INVALID_FIELD');
    expect(err.statusCode).toBe(400);
    expect(err.param).toBe('sampling_params.top_p');
    expect(err.message).toBe('sampling_params.top_p: must be in (0, 1], got 2');
    expect(isRingserveError(err)).toBe(true);
    expect(RS_ERR_REQ_INVALID_FIELD.code).toBe('RS_ERR_REQ_INVALID_FIELD');
    expect(RS_ERR_REQ_INVALID_FIELD.name).toBe('RS_ERR_REQ_INVALID_FIELD');
  });

  it('uses a fixed param where the error is always about one field, and none otherwise', () => {
    expect(new RS_ERR_MODEL_NOT_FOUND('gpt-9').param).toBe('model');
    expect(new RS_ERR_SERVER_QUEUE_FULL(10).param).toBeNull();
    expect(new RS_ERR_CONFIG_INVALID('--port', 'bad').param).toBe('--port');
  });

  it('keeps a readable message when given too few or too many arguments', () => {
    expect(new RS_ERR_SERVER_QUEUE_FULL().message).toContain('%s');
    expect(new RS_ERR_SERVER_QUEUE_FULL(5, 'extra').message).toBe(
      'the request queue is full (5 requests waiting); retry later extra',
    );
  });
});

describe('toErrorBody', () => {
  it('renders the contract shape with vLLM type names', () => {
    const body = toErrorBody(
      new RS_ERR_REQ_INVALID_FIELD('token_ids[3]', 'must be in [0, 1000), got 1000'),
    );
    expect(body).toEqual({
      error: {
        message: 'token_ids[3]: must be in [0, 1000), got 1000',
        type: 'BadRequestError',
        param: 'token_ids[3]',
        code: 400,
      },
    });
    expect(toErrorBody(new RS_ERR_MODEL_NOT_FOUND('x')).error.type).toBe('NotFoundError');
    expect(toErrorBody(new RS_ERR_SERVER_QUEUE_FULL(1)).error.code).toBe(429);
    expect(errorTypeForStatus(503)).toBe('ServiceUnavailableError');
    expect(errorTypeForStatus(418)).toBe('BadRequestError');
    expect(errorTypeForStatus(507)).toBe('InternalServerError');
  });

  it('maps fastify body errors, coded plain errors and unknown throws', () => {
    const tooLarge = Object.assign(new Error('Request body is too large'), {
      code: 'FST_ERR_CTP_BODY_TOO_LARGE',
      statusCode: 413,
    });
    expect(toRingserveError(tooLarge).code).toBe('RS_ERR_HTTP_BODY_TOO_LARGE');
    expect(toErrorBody(tooLarge).error.code).toBe(413);

    const media = Object.assign(new Error('Unsupported Media Type: text/plain'), {
      code: 'FST_ERR_CTP_INVALID_MEDIA_TYPE',
      statusCode: 415,
    });
    expect(toRingserveError(media).message).toContain('text/plain');
    expect(toRingserveError(media).statusCode).toBe(415);

    const badJson = Object.assign(new SyntaxError('Unexpected token } in JSON'), {
      statusCode: 400,
    });
    expect(toRingserveError(badJson).code).toBe('RS_ERR_REQ_INVALID_BODY');

    const fromShm = new RS_ERR_RING_PEER_GONE(128, 'consumer', 4242);
    expect(toRingserveError(fromShm)).toBe(fromShm);
    expect(fromShm.statusCode).toBe(503);
    // The native addon throws plain Errors carrying a registered code: mapped, cause kept.
    const fromAddon = Object.assign(new Error('RS_ERR_SHM_OPEN: cannot open'), {
      code: 'RS_ERR_SHM_OPEN',
    });
    const mapped = toRingserveError(fromAddon);
    expect(mapped.code).toBe('RS_ERR_SHM_OPEN');
    expect(mapped).toBeInstanceOf(RS_ERR_SHM_OPEN);
    expect(mapped.message).toBe(fromAddon.message);
    expect(mapped.statusCode).toBe(500);
    expect(mapped.cause).toBe(fromAddon);

    const unknown = toRingserveError(new TypeError('x is undefined'));
    expect(unknown.code).toBe('RS_ERR_SERVER_INTERNAL');
    expect(unknown.statusCode).toBe(500);
    expect(toRingserveError('a string').message).toBe('internal error: a string');
  });
});

/** Files that still exit with a bare number, each with the change that will name it. */
const BARE_EXITS_YET: Readonly<Record<string, string>> = {};

describe('exit codes', () => {
  it('documents each one in docs/errors.md', () => {
    const text = readFileSync(join(root, 'docs/errors.md'), 'utf8');
    const rows = [...text.matchAll(/^\| (\d+) +\| `(\w+)` +\|/gm)].map((m) => [m[2], Number(m[1])]);
    expect(rows).toEqual(Object.entries(ExitCode));
  });

  it('ends a process that met a configuration error with Usage, any other with Failure', () => {
    expect(exitCodeFor(new RS_ERR_CONFIG_INVALID('--port', 'bad'))).toBe(ExitCode.Usage);
    // An error mapped from its code is an instance of that code's constructor, so it counts too.
    const mapped = toRingserveError(
      Object.assign(new Error('x'), { code: 'RS_ERR_CONFIG_INVALID' }),
    );
    expect(exitCodeFor(mapped)).toBe(ExitCode.Usage);
    expect(exitCodeFor(new RS_ERR_SERVER_QUEUE_FULL(1))).toBe(ExitCode.Failure);
    expect(exitCodeFor(new Error('boom'))).toBe(ExitCode.Failure);
  });

  it('is the only source of exit numbers in src/ and bench/', () => {
    const bare: string[] = [];
    for (const { file, text } of sourceTexts(['src', 'bench'])) {
      if (/\bprocess\.exit\(\s*\d/.test(text)) bare.push(relative(root, file));
    }
    expect(bare.sort(), 'process.exit(<number>): use ExitCode from src/errors.ts').toEqual(
      Object.keys(BARE_EXITS_YET).sort(),
    );
  });
});
