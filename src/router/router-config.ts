/**
 * `ringserve router` flags: the instances of each role, where to listen, how often to check the
 * instances' health. A table like src/config.ts's CONFIG_FIELDS (the router is not a server and
 * takes none of its flags), with --help generated from it; a bad value names its flag.
 */
import { RS_ERR_CONFIG_INVALID } from '../errors.js';

export interface RouterConfig {
  prefill: string[];
  decode: string[];
  host: string;
  port: number;
  healthIntervalMs: number;
  bodyLimitMb: number;
}

interface RouterFlag {
  flag: string;
  key: keyof RouterConfig;
  kind: 'urls' | 'string' | 'int';
  default: string | number | null;
  min?: number;
  max?: number;
  help: string;
}

// biome-ignore format: one row per flag reads as the table it is
const ROUTER_FLAGS: readonly RouterFlag[] = [
  { flag: '--prefill', key: 'prefill', kind: 'urls', default: null, help: 'prefill instances, comma-separated base URLs (http://host:port)' },
  { flag: '--decode', key: 'decode', kind: 'urls', default: null, help: 'decode instances, comma-separated base URLs' },
  { flag: '--host', key: 'host', kind: 'string', default: '0.0.0.0', help: 'address to listen on' },
  { flag: '--port', key: 'port', kind: 'int', default: 8000, min: 0, max: 65535, help: 'TCP port (0 = any free port)' },
  { flag: '--health-interval-ms', key: 'healthIntervalMs', kind: 'int', default: 2000, min: 100, max: 600_000, help: "how often each instance's /health is checked" },
  { flag: '--body-limit-mb', key: 'bodyLimitMb', kind: 'int', default: 32, min: 1, max: 1024, help: 'largest request body in MiB (413 above)' },
];

export function routerHelp(): string {
  const rows = ROUTER_FLAGS.map((f) => {
    const def = f.default === null ? 'required' : `default ${f.default}`;
    return `  ${f.flag.padEnd(22)} ${f.help} (${def})`;
  });
  return `usage: ringserve router --prefill URL[,URL...] --decode URL[,URL...] [flags]\n\n${rows.join('\n')}`;
}

export function parseRouterArgs(argv: readonly string[]): RouterConfig {
  const values = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    const eq = arg.indexOf('=');
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    if (ROUTER_FLAGS.find((f) => f.flag === name) === undefined) {
      throw new RS_ERR_CONFIG_INVALID(name, 'unknown flag of ringserve router');
    }
    const value = eq > 0 ? arg.slice(eq + 1) : argv[++i];
    if (value === undefined) throw new RS_ERR_CONFIG_INVALID(name, 'needs a value');
    values.set(name, value);
  }
  const out: Record<string, unknown> = {};
  for (const f of ROUTER_FLAGS) out[f.key] = readFlag(f, values.get(f.flag));
  return out as unknown as RouterConfig;
}

function readFlag(f: RouterFlag, text: string | undefined): unknown {
  if (text === undefined) {
    if (f.default === null) throw new RS_ERR_CONFIG_INVALID(f.flag, 'is required');
    return f.default;
  }
  if (f.kind === 'string') return text;
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
