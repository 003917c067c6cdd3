/**
 * `npm run bench:scaling`: how ringserve's throughput grows with --api-server-count (1, 2, 4), for
 * short requests (prompt 512, 16 tokens: the HTTP and request-handling path) and long ones (prompt
 * 512, 2048 tokens: the output path), against a bare fastify route on the same machine in the same
 * run as the ceiling (bench/scaling/bare-server.ts, also with 1, 2 and 4 workers). The engine runs
 * at --max-speed, packed responses without masks. ringserve runs with each --listener asked for
 * (`--listener both`, the default where Node has reusePort: primary and reuseport, alternating at
 * each count, so both see the same machine). Prints a table, the listener modes side by side, where
 * each cell's CPU went (per request, from /proc: the server's processes, the engine core's part,
 * the load generator; and the machine's idle share) and, with --json, a last line
 * `{"bench": "scaling", "rows": [...]}` (each row names its listener); a progress line per cell
 * on stderr.
 *
 *   npm run bench:scaling -- [--json] [--seconds 10] [--counts 1,2,4] [--kinds short,long]
 *     [--listener primary|reuseport|both]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ListenerMode, reusePortSupported } from '../src/cluster/listener.js';
import { ExitCode, isRingserveError, RS_ERR_CONFIG_INVALID } from '../src/errors.js';
import { getPreset } from '../src/sim/presets.js';
import { formatDuration } from './loadtest/progress.js';
import {
  type CellResult,
  captureBody,
  type RequestKind,
  runCell,
  type Target,
} from './scaling/cell.js';
import {
  cpuTable,
  listenerComparison,
  type ScalingRow,
  scalingJson,
  scalingTable,
} from './scaling/table.js';

const MODEL = 'qwen3-30b-a3b';
const KINDS: readonly RequestKind[] = [
  { name: 'short', promptTokens: 512, maxTokens: 16, concurrency: 64 },
  { name: 'long', promptTokens: 512, maxTokens: 2048, concurrency: 32 },
];

interface Options {
  json: boolean;
  seconds: number;
  warmupSeconds: number;
  counts: number[];
  kinds: RequestKind[];
  listeners: ListenerMode[];
}

const USAGE =
  'usage: [--json] [--seconds S] [--counts 1,2,4] [--kinds short,long] [--listener primary|reuseport|both]';

/** --listener's value as the modes to run; reuseport only where this Node has reusePort. */
function parseListeners(value: string): ListenerMode[] {
  const modes: ListenerMode[] | undefined =
    value === 'both'
      ? ['primary', 'reuseport']
      : value === 'primary' || value === 'reuseport'
        ? [value]
        : undefined;
  if (modes === undefined)
    throw new RS_ERR_CONFIG_INVALID('--listener', `"${value}": primary, reuseport or both`);
  if (modes.includes('reuseport') && !reusePortSupported()) {
    throw new RS_ERR_CONFIG_INVALID(
      '--listener',
      `${value} needs Node >= 22.12 (23.1 on the 23 line) on Linux; this is Node ${process.versions.node}`,
    );
  }
  return modes;
}

function parseOptions(argv: string[]): Options {
  const o: Options = {
    json: false,
    seconds: 10,
    warmupSeconds: 2,
    counts: [1, 2, 4],
    kinds: [...KINDS],
    listeners: reusePortSupported() ? ['primary', 'reuseport'] : ['primary'],
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = argv[i + 1];
    if (flag === '--json') o.json = true;
    else if (flag === '--seconds' && Number(value) > 0) o.seconds = Number(argv[++i]);
    else if (flag === '--counts' && value !== undefined) {
      o.counts = value.split(',').map(Number);
      i++;
      if (!o.counts.every((c) => Number.isInteger(c) && c >= 1 && c <= 32) || o.counts[0] !== 1) {
        throw new RS_ERR_CONFIG_INVALID(
          '--counts',
          'a list of integers in [1, 32] starting with 1',
        );
      }
    } else if (flag === '--kinds' && value !== undefined) {
      o.kinds = value.split(',').map((name) => {
        const kind = KINDS.find((k) => k.name === name);
        if (kind === undefined)
          throw new RS_ERR_CONFIG_INVALID('--kinds', `unknown kind "${name}"; short or long`);
        return kind;
      });
      i++;
    } else if (flag === '--listener' && value !== undefined) {
      o.listeners = parseListeners(value);
      i++;
    } else {
      throw new RS_ERR_CONFIG_INVALID(String(flag), USAGE);
    }
  }
  return o;
}

function row(
  kind: RequestKind,
  target: string,
  listener: string,
  servers: number,
  r: CellResult,
  base: CellResult | undefined,
): ScalingRow {
  // No base yet: this row is the target's count-1 row, the base itself.
  const speedup =
    base === undefined ? 1 : base.requestsPerS === 0 ? null : r.requestsPerS / base.requestsPerS;
  return {
    kind: kind.name,
    target,
    listener,
    api_server_count: servers,
    concurrency: kind.concurrency,
    req_s: r.requestsPerS,
    tok_s: r.tokensPerS,
    p50_ms: r.p50Ms,
    p99_ms: r.p99Ms,
    speedup_vs_1: speedup,
    efficiency: speedup === null ? null : speedup / servers,
    errors: r.errors,
    ...(r.cpu === null
      ? {}
      : {
          server_cpu_us: r.cpu.serverUs,
          engine_cpu_us: r.cpu.engineUs,
          load_cpu_us: r.cpu.loadUs,
          idle_pct: r.cpu.idlePct,
        }),
  };
}

/** The cells of one run, in order, and the rows they produced. */
class ScalingRun {
  readonly rows: ScalingRow[] = [];
  readonly #o: Options;
  readonly #ceiling: number;
  readonly #dir: string;
  readonly #cells: number;
  readonly #started = Date.now();
  #n = 0;

  constructor(o: Options, ceiling: number, dir: string) {
    this.#o = o;
    this.#ceiling = ceiling;
    this.#dir = dir;
    this.#cells = o.kinds.length * o.counts.length * (o.listeners.length + 1);
  }

  /**
   * ringserve at every count, each listener mode in turn at each count, then the bare route
   * (serving ringserve's own answer) at every count.
   */
  async kind(kind: RequestKind): Promise<void> {
    const bodyFile = join(this.#dir, `${kind.name}.bin`);
    let contentType = 'application/json';
    let captured = false;
    const capture = async (url: string): Promise<void> => {
      contentType = await captureBody(url, kind, this.#ceiling, bodyFile);
      captured = true;
    };
    const base = new Map<ListenerMode, CellResult>();
    for (const k of this.#o.counts) {
      for (const listener of this.#o.listeners) {
        const flags = [
          '--model',
          MODEL,
          '--max-speed',
          '--drain-timeout-s',
          '1',
          '--listener',
          listener,
        ];
        const target: Target = { kind: 'ringserve', flags };
        const before = captured ? undefined : capture;
        const r = await this.#cell(
          kind,
          'ringserve',
          listener,
          target,
          k,
          base.get(listener),
          before,
        );
        if (!base.has(listener)) base.set(listener, r);
      }
    }
    let bareBase: CellResult | undefined;
    for (const k of this.#o.counts) {
      const bare: Target = { kind: 'bare', bodyFile, contentType };
      const r = await this.#cell(kind, 'bare fastify', 'node:cluster', bare, k, bareBase);
      bareBase ??= r;
    }
  }

  async #cell(
    kind: RequestKind,
    label: string,
    listener: string,
    target: Target,
    servers: number,
    base: CellResult | undefined,
    before?: (url: string) => Promise<void>,
  ): Promise<CellResult> {
    const elapsed = formatDuration(Date.now() - this.#started);
    this.#n++;
    process.stderr.write(
      `[${this.#n}/${this.#cells}] ${kind.name} ${label} (${listener}) x${servers} (${elapsed} elapsed)\n`,
    );
    const r = await runCell({
      kind,
      target,
      servers,
      warmupMs: this.#o.warmupSeconds * 1000,
      windowMs: this.#o.seconds * 1000,
      promptIdCeiling: this.#ceiling,
      ...(before === undefined ? {} : { before }),
    });
    this.rows.push(row(kind, label, listener, servers, r, base));
    if (r.errors > 0)
      process.stderr.write(`  ${r.errors} failed requests, e.g. ${r.errorSample}\n`);
    return r;
  }
}

/**
 * The rows as the table shows them: per kind, ringserve by listener (in --listener's order) at
 * every count, then the bare route (the run alternates the listeners at each count).
 */
function byTarget(rows: readonly ScalingRow[], listeners: readonly ListenerMode[]): ScalingRow[] {
  const kinds = [...new Set(rows.map((r) => r.kind))];
  const group = (r: ScalingRow): number =>
    r.target === 'ringserve' ? listeners.indexOf(r.listener as ListenerMode) : listeners.length;
  return [...rows].sort(
    (a, b) =>
      kinds.indexOf(a.kind) - kinds.indexOf(b.kind) ||
      group(a) - group(b) ||
      a.api_server_count - b.api_server_count,
  );
}

async function main(): Promise<ExitCode> {
  const o = parseOptions(process.argv.slice(2));
  const ceiling = Math.min(...getPreset(MODEL).eosTokenIds) - 8;
  const dir = await mkdtemp(join(tmpdir(), `ringserve-scaling-${process.pid}-`));
  const run = new ScalingRun(o, ceiling, dir);
  try {
    for (const kind of o.kinds) await run.kind(kind);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  const header =
    `# ${availableParallelism()} cores, Node ${process.version}; engine ${MODEL} at --max-speed; ` +
    `${o.warmupSeconds} s warm-up + ${o.seconds} s per cell; --listener ${o.listeners.join(', ')}; ` +
    'the load generator runs in its own process on the same cores';
  const rows = byTarget(run.rows, o.listeners);
  const out = [header, '', scalingTable(rows)];
  const side = listenerComparison(rows);
  if (side !== '') out.push('', '## ringserve by --listener', '', side);
  const cpu = cpuTable(rows);
  if (cpu !== '') out.push('', '## CPU per request (every thread, from /proc)', '', cpu);
  if (o.json) out.push(scalingJson(rows));
  process.stdout.write(`${out.join('\n')}\n`);
  return ExitCode.Ok;
}

// Exit through process.exit, so the servers this run started are stopped on the way out.
process.once('SIGINT', () => process.exit(ExitCode.Interrupted));
process.once('SIGTERM', () => process.exit(ExitCode.Terminated));

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (isRingserveError(error)) console.error(`bench:scaling: ${error.code}: ${error.message}`);
    else console.error(`bench:scaling: ${(error as Error).stack ?? String(error)}`);
    process.exit(ExitCode.Failure);
  },
);
