/**
 * `--kv-transfer-config` of `ringserve engine --vllm-protocol`: vLLM's flag, a KVTransferConfig as
 * JSON (`{"kv_connector":"NixlConnector","kv_role":"kv_both"}`), which makes the headless engine
 * one side of a NIXL prefill/decode pair (nixl-connector.ts; docs/vllm-protocol.md,
 * "Prefill/decode"). Only NixlConnector is modelled. The side channel's address is vLLM's
 * (VLLM_NIXL_SIDE_CHANNEL_HOST, VLLM_NIXL_SIDE_CHANNEL_PORT); kv_connector_extra_config may name
 * its own (`side_channel_host`, `side_channel_port`, 0: a free port) and the lease (`kv_lease_s`).
 * A bad value is an error naming the flag and the key.
 */
import { randomUUID } from 'node:crypto';
import { RS_ERR_CONFIG_INVALID } from '../../../errors.js';
import { ENGINE_LIMITS } from '../../../wire/engine-defaults.js';

/** vLLM's kv_load_failure_policy: "fail" (its default since early 2026) or "recompute". */
export type KvLoadFailurePolicy = 'fail' | 'recompute';

export interface NixlConfig {
  /** The engine's id in the handles it answers (vLLM: kv_transfer_config.engine_id, else a uuid). */
  engineId: string;
  role: 'kv_both' | 'kv_producer' | 'kv_consumer';
  failurePolicy: KvLoadFailurePolicy;
  /** How long a prefill's pinned blocks wait for a decode engine's read. */
  leaseS: number;
  sideChannelHost: string;
  /** 0: any free port (the handle names the one bound). */
  sideChannelPort: number;
}

const FLAG = '--kv-transfer-config';
const ROLES = ['kv_both', 'kv_producer', 'kv_consumer'] as const;
/** vLLM's VLLM_NIXL_SIDE_CHANNEL_PORT default. */
const DEFAULT_SIDE_CHANNEL_PORT = 5600;
/** The newest NixlConnector's lease on a prefill's blocks (extended by decode heartbeats there). */
const DEFAULT_LEASE_S = 30;

function bad(key: string, what: string): never {
  throw new RS_ERR_CONFIG_INVALID(FLAG, `${key}: ${what}`);
}

function isPlain(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function port(value: unknown, key: string): number {
  const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > 65535)
    bad(key, `must be a port in [0, 65535], got ${String(value)}`);
  return n;
}

/** Parses the flag's JSON; `env` supplies vLLM's side-channel variables. */
export function parseKvTransferConfig(
  json: string,
  env: Readonly<Record<string, string | undefined>> = process.env,
): NixlConfig {
  let c: unknown;
  try {
    c = JSON.parse(json);
  } catch (error) {
    bad('JSON', (error as Error).message);
  }
  if (!isPlain(c)) bad('JSON', 'must be an object');
  if (c.kv_connector !== 'NixlConnector')
    bad('kv_connector', `only "NixlConnector" is modelled, got ${JSON.stringify(c.kv_connector)}`);
  const role = c.kv_role ?? 'kv_both';
  if (!ROLES.includes(role as NixlConfig['role']))
    bad('kv_role', `must be one of ${ROLES.join(', ')}, got ${JSON.stringify(role)}`);
  const extra = c.kv_connector_extra_config ?? {};
  if (!isPlain(extra)) bad('kv_connector_extra_config', 'must be an object');
  const engineId = c.engine_id ?? randomUUID();
  if (typeof engineId !== 'string' || engineId.length === 0)
    bad('engine_id', 'must be a non-empty string');
  const policy = c.kv_load_failure_policy ?? extra.kv_load_failure_policy ?? 'fail';
  if (policy !== 'fail' && policy !== 'recompute')
    bad('kv_load_failure_policy', `must be "fail" or "recompute", got ${JSON.stringify(policy)}`);
  const leaseS = extra.kv_lease_s ?? DEFAULT_LEASE_S;
  const range = ENGINE_LIMITS.kvTransferTimeoutS;
  if (typeof leaseS !== 'number' || !(leaseS > 0) || leaseS > range.max)
    bad('kv_connector_extra_config.kv_lease_s', `must be a number in (0, ${range.max}]`);
  const host = extra.side_channel_host ?? env.VLLM_NIXL_SIDE_CHANNEL_HOST ?? '127.0.0.1';
  if (typeof host !== 'string' || host.length === 0)
    bad('kv_connector_extra_config.side_channel_host', 'must be a non-empty string');
  return {
    engineId,
    role: role as NixlConfig['role'],
    failurePolicy: policy,
    leaseS,
    sideChannelHost: host,
    sideChannelPort: port(
      extra.side_channel_port ?? env.VLLM_NIXL_SIDE_CHANNEL_PORT ?? DEFAULT_SIDE_CHANNEL_PORT,
      'kv_connector_extra_config.side_channel_port (or VLLM_NIXL_SIDE_CHANNEL_PORT)',
    ),
  };
}
