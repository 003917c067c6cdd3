/**
 * `ringserve router` flags: the instances of each role, where to listen, how often to check the
 * instances' health, its keys, how long a removed instance may drain and its log level. A table like src/config.ts's CONFIG_FIELDS (the
 * router is not a server and takes none of its other flags), with --help generated from it; a bad
 * value names its flag. As a server, the router refuses a non-loopback --host without --api-key
 * unless --allow-unauthenticated: anyone who reaches it may generate on the instances behind it.
 */
import { checkExposure, LOG_LEVELS, type RingserveConfig } from '../config.js';
import { RS_ERR_CONFIG_INVALID } from '../errors.js';

export interface RouterConfig {
  prefill: string[];
  decode: string[];
  host: string;
  port: number;
  healthIntervalMs: number;
  bodyLimitMb: number;
  /** Clients must send it as a Bearer key on generate and the /v1 routes; null: open. */
  apiKey: string | null;
  /** Sent as a Bearer key to every instance; --upstream-api-key, else the router's own key. */
  upstreamApiKey: string | null;
  /**
   * Clients must send it on the admin routes (fan-out, /instances); null: the --api-key does, and
   * with neither they are open (only on loopback, or with --allow-unauthenticated).
   */
  adminApiKey: string | null;
  /** How long DELETE /instances waits for a removed instance's requests before its 503. */
  instanceDrainTimeoutS: number;
  /** On SIGTERM, how long the router waits for its requests in flight before cutting them. */
  drainTimeoutS: number;
  /** Threads that merge prefill and decode answers off the event loop (merge-pool.ts). */
  mergeThreads: number;
  allowUnauthenticated: boolean;
  logLevel: RingserveConfig['logLevel'];
}

interface RouterFlag {
  flag: string;
  key: keyof RouterConfig;
  kind: 'urls' | 'string' | 'int' | 'bool' | 'enum';
  default: string | number | boolean | null;
  /** Read when the flag is not given (a key is better kept out of `ps`). */
  env?: string;
  min?: number;
  max?: number;
  choices?: readonly string[];
  help: string;
}

// biome-ignore format: one row per flag reads as the table it is
const ROUTER_FLAGS: readonly RouterFlag[] = [
  { flag: '--prefill', key: 'prefill', kind: 'urls', default: null, help: 'prefill instances, comma-separated base URLs (http://host:port)' },
  { flag: '--decode', key: 'decode', kind: 'urls', default: null, help: 'decode instances, comma-separated base URLs' },
  { flag: '--host', key: 'host', kind: 'string', default: '127.0.0.1', help: 'address to listen on; on a network: --host 0.0.0.0 --api-key <key> (or --allow-unauthenticated)' },
  { flag: '--port', key: 'port', kind: 'int', default: 8000, min: 0, max: 65535, help: 'TCP port (0 = any free port)' },
  { flag: '--health-interval-ms', key: 'healthIntervalMs', kind: 'int', default: 2000, min: 100, max: 600_000, help: "how often each instance's /health is checked" },
  { flag: '--body-limit-mb', key: 'bodyLimitMb', kind: 'int', default: 32, min: 1, max: 1024, help: 'largest request body in MiB (413 above)' },
  { flag: '--api-key', key: 'apiKey', kind: 'string', default: null, env: 'VLLM_API_KEY', help: 'require "Authorization: Bearer <key>" on /inference/v1/generate and the /v1 routes (/health, /liveness and /metrics stay open)' },
  { flag: '--upstream-api-key', key: 'upstreamApiKey', kind: 'string', default: null, env: 'RINGSERVE_UPSTREAM_API_KEY', help: "the Bearer key sent to the instances (when unset: the router's --api-key, if any)" },
  { flag: '--admin-api-key', key: 'adminApiKey', kind: 'string', default: null, env: 'RINGSERVE_ADMIN_API_KEY', help: 'require this key on the admin routes (pause, update_weights, ..., /instances; when unset: the --api-key, if any)' },
  { flag: '--merge-threads', key: 'mergeThreads', kind: 'int', default: 1, min: 1, max: 64, help: 'threads that merge prefill and decode answers off the event loop (a request stays on one)' },
  { flag: '--instance-drain-timeout-s', key: 'instanceDrainTimeoutS', kind: 'int', default: 300, min: 0, max: 86_400, help: 'how long DELETE /instances waits for a removed instance to finish its requests (503 after; it is dropped once they finish)' },
  { flag: '--drain-timeout-s', key: 'drainTimeoutS', kind: 'int', default: 30, min: 0, max: 3600, help: 'on SIGTERM, stop listening, answer new requests on open connections 503, and wait this long for the requests in flight before closing their connections' },
  { flag: '--allow-unauthenticated', key: 'allowUnauthenticated', kind: 'bool', default: false, help: 'allow a non-loopback --host without --api-key' },
  { flag: '--log-level', key: 'logLevel', kind: 'enum', default: 'info', choices: LOG_LEVELS, help: 'pino log level' },
];

export function routerHelp(): string {
  const rows = ROUTER_FLAGS.map((f) => {
    const def =
      f.kind === 'bool'
        ? 'off'
        : f.default !== null
          ? `default ${f.default}`
          : f.kind === 'urls'
            ? 'required'
            : 'unset';
    const env = f.env === undefined ? '' : `, env ${f.env}`;
    const choices = f.choices === undefined ? '' : `: ${f.choices.join(', ')}`;
    return `  ${f.flag.padEnd(24)} ${f.help}${choices} (${def}${env})`;
  });
  return `usage: ringserve router --prefill URL[,URL...] --decode URL[,URL...] [flags]\n\n${rows.join('\n')}`;
}

/** `env`: where keys not given as flags are read (process.env by default). */
export function parseRouterArgs(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>> = process.env,
): RouterConfig {
  const values = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    const eq = arg.indexOf('=');
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const flag = ROUTER_FLAGS.find((f) => f.flag === name);
    if (flag === undefined)
      throw new RS_ERR_CONFIG_INVALID(name, 'unknown flag of ringserve router');
    const value = eq > 0 ? arg.slice(eq + 1) : flag.kind === 'bool' ? 'true' : argv[++i];
    if (value === undefined) throw new RS_ERR_CONFIG_INVALID(name, 'needs a value');
    values.set(name, value);
  }
  const out: Record<string, unknown> = {};
  for (const f of ROUTER_FLAGS) {
    const fromEnv = f.env === undefined || env[f.env] === '' ? undefined : env[f.env];
    out[f.key] = readFlag(f, values.get(f.flag) ?? fromEnv);
  }
  const config = out as unknown as RouterConfig;
  config.upstreamApiKey ??= config.apiKey;
  checkExposure(config, 'routing');
  return config;
}

function readFlag(f: RouterFlag, text: string | undefined): unknown {
  if (text === undefined) {
    if (f.default === null && f.kind === 'urls') {
      throw new RS_ERR_CONFIG_INVALID(f.flag, 'is required');
    }
    return f.default;
  }
  if (f.kind === 'string') {
    if (text === '') throw new RS_ERR_CONFIG_INVALID(f.flag, 'must not be empty');
    return text;
  }
  if (f.kind === 'bool') {
    if (text !== 'true' && text !== 'false') {
      throw new RS_ERR_CONFIG_INVALID(f.flag, `must be true or false, got "${text}"`);
    }
    return text === 'true';
  }
  if (f.kind === 'enum') {
    if (!f.choices!.includes(text)) {
      throw new RS_ERR_CONFIG_INVALID(
        f.flag,
        `must be one of ${f.choices!.join(', ')}, got "${text}"`,
      );
    }
    return text;
  }
  if (f.kind === 'int') {
    const n = Number(text);
    if (!Number.isInteger(n) || n < (f.min ?? 0) || n > (f.max ?? Infinity)) {
      throw new RS_ERR_CONFIG_INVALID(
        f.flag,
        `must be an integer in [${f.min}, ${f.max}], got "${text}"`,
      );
    }
    return n;
  }
  const urls = text.split(',').filter((u) => u !== '');
  for (const u of urls) {
    if (!/^https?:\/\/[^/]+/.test(u))
      throw new RS_ERR_CONFIG_INVALID(f.flag, `"${u}" is not an http(s) URL`);
  }
  if (urls.length === 0) throw new RS_ERR_CONFIG_INVALID(f.flag, 'needs at least one URL');
  return urls;
}
