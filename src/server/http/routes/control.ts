/**
 * The control plane an RL trainer and a router call: pause, resume, update_weights,
 * reset_prefix_cache, abort_requests. Commands go to the engine through the shared region's control
 * block and are answered once the engine has carried them out (control-channel.ts). Nothing here
 * waits on the data path: a command is one write into the region and a bounded poll of one word,
 * and the engine runs it between two steps, or during the modelled rest of the current one.
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { RingserveConfig } from '../../../config.js';
import {
  RS_ERR_CONTROL_FAILED,
  RS_ERR_CONTROL_REFUSED,
  RS_ERR_CONTROL_TIMEOUT,
  RS_ERR_ENGINE_DEAD,
  RS_ERR_ENGINE_UNRESPONSIVE,
  RS_ERR_REQ_INVALID_BODY,
  RS_ERR_REQ_INVALID_FIELD,
} from '../../../errors.js';
import { isPlainObject } from '../../../protocol/fields.js';
import { RESPONSE_ID_PREFIX } from '../../../protocol/response-columns.js';
import {
  type ControlCode,
  ControlCommand,
  ControlResult,
  commandName,
} from '../../../wire/control-channel.js';
import type { EngineClient } from '../../engine-client.js';
import { HEARTBEAT_STALE_MS } from '../../engine-client.js';
import type { RequestCoordinator } from '../../request-coordinator.js';

/**
 * A control call the engine has not acknowledged by then is answered 503 (and the engine will not
 * run it later). The engine answers within one step when alive; a stalled one is caught earlier
 * by the heartbeat check, so this bound is only met by an engine that stalls mid-call.
 */
const CONTROL_TIMEOUT_MS = 5_000;
/**
 * A vLLM engine loads new weights from disk (prime-rl's update_weights_from_path) before it
 * answers: minutes, not a step. The bridge bounds the call the same (src/engine/vllm/bridge.ts).
 */
const VLLM_WEIGHTS_TIMEOUT_MS = 600_000;
export const WEIGHTS_MANIFEST = 'ringserve-weights.json';
/** The control-channel argument that asks the engine to increment its weight version. */
const NEXT_VERSION = -1;

export interface ControlDeps {
  engine: EngineClient;
  coordinator: RequestCoordinator;
  /** Forwards abort ids to the other API servers (through the supervisor). */
  broadcastAbort?: (ids: string[]) => void;
  /** With --engine vllm, /update_weights needs a weight_dir (the engine loads it itself). */
  config?: Pick<RingserveConfig, 'engine'>;
}

export function registerControlRoutes(app: FastifyInstance, deps: ControlDeps): void {
  const { engine, coordinator } = deps;
  const run = (
    code: ControlCode,
    args: number[] = [],
    text: string | null = null,
    timeoutMs = CONTROL_TIMEOUT_MS,
  ) => runCommand(engine, code, args, text, timeoutMs);
  app.post('/pause', async () => {
    await run(ControlCommand.Pause);
    return { status: 'paused' };
  });
  app.post('/resume', async () => {
    await run(ControlCommand.Resume);
    return { status: 'resumed' };
  });
  app.post('/reset_prefix_cache', async () => {
    await run(ControlCommand.ResetPrefixCache);
    return { status: 'ok' };
  });
  app.post('/update_weights', async (request) => {
    const version = await manifestVersion(request.body);
    if (deps.config?.engine === 'vllm' && weightDir(request.body) === null) {
      throw new RS_ERR_REQ_INVALID_FIELD(
        'weight_dir',
        'a vLLM engine loads weights from a directory',
      );
    }
    // The directory goes along for an engine that loads it itself (a vLLM engine behind a bridge).
    const timeout = deps.config?.engine === 'vllm' ? VLLM_WEIGHTS_TIMEOUT_MS : CONTROL_TIMEOUT_MS;
    const live = await run(
      ControlCommand.UpdateWeights,
      [version],
      weightDir(request.body),
      timeout,
    );
    return { status: 'ok', weight_version: live };
  });
  app.post('/abort_requests', async (request) => {
    const body = request.body;
    const ids = isPlainObject(body) ? body.request_ids : undefined;
    if (!Array.isArray(ids) || !ids.every((id) => typeof id === 'string')) {
      throw new RS_ERR_REQ_INVALID_FIELD('request_ids', 'must be an array of strings');
    }
    const elsewhere: string[] = [];
    for (const id of ids as string[]) {
      const bare = stripPrefix(id);
      if (!coordinator.abortById(bare)) elsewhere.push(bare);
    }
    // An id this server does not hold may be another API server's: the supervisor forwards it.
    if (elsewhere.length > 0) deps.broadcastAbort?.(elsewhere);
    return { status: 'ok' };
  });
}

/** Runs a command and returns the engine's value (the live weight version), or throws a coded error. */
async function runCommand(
  engine: EngineClient,
  code: ControlCode,
  args: number[],
  text: string | null,
  timeoutMs: number,
): Promise<number> {
  // A dead or stalled engine is answered at once rather than after the full timeout.
  if (!engine.up) throw new RS_ERR_ENGINE_DEAD('the engine core is restarting');
  if (!engine.alive()) throw new RS_ERR_ENGINE_UNRESPONSIVE(HEARTBEAT_STALE_MS);
  const reply = await engine.control.call(code, args, text, timeoutMs);
  switch (reply.code) {
    case ControlResult.Ok:
      return reply.value;
    case ControlResult.Refused:
      throw new RS_ERR_CONTROL_REFUSED(
        commandName(code),
        'requests hold KV blocks; retry when none is running',
      );
    case ControlResult.Expired:
      throw new RS_ERR_CONTROL_TIMEOUT(commandName(code), timeoutMs);
    default:
      throw new RS_ERR_CONTROL_FAILED(commandName(code), reply.code);
  }
}

/** `weight_dir` of a body manifestVersion() accepted, or null. */
function weightDir(body: unknown): string | null {
  const dir = isPlainObject(body) ? body.weight_dir : null;
  return typeof dir === 'string' ? dir : null;
}

function stripPrefix(id: string): string {
  return id.startsWith(RESPONSE_ID_PREFIX) ? id.slice(RESPONSE_ID_PREFIX.length) : id;
}

/**
 * The weight version to load: from `<weight_dir>/ringserve-weights.json` ({"version": n}, n in
 * [0, 2^31)) when the directory has one, else NEXT_VERSION (the engine increments its version).
 * `weight_dir` must be null (or absent) or an existing directory: anything else is a 400 naming it.
 */
async function manifestVersion(body: unknown): Promise<number> {
  if (body !== undefined && body !== null && !isPlainObject(body)) {
    throw new RS_ERR_REQ_INVALID_BODY('the body must be an object: {"weight_dir": string | null}');
  }
  const dir = isPlainObject(body) ? (body.weight_dir ?? null) : null;
  if (dir === null) return NEXT_VERSION;
  if (typeof dir !== 'string' || dir === '') {
    throw new RS_ERR_REQ_INVALID_FIELD('weight_dir', 'must be a directory path or null');
  }
  const info = await stat(dir).catch(() => null);
  if (info === null || !info.isDirectory()) {
    throw new RS_ERR_REQ_INVALID_FIELD('weight_dir', `${dir} is not an existing directory`);
  }
  const text = await readFile(join(dir, WEIGHTS_MANIFEST), 'utf8').catch(() => null);
  if (text === null) return NEXT_VERSION;
  let version: unknown;
  try {
    version = (JSON.parse(text) as { version?: unknown } | null)?.version;
  } catch {
    version = undefined;
  }
  if (
    typeof version !== 'number' ||
    !Number.isInteger(version) ||
    version < 0 ||
    version >= 2 ** 31
  ) {
    throw new RS_ERR_REQ_INVALID_FIELD(
      'weight_dir',
      `${join(dir, WEIGHTS_MANIFEST)} must hold {"version": <integer in [0, 2^31)>}`,
    );
  }
  return version;
}
