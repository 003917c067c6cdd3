/**
 * How the supervisor tells a child what it is: environment variables set at fork, read once at the
 * child's start. The config travels as the JSON of the validated config object, so every process
 * runs on exactly the configuration the primary checked.
 */
import { fileURLToPath } from 'node:url';
import { buildConfig, type RingserveConfig } from '../config.js';
import { RS_ERR_CONFIG_INVALID } from '../errors.js';
import { childArenaEnv } from '../shm/malloc-trim.js';

export const ENV_ROLE = 'RINGSERVE_ROLE';
export const ENV_REGION = 'RINGSERVE_REGION';
export const ENV_CONFIG = 'RINGSERVE_CONFIG';
export const ENV_SERVER_INDEX = 'RINGSERVE_SERVER_INDEX';
/** Set on a restarted engine only: the EngineRestore of the engine that died, as JSON. */
export const ENV_ENGINE_RESTORE = 'RINGSERVE_ENGINE_RESTORE';

/** What a restarted engine takes over: paused if the trainer had paused it, the same weights. */
export interface EngineRestore {
  paused: boolean;
  weightVersion: number;
}

/** The restore state in the environment, or null for a first engine (or a malformed value). */
export function readEngineRestore(env: NodeJS.ProcessEnv = process.env): EngineRestore | null {
  const text = env[ENV_ENGINE_RESTORE];
  if (!text) return null;
  const value = JSON.parse(text) as Partial<EngineRestore>;
  if (typeof value.paused !== 'boolean' || !Number.isInteger(value.weightVersion)) return null;
  return { paused: value.paused, weightVersion: value.weightVersion as number };
}

export type Role = 'engine' | 'api';

const NOT_SET = 'is not set: this process is started by the supervisor';

/** Messages between the supervisor and its children over the IPC channel (never per request). */
export type SupervisorMessage =
  | { type: 'engine-down' }
  | { type: 'engine-up' }
  | { type: 'server-down'; server: number }
  | { type: 'abort-ids'; ids: string[]; from: number }
  | { type: 'drain'; timeoutMs: number }
  /** A client connection handed over with this message (connection-distributor.ts). */
  | { type: 'conn' };

export type ChildMessage =
  | { type: 'ready'; role: Role; server?: number; port?: number }
  | { type: 'server-reset'; server: number }
  | { type: 'server-failed'; server: number }
  | { type: 'abort-ids'; ids: string[]; from: number }
  | { type: 'drained'; server: number }
  /** The connection of the last 'conn' is this server's now. */
  | { type: 'conn-ack' };

export interface ChildEnv {
  region: string;
  config: RingserveConfig;
  server: number;
}

/** Reads the role's environment; RS_ERR_CONFIG_INVALID naming the variable when one is missing. */
export function readChildEnv(env: NodeJS.ProcessEnv = process.env): ChildEnv {
  const region = env[ENV_REGION];
  const configJson = env[ENV_CONFIG];
  if (!region) throw new RS_ERR_CONFIG_INVALID(ENV_REGION, NOT_SET);
  if (!configJson) throw new RS_ERR_CONFIG_INVALID(ENV_CONFIG, NOT_SET);
  const server = Number(env[ENV_SERVER_INDEX] ?? '-1');
  return { region, config: buildConfig(JSON.parse(configJson)), server };
}

export function childEnv(role: Role, region: string, config: RingserveConfig, server = -1) {
  return {
    ...process.env,
    ...childArenaEnv(config.mallocArenaMax),
    [ENV_ROLE]: role,
    [ENV_REGION]: region,
    [ENV_CONFIG]: JSON.stringify(config),
    [ENV_SERVER_INDEX]: String(server),
  };
}

/** Entry points of the child processes, as compiled JS next to this file's compiled form. */
export function entryPoint(role: Role): string {
  const rel = role === 'engine' ? './engine-process.js' : './api-process.js';
  return fileURLToPath(new URL(rel, import.meta.url));
}

/** Sends an IPC message if the channel is open; a closed channel means the peer is going anyway. */
export function sendToParent(message: ChildMessage): void {
  if (process.send && process.connected) process.send(message);
}
