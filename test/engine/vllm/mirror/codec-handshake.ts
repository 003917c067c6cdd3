/**
 * Startup messages (VH §2-3; VE §2-3): HELLO and READY on the handshake DEALER, the frontend's init
 * (EngineHandshakeMetadata), and the registration (EngineCoreReadyResponse) an engine sends first
 * on each input DEALER. All are maps; unknown keys are ignored by every decoder of vLLM's.
 */
import {
  ERAS,
  type Era,
  type KeyType,
  REGISTRATION_KEYS,
  REGISTRATION_TYPES,
  type RegistrationKey,
} from './eras.js';
import { f64, pack, unpack } from './msgpack.js';
import {
  arrayOf,
  bool,
  float,
  int,
  MirrorDecodeError,
  map,
  nullable,
  plain,
  plainMap,
  str,
} from './wire-types.js';

/** The DEALER routing id of DP rank `rank`: 2 bytes little-endian (VH §6.1). */
export function engineIdentity(rank: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(rank);
  return b;
}

export interface HandshakeStatus {
  status: 'HELLO' | 'READY';
  local: boolean;
  headless: boolean;
  /** READY only, and only when data_parallel_size > 1 (VH §2.4). */
  parallel_config_hash?: string;
}

export function encodeStatus(s: HandshakeStatus): Buffer {
  return pack(s);
}

export function decodeStatus(payload: Buffer): HandshakeStatus {
  const m = map(unpack(payload), 'handshake');
  const status = str(m.status, 'handshake.status');
  if (status !== 'HELLO' && status !== 'READY') {
    throw new MirrorDecodeError('handshake.status', `${status} is neither HELLO nor READY`);
  }
  const out: HandshakeStatus = {
    status,
    local: bool(m.local, 'handshake.local'),
    headless: bool(m.headless, 'handshake.headless'),
  };
  if (m.parallel_config_hash !== undefined) {
    out.parallel_config_hash = str(m.parallel_config_hash, 'handshake.parallel_config_hash');
  }
  return out;
}

/** EngineZmqAddresses: one inputs/outputs entry per frontend client (client_index). */
export interface EngineAddresses {
  inputs: string[];
  outputs: string[];
  coordinator_input: string | null;
  coordinator_output: string | null;
  frontend_stats_publish_address: string | null;
}

export interface InitMessage {
  addresses: EngineAddresses;
  /** `{}` unless coordinated (MoE) DP (VH §2.3). */
  parallel_config: Record<string, unknown>;
}

export function encodeInit(init: InitMessage): Buffer {
  return pack(init);
}

export function decodeInit(payload: Buffer): InitMessage {
  const m = map(unpack(payload), 'init');
  const a = map(m.addresses, 'init.addresses');
  const opt = (k: string) => nullable(str)(a[k] ?? null, `init.addresses.${k}`);
  return {
    addresses: {
      inputs: arrayOf(str)(a.inputs, 'init.addresses.inputs'),
      outputs: arrayOf(str)(a.outputs, 'init.addresses.outputs'),
      coordinator_input: opt('coordinator_input'),
      coordinator_output: opt('coordinator_output'),
      frontend_stats_publish_address: opt('frontend_stats_publish_address'),
    },
    parallel_config: plainMap(m.parallel_config ?? {}, 'init.parallel_config'),
  };
}

export type Registration = Partial<Record<RegistrationKey, unknown>> & Record<string, unknown>;

const CHECKS: Readonly<Record<KeyType, (v: unknown, where: string) => unknown>> = {
  int,
  float,
  str,
  bool,
  'int?': nullable(int),
  'float?': nullable(float),
  'str?': nullable(str),
  'map?': nullable(plainMap),
};

/** The wire form: float keys as float64 even when integral. */
export function encodeRegistration(reg: Registration): Buffer {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(reg)) {
    const type = (REGISTRATION_TYPES as Record<string, KeyType>)[k];
    out[k] = (type === 'float' || type === 'float?') && typeof v === 'number' ? f64(v) : v;
  }
  return pack(out);
}

/**
 * A registration as a frontend of `era` reads it: every required key of the era present, every
 * known key of its type (whatever the era), unknown keys kept as they came.
 */
export function decodeRegistration(era: Era, payload: Buffer): Registration {
  if (payload.length === 0) throw new MirrorDecodeError('registration', 'empty (pre-0.20 engine)');
  const m = map(unpack(payload), 'registration');
  const missing = REGISTRATION_KEYS[era].required.filter((k) => !(k in m));
  if (missing.length > 0) {
    throw new MirrorDecodeError('registration', `missing required ${missing.join(', ')}`);
  }
  const out: Registration = {};
  for (const [k, v] of Object.entries(m)) {
    const type = (REGISTRATION_TYPES as Record<string, KeyType>)[k];
    out[k] = type === undefined ? plain(v) : CHECKS[type](v, `registration.${k}`);
  }
  const dtype = out.dtype;
  if (!['float16', 'bfloat16', 'float32'].includes(dtype as string)) {
    // vllm-rs's ModelDtype takes exactly these (VH §3.4, dtype.rs @ 5492559d).
    throw new MirrorDecodeError('registration.dtype', `${String(dtype)} is not a model dtype`);
  }
  return out;
}

/**
 * The newest era `reg` fits (VH §3.5): it has all the era's required keys and, when the era brought
 * new keys, at least one of them. A 0.23-0.25 engine's 10 keys read as '0.26': they are the same.
 */
export function registrationEra(reg: Registration): Era {
  let found: Era = ERAS[0];
  let before: ReadonlySet<string> = new Set();
  for (const era of ERAS) {
    const { required, optional } = REGISTRATION_KEYS[era];
    const added = [...required, ...optional].filter((k) => !before.has(k));
    const fits =
      required.every((k) => k in reg) && (added.length === 0 || added.some((k) => k in reg));
    if (fits) found = era;
    before = new Set([...required, ...optional]);
  }
  return found;
}
