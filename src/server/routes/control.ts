/**
 * The control plane an RL trainer and a router call: pause, resume, update_weights,
 * reset_prefix_cache, abort_requests. Commands go to the engine through the shared region's control
 * block and are answered once the engine has carried them out.
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { type ControlCode, ControlCommand, ControlResult } from '../../engine/control-channel.js';
import { RS_ERR_ENGINE_REQUEST_FAILED, RS_ERR_REQ_INVALID_FIELD } from '../../errors.js';
import { isPlainObject } from '../../protocol/fields.js';
import type { EngineClient } from '../engine-client.js';
import type { RequestCoordinator } from '../request-coordinator.js';

/** A control call the engine has not acknowledged by then is answered 503. */
const CONTROL_TIMEOUT_MS = 10_000;
export const WEIGHTS_MANIFEST = 'ringserve-weights.json';

export interface ControlDeps {
  engine: EngineClient;
  coordinator: RequestCoordinator;
  /** Forwards abort ids to the other API servers (through the supervisor). */
  broadcastAbort?: (ids: string[]) => void;
}

export function registerControlRoutes(app: FastifyInstance, deps: ControlDeps): void {
  const { engine, coordinator } = deps;
  const run = async (code: ControlCode, args: number[] = []): Promise<number> => {
    const reply = await engine.control.call(code, args, null, CONTROL_TIMEOUT_MS);
    if (reply.code !== ControlResult.Ok) {
      throw new RS_ERR_ENGINE_REQUEST_FAILED('control', `engine answered ${reply.code}`);
    }
    return reply.value;
  };
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
    const live = await run(ControlCommand.UpdateWeights, [version]);
    return { status: 'ok', weight_version: live };
  });
  app.post('/abort_requests', async (request) => {
    const body = request.body;
    const ids = isPlainObject(body) ? body.request_ids : undefined;
    if (!Array.isArray(ids) || !ids.every((id) => typeof id === 'string')) {
      throw new RS_ERR_REQ_INVALID_FIELD('request_ids', 'must be an array of strings');
    }
    const elsewhere: string[] = [];
    for (const id of ids as string[])
      if (!coordinator.abortById(stripPrefix(id))) elsewhere.push(stripPrefix(id));
    if (elsewhere.length > 0) deps.broadcastAbort?.(elsewhere);
    return { status: 'ok' };
  });
}

function stripPrefix(id: string): string {
  return id.startsWith('generate-tokens-') ? id.slice('generate-tokens-'.length) : id;
}

/**
 * The weight version to load: from `<weight_dir>/ringserve-weights.json` ({"version": n}) when the
 * directory has one, else 0 (the engine then increments its version).
 */
async function manifestVersion(body: unknown): Promise<number> {
  const dir = isPlainObject(body) ? body.weight_dir : null;
  if (dir === null || dir === undefined) return 0;
  if (typeof dir !== 'string' || dir === '') {
    throw new RS_ERR_REQ_INVALID_FIELD('weight_dir', 'must be a directory path or null');
  }
  const info = await stat(dir).catch(() => null);
  if (info === null || !info.isDirectory()) {
    throw new RS_ERR_REQ_INVALID_FIELD('weight_dir', `${dir} is not an existing directory`);
  }
  const text = await readFile(join(dir, WEIGHTS_MANIFEST), 'utf8').catch(() => null);
  if (text === null) return 0;
  let version: unknown;
  try {
    version = (JSON.parse(text) as { version?: unknown }).version;
  } catch {
    version = undefined;
  }
  if (!Number.isInteger(version) || (version as number) < 1 || (version as number) > 2 ** 31 - 1) {
    throw new RS_ERR_REQ_INVALID_FIELD(
      'weight_dir',
      `${WEIGHTS_MANIFEST} must hold {"version": <positive integer>}`,
    );
  }
  return version as number;
}
