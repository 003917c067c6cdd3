import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { RS_ERR_VLLM_BAD_FIELD } from '../../../errors.js';
import type { BroadcasterArgs } from '../../../wire/admin-args.js';

/**
 * The headless engine's `collective_rpc(method, timeout, args, kwargs)`: the worker methods RL
 * weight updates call (docs/vllm-protocol.md, "Utility calls"), mapped to the simulator. vLLM
 * answers one result per worker; the simulator is one worker, and answers the weight version now
 * in force for the methods that load weights (null for the others).
 *   init_broadcaster(host, port, rank_offset, inference_world_size, timeout,
 *                    quantize_in_weight_transfer, session_id)
 *                                         prime-rl's NCCL/NIXL workers: the rendezvous is
 *                                         recorded (the simulator's broadcaster)
 *   update_weights_from_path(weight_dir)  prime-rl's: the version in the directory's
 *                                         ringserve-weights.json ({"version": n}), else + 1; a
 *                                         null directory is a broadcast, which needs a broadcaster
 *   init_weight_transfer_engine, start_weight_update, finish_weight_update  nothing to do
 *   update_weights(update_info)           update_info.version when an integer, else + 1
 * Anything else rejects with the reason (the caller makes vLLM's failure reply of it).
 */

/** The weight manifest a weight directory may hold (as /update_weights reads it). */
const WEIGHTS_MANIFEST = 'ringserve-weights.json';

/** What the workers' methods act on. */
export interface WorkerTarget {
  updateWeights(version?: number): number;
  initBroadcaster(args: BroadcasterArgs): void;
  readonly broadcaster: BroadcasterArgs | null;
}

export async function collectiveRpc(
  args: readonly unknown[],
  target: WorkerTarget,
): Promise<unknown[]> {
  const [method, , rpcArgs, kwargs] = args;
  const list = Array.isArray(rpcArgs) ? rpcArgs : [];
  const kw = (kwargs ?? {}) as Record<string, unknown>;
  switch (method) {
    case 'init_broadcaster':
      target.initBroadcaster(readBroadcasterList(list));
      return [null];
    case 'update_weights_from_path': {
      const dir = list[0] ?? kw.weight_dir ?? kw.path ?? null;
      if (dir === null) {
        if (target.broadcaster === null) {
          throw new Error('no weight directory, and init_broadcaster was not called');
        }
        return [target.updateWeights()];
      }
      if (typeof dir !== 'string')
        throw new Error('update_weights_from_path takes a directory path or None');
      const version = await manifestVersion(dir);
      return [target.updateWeights(version ?? undefined)];
    }
    case 'init_weight_transfer_engine':
    case 'start_weight_update':
    case 'finish_weight_update':
      return [null];
    case 'update_weights': {
      const info = list[0] ?? kw.update_info ?? null;
      const version =
        info !== null && typeof info === 'object' ? (info as { version?: unknown }).version : null;
      return [target.updateWeights(typeof version === 'number' ? version : undefined)];
    }
    default:
      throw new Error(`the workers have no method ${String(method)}`);
  }
}

/** init_broadcaster's positional arguments, checked as prime-rl's NCCL worker needs them. */
function readBroadcasterList(list: readonly unknown[]): BroadcasterArgs {
  const [host, port, rankOffset, worldSize, timeout, quantize, sessionId] = list;
  const int = (v: unknown, name: string): number => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
      throw new Error(`init_broadcaster: ${name} must be an integer >= 0, got ${String(v)}`);
    }
    return v;
  };
  if (typeof host !== 'string' || host === '') {
    throw new Error(`init_broadcaster: host must be a string, got ${String(host)}`);
  }
  return {
    host,
    port: int(port, 'port'),
    rankOffset: int(rankOffset, 'rank_offset'),
    inferenceWorldSize: int(worldSize, 'inference_world_size'),
    timeout: typeof timeout === 'number' ? timeout : null,
    quantizeInWeightTransfer: quantize === true,
    sessionId: typeof sessionId === 'string' ? sessionId : 'default',
  };
}

/** The version in `<dir>/ringserve-weights.json`, or null when it has none. */
async function manifestVersion(dir: string): Promise<number | null> {
  const text = await readFile(join(dir, WEIGHTS_MANIFEST), 'utf8').catch(() => null);
  if (text === null) return null;
  let version: unknown;
  try {
    version = (JSON.parse(text) as { version?: unknown } | null)?.version;
  } catch {
    version = undefined;
  }
  if (typeof version !== 'number' || !Number.isInteger(version)) {
    throw new RS_ERR_VLLM_BAD_FIELD(
      'weight_dir',
      `${WEIGHTS_MANIFEST} must hold {"version": <integer>}`,
    );
  }
  return version;
}
