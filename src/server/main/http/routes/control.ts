/**
 * The control plane an RL trainer and a router call: pause, resume, update_weights,
 * reset_prefix_cache, abort_requests, and prime-rl's init_broadcaster and LoRA adapter loads
 * (load_lora_adapter, vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter). Commands go to the engine through the shared region's control
 * block and are answered once the engine has carried them out (control-channel.ts). Nothing here
 * waits on the data path: a command is one write into the region and a bounded poll of one word,
 * and the engine runs it between two steps, or during the modelled rest of the current one.
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { RingserveConfig } from '../../../../config.js';
import {
  RS_ERR_CONTROL_FAILED,
  RS_ERR_CONTROL_NOT_FOUND,
  RS_ERR_CONTROL_REFUSED,
  RS_ERR_CONTROL_TIMEOUT,
  RS_ERR_ENGINE_DEAD,
  RS_ERR_ENGINE_UNRESPONSIVE,
  RS_ERR_REQ_INVALID_BODY,
  RS_ERR_REQ_INVALID_FIELD,
} from '../../../../errors.js';
import {
  type Body,
  fail,
  isPlainObject,
  optBool,
  optInt,
  optNumber,
  optString,
} from '../../../../protocol/fields.js';
import { MAX_ID_LENGTH } from '../../../../protocol/generate-request.js';
import { RESPONSE_ID_PREFIX } from '../../../../protocol/response-columns.js';
import { CTL_TEXT_CAPACITY } from '../../../../shm/layout.js';
import type { BroadcasterArgs, LoraArgs } from '../../../../wire/admin-args.js';
import {
  type ControlCode,
  ControlCommand,
  ControlResult,
  commandName,
} from '../../../../wire/control-channel.js';
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
 * Loading a LoRA adapter reads its files (a vLLM engine loads them onto every worker): seconds.
 * prime-rl's client waits 30 s a try and retries for 120 s.
 */
const LORA_TIMEOUT_MS = 120_000;
/** prime-rl's default rendezvous timeout, when the body gives none. */
const BROADCASTER_TIMEOUT_S = 1_200;
export const WEIGHTS_MANIFEST = 'ringserve-weights.json';
/** The control-channel argument that asks the engine to increment its weight version. */
const NEXT_VERSION = -1;

export interface ControlDeps {
  engine: EngineClient;
  coordinator: RequestCoordinator;
  /** Forwards abort ids to the other API servers (through the supervisor). */
  broadcastAbort?: (ids: string[]) => void;
  /** --engine (a vLLM engine reads weight_dir itself) and --update-weights-timeout-s. */
  config?: Pick<RingserveConfig, 'engine' | 'updateWeightsTimeoutS'>;
}

export function registerControlRoutes(app: FastifyInstance, deps: ControlDeps): void {
  const { engine, coordinator } = deps;
  const run = (
    code: ControlCode,
    args: number[] = [],
    text: string | null = null,
    timeoutMs = CONTROL_TIMEOUT_MS,
  ) => runCommand(engine, code, args, text, timeoutMs);
  // The engine bounds its own call by the flag (the bridge's utility call); this bound is a step
  // later, so the engine's answer, a failure included, is the one the caller gets.
  const weightsTimeoutMs =
    (deps.config?.updateWeightsTimeoutS ?? 10_800) * 1000 + CONTROL_TIMEOUT_MS;
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
    const dir = readWeightDir(request.body);
    // A vLLM engine reads the directory itself, on its own host (which need not mount the
    // trainer's filesystem), or receives the weights from the broadcaster (weight_dir null): the
    // directory goes along untouched. The simulator reads the version manifest here.
    const version = deps.config?.engine === 'vllm' ? NEXT_VERSION : await manifestVersion(dir);
    const live = await run(ControlCommand.UpdateWeights, [version], dir, weightsTimeoutMs);
    return { status: 'ok', weight_version: live };
  });
  // prime-rl's in-memory weight transfer (NCCL, NIXL): its workers join the trainer's broadcaster,
  // and the call lasts until they have (up to `timeout` seconds).
  app.post('/init_broadcaster', async (request) => {
    const args = readBroadcasterBody(request.body);
    const timeoutMs = (args.timeout ?? BROADCASTER_TIMEOUT_S) * 1000 + CONTROL_TIMEOUT_MS;
    await run(ControlCommand.InitBroadcaster, [], JSON.stringify(args), timeoutMs);
    return { status: 'ok' };
  });
  // prime-rl's route reloads one name in place every step and answers JSON; vLLM's /v1/ route
  // loads in place only when asked and answers plain text.
  app.post('/load_lora_adapter', async (request) => {
    await loadLora(readLoraBody(request.body, true));
    return { status: 'ok' };
  });
  app.post('/v1/load_lora_adapter', async (request, reply) => {
    const args = readLoraBody(request.body, false);
    await loadLora(args);
    return reply
      .type('text/plain; charset=utf-8')
      .send(`Success: LoRA adapter '${args.name}' added successfully.`);
  });
  app.post('/v1/unload_lora_adapter', async (request, reply) => {
    const name = loraName(request.body);
    await run(ControlCommand.UnloadLora, [], name, LORA_TIMEOUT_MS);
    return reply
      .type('text/plain; charset=utf-8')
      .send(`Success: LoRA adapter '${name}' removed successfully.`);
  });
  const loadLora = async (args: LoraArgs): Promise<void> => {
    try {
      await run(ControlCommand.LoadLora, [], JSON.stringify(args), LORA_TIMEOUT_MS);
    } catch (error) {
      // A name already loaded (not in place) is the caller's mistake: vLLM's 400.
      if (error instanceof RS_ERR_CONTROL_REFUSED && args.inplace === false) {
        throw new RS_ERR_REQ_INVALID_FIELD('lora_name', (error as Error).message);
      }
      throw error;
    }
  };
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
        reply.text === '' ? 'requests hold KV blocks; retry when none is running' : reply.text,
      );
    case ControlResult.NotFound:
      throw new RS_ERR_CONTROL_NOT_FOUND(commandName(code), reply.text);
    case ControlResult.Expired:
      throw new RS_ERR_CONTROL_TIMEOUT(commandName(code), timeoutMs);
    default:
      throw new RS_ERR_CONTROL_FAILED(
        commandName(code),
        reply.code,
        reply.text === '' ? 'the engine gave no reason' : reply.text,
      );
  }
}

/** The body's `weight_dir`: a non-empty string, or null (absent, or no body). */
function readWeightDir(body: unknown): string | null {
  if (body !== undefined && body !== null && !isPlainObject(body)) {
    throw new RS_ERR_REQ_INVALID_BODY('the body must be an object: {"weight_dir": string | null}');
  }
  const dir = isPlainObject(body) ? (body.weight_dir ?? null) : null;
  if (dir !== null && (typeof dir !== 'string' || dir === '')) {
    throw new RS_ERR_REQ_INVALID_FIELD('weight_dir', 'must be a directory path or null');
  }
  return dir;
}

/**
 * prime-rl's /init_broadcaster body. Its NCCL and NIXL workers need where the broadcaster listens
 * and which ranks to take, so those are required here (prime-rl's server would pass None on and
 * fail in the worker); `timeout` (seconds) defaults to prime-rl's 1,200, `session_id` (NIXL) to
 * "default".
 */
function readBroadcasterBody(body: unknown): BroadcasterArgs {
  if (!isPlainObject(body)) {
    throw new RS_ERR_REQ_INVALID_BODY(
      'the body must be an object: {"host", "port", "rank_offset", "inference_world_size", "timeout"}',
    );
  }
  const host = optString(body, '', 'host', 1, 1024);
  if (host === null) fail('host', 'is required');
  const need = (key: string, min: number, max: number): number => {
    const v = optInt(body, '', key, -1, min, max);
    if (v === -1) fail(key, 'is required');
    return v;
  };
  return {
    host,
    port: need('port', 1, 65_535),
    rankOffset: need('rank_offset', 0, 1 << 20),
    inferenceWorldSize: need('inference_world_size', 1, 1 << 20),
    timeout: optNumber(body, '', 'timeout', BROADCASTER_TIMEOUT_S, 1, 604_800),
    quantizeInWeightTransfer: optBool(body, '', 'quantize_in_weight_transfer', false),
    sessionId: optString(body, '', 'session_id', 1, 1024) ?? 'default',
  };
}

/** vLLM's LoadLoRAAdapterRequest: `lora_name`, `lora_path`, `load_inplace`. */
function readLoraBody(body: unknown, forceInplace: boolean): LoraArgs {
  const name = loraName(body);
  const b = body as Body;
  const path = optString(b, '', 'lora_path', 1, 4096);
  if (path === null) fail('lora_path', 'is required');
  const inplace = optBool(b, '', 'load_inplace', false);
  const args = { name, path, inplace: forceInplace || inplace };
  if (Buffer.byteLength(JSON.stringify(args)) > CTL_TEXT_CAPACITY) {
    fail('lora_path', `lora_name and lora_path must fit ${CTL_TEXT_CAPACITY} bytes together`);
  }
  return args;
}

function loraName(body: unknown): string {
  if (!isPlainObject(body)) {
    throw new RS_ERR_REQ_INVALID_BODY('the body must be an object: {"lora_name", ...}');
  }
  const name = optString(body, '', 'lora_name', 1, MAX_ID_LENGTH);
  if (name === null) fail('lora_name', 'is required');
  return name;
}

function stripPrefix(id: string): string {
  return id.startsWith(RESPONSE_ID_PREFIX) ? id.slice(RESPONSE_ID_PREFIX.length) : id;
}

/**
 * The weight version to load: from `<weight_dir>/ringserve-weights.json` ({"version": n}, n in
 * [0, 2^31)) when the directory has one, else NEXT_VERSION (the engine increments its version).
 * A `weight_dir` that is not an existing directory is a 400 naming it.
 */
async function manifestVersion(dir: string | null): Promise<number> {
  if (dir === null) return NEXT_VERSION;
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
