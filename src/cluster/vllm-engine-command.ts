import { randomUUID } from 'node:crypto';
import { parseArgs } from '../cli-args.js';
import { CONFIG_FIELDS, type ConfigField, describeRange, type RingserveConfig } from '../config.js';
import { dialFrontend, INIT_TIMEOUT_MS } from '../engine/vllm/headless/dial.js';
import { type DpGroup, openDpGroup } from '../engine/vllm/headless/dp-group.js';
import {
  DEFAULT_DP_SYNC_INTERVAL,
  type DpMode,
  dpGroupPort,
  dpModeOf,
  modelKey,
  parallelConfigHash,
} from '../engine/vllm/headless/dp-wave.js';
import { VllmHeadlessEngine } from '../engine/vllm/headless/engine.js';
import { type NixlConfig, parseKvTransferConfig } from '../engine/vllm/headless/nixl-config.js';
import { NixlConnector } from '../engine/vllm/headless/nixl-connector.js';
import {
  type DpGroupConfig,
  getVllmLayout,
  NEWEST_VLLM_LAYOUT,
  type RegistrationValues,
  VLLM_VERSION_NAMES,
  type VllmLayout,
} from '../engine/vllm/index.js';
import { ExitCode, RS_ERR_CONFIG_INVALID, RS_ERR_VLLM_HANDSHAKE } from '../errors.js';
import { createLogger } from '../obs/log.js';
import { shareMemoryCollect } from '../obs/memory-collect.js';
import { SimEngine } from '../sim/sim-engine.js';
import { engineConfigFrom } from './sim-engine-config.js';

/**
 * `ringserve engine --vllm-protocol --data-parallel-address A --data-parallel-rpc-port P --model
 * MODEL [sim flags]`: the simulator as a headless vLLM engine, dialling a vLLM-protocol frontend
 * (ringserve's `serve --engine vllm`, or vLLM's own) the way `vllm serve --headless` does. Its own
 * flags are the table below (named as vLLM names them); the simulator's are the rows of
 * CONFIG_FIELDS listed in SIM_FLAGS, parsed by the same parser as `serve`.
 *
 * With `--data-parallel-size N --data-parallel-start-rank R` it is rank R of a DP group, as `vllm
 * serve --headless --data-parallel-size-local 1` runs one: identity R, engine_index R; a MoE model
 * (a card with routing layers) joins the group's lockstep waves (headless/dp-wave.ts), a dense
 * model's rank runs independently and registers as vLLM's does (data_parallel_size 1, rank 0).
 */

interface EngineFlag {
  readonly flag: string;
  /** Other spellings of the same flag. */
  readonly aliases?: readonly string[];
  readonly kind: 'bool' | 'string' | 'int';
  readonly default: string | number | boolean | null;
  readonly min?: number;
  readonly max?: number;
  readonly help: string;
}

// biome-ignore format: one row per flag reads as the table it is
const ENGINE_FLAGS: readonly EngineFlag[] = [
  { flag: '--vllm-protocol', kind: 'bool', default: false, help: 'speak vLLM v1 engine protocol as a headless engine (required: the only protocol)' },
  { flag: '--data-parallel-address', kind: 'string', default: '127.0.0.1', help: "address of the frontend's handshake socket" },
  { flag: '--data-parallel-rpc-port', kind: 'int', default: 29550, min: 1, max: 65535, help: "port of the frontend's handshake socket" },
  { flag: '--data-parallel-size', kind: 'int', default: 1, min: 1, max: 65535, help: 'ranks in the data-parallel group (a MoE model steps them in lockstep waves; a dense one runs each on its own)' },
  { flag: '--data-parallel-start-rank', aliases: ['--data-parallel-rank'], kind: 'int', default: 0, min: 0, max: 65534, help: "this engine's DP rank, below --data-parallel-size (also --data-parallel-rank): its identity and engine_index" },
  { flag: '--data-parallel-size-local', kind: 'int', default: 1, min: 1, max: 1, help: 'DP ranks in this process: only 1 (run one `ringserve engine` per rank)' },
  { flag: '--dp-sync-interval', kind: 'int', default: DEFAULT_DP_SYNC_INTERVAL, min: 1, max: 0xffffffff, help: "steps between a MoE DP group's all-reduces of unfinished requests (vLLM #52957; also on a wave's first step); the same on every rank" },
  { flag: '--vllm-version', kind: 'string', default: NEWEST_VLLM_LAYOUT.name, help: `the vLLM release series whose message layouts to speak: ${VLLM_VERSION_NAMES.join(', ')}` },
  { flag: '--enable-return-routed-experts', kind: 'bool', default: false, help: 'every output carries MoE routing rows (vLLM: engine-wide)' },
  { flag: '--enable-return-sampling-mask', kind: 'bool', default: false, help: 'every output carries sampling masks as new_sampling_mask (vLLM >= 0.28, engine-wide); requests must sample with temperature > 0 and top_k > 0' },
  { flag: '--kv-transfer-config', kind: 'string', default: null, help: 'vLLM\'s KVTransferConfig as JSON: {"kv_connector":"NixlConnector","kv_role":"kv_both"} makes the engine one side of a NIXL P/D pair (engine_id, kv_load_failure_policy; kv_connector_extra_config: kv_lease_s, side_channel_host, side_channel_port)' },
];

/** The simulator's flags `engine` takes from CONFIG_FIELDS. */
const SIM_FLAGS: readonly (keyof RingserveConfig)[] = [
  'model',
  'maxModelLen',
  'maxNumSeqs',
  'maxNumBatchedTokens',
  'numGpuBlocks',
  'blockSize',
  'seed',
  'speedup',
  'maxSpeed',
  'schedulingPolicy',
  'lengthProfile',
  'logLevel',
  'kvTransferBandwidthGbs',
];

/** The engine's place in a data-parallel group. */
export interface DpArgs {
  /** --data-parallel-size */
  size: number;
  /** --data-parallel-start-rank (--data-parallel-rank) */
  rank: number;
  /** --dp-sync-interval */
  syncInterval: number;
}

export interface EngineCommandArgs {
  host: string;
  port: number;
  dp: DpArgs;
  layout: VllmLayout;
  returnRoutedExperts: boolean;
  returnSamplingMask: boolean;
  /** --kv-transfer-config: a NIXL side; null: none. */
  nixl: NixlConfig | null;
  config: RingserveConfig;
}

/** Splits argv into the engine's own flags and the simulator flags; throws naming a bad flag. */
export function parseEngineArgs(argv: readonly string[]): EngineCommandArgs {
  const own = new Map<string, string | boolean>();
  /** Which spelling set each flag (an alias and its flag must not disagree). */
  const spelled = new Map<string, string>();
  const rest: string[] = [];
  const simFlags = new Set(
    CONFIG_FIELDS.filter((f) => SIM_FLAGS.includes(f.key)).flatMap((f) => [
      f.flag,
      `--no-${f.flag.slice(2)}`,
    ]),
  );
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    const eq = arg.indexOf('=');
    const name = eq === -1 ? arg : arg.slice(0, eq);
    const row = ENGINE_FLAGS.find((f) => f.flag === name || f.aliases?.includes(name) === true);
    if (row === undefined) {
      if (!simFlags.has(name))
        throw new RS_ERR_CONFIG_INVALID(name, 'not an `engine` flag (see ringserve engine --help)');
      rest.push(arg);
      if (eq === -1 && !name.startsWith('--no-') && !isBoolField(name) && i + 1 < argv.length)
        rest.push(argv[++i] as string);
      continue;
    }
    if (row.kind === 'bool') own.set(row.flag, eq === -1 ? true : arg.slice(eq + 1) === 'true');
    else {
      const value = eq === -1 ? argv[++i] : arg.slice(eq + 1);
      if (value === undefined) throw new RS_ERR_CONFIG_INVALID(name, 'expects a value');
      const earlier = spelled.get(row.flag);
      if (earlier !== undefined && earlier !== name && own.get(row.flag) !== value) {
        throw new RS_ERR_CONFIG_INVALID(name, `conflicts with ${earlier} ${own.get(row.flag)}`);
      }
      spelled.set(row.flag, name);
      own.set(row.flag, value);
    }
  }
  if (own.get('--vllm-protocol') !== true) {
    throw new RS_ERR_CONFIG_INVALID(
      '--vllm-protocol',
      'is required: the engine speaks only the vLLM protocol',
    );
  }
  const port = intFlag(own, '--data-parallel-rpc-port');
  const dpSize = intFlag(own, '--data-parallel-size');
  const dpRank = intFlag(own, '--data-parallel-start-rank');
  if (dpRank >= dpSize) {
    throw new RS_ERR_CONFIG_INVALID(
      spelled.get('--data-parallel-start-rank') ?? '--data-parallel-start-rank',
      `must be below --data-parallel-size ${dpSize}, got ${dpRank}`,
    );
  }
  const local = own.get('--data-parallel-size-local');
  if (local !== undefined && Number(local) !== 1) {
    throw new RS_ERR_CONFIG_INVALID(
      '--data-parallel-size-local',
      `only 1 is supported (one \`ringserve engine\` process per DP rank), got ${String(local)}`,
    );
  }
  const host = String(own.get('--data-parallel-address') ?? '127.0.0.1');
  const version = own.get('--vllm-version');
  const layout = typeof version === 'string' ? getVllmLayout(version) : NEWEST_VLLM_LAYOUT;
  const returnSamplingMask = own.get('--enable-return-sampling-mask') === true;
  const kvConfig = own.get('--kv-transfer-config');
  if (returnSamplingMask && !layout.output.includes('new_sampling_mask')) {
    throw new RS_ERR_CONFIG_INVALID(
      '--enable-return-sampling-mask',
      `vLLM ${layout.series} has no sampling masks (new_sampling_mask came with 0.28)`,
    );
  }
  return {
    host,
    port,
    dp: { size: dpSize, rank: dpRank, syncInterval: intFlag(own, '--dp-sync-interval') },
    layout,
    returnRoutedExperts: own.get('--enable-return-routed-experts') === true,
    returnSamplingMask,
    nixl: typeof kvConfig === 'string' ? parseKvTransferConfig(kvConfig) : null,
    config: parseArgs(rest, {}),
  };
}

/** An int flag of ENGINE_FLAGS: its value, or its default; out of [min, max]: an error naming it. */
function intFlag(own: ReadonlyMap<string, string | boolean>, flag: string): number {
  const row = ENGINE_FLAGS.find((f) => f.flag === flag) as EngineFlag;
  const raw = own.get(flag);
  if (raw === undefined) return row.default as number;
  const n = Number(raw);
  const min = row.min ?? Number.MIN_SAFE_INTEGER;
  const max = row.max ?? Number.MAX_SAFE_INTEGER;
  if (typeof raw !== 'string' || raw.trim() === '' || !Number.isInteger(n) || n < min || n > max) {
    throw new RS_ERR_CONFIG_INVALID(
      flag,
      `must be an integer in [${min}, ${max}], got ${String(raw)}`,
    );
  }
  return n;
}

function isBoolField(flag: string): boolean {
  return CONFIG_FIELDS.find((f) => f.flag === flag)?.kind === 'bool';
}

export function engineHelp(): string {
  const lines = ['usage: ringserve engine --vllm-protocol [flags]', '', 'flags:'];
  const rows: [string, string, string][] = ENGINE_FLAGS.map((f) => [
    f.kind === 'bool' ? f.flag : `${f.flag} <${f.kind}>`,
    f.help,
    `default: ${f.default ?? 'unset'}`,
  ]);
  for (const f of CONFIG_FIELDS.filter((c) => SIM_FLAGS.includes(c.key)) as ConfigField[]) {
    const shown = f.default === null ? (f.derived ?? 'unset') : String(f.default);
    rows.push([
      f.kind === 'bool' ? f.flag : `${f.flag} <${f.kind === 'enum' ? 'choice' : f.kind}>`,
      f.help,
      `default: ${shown}; ${describeRange(f)}`,
    ]);
  }
  const width = Math.max(...rows.map((r) => r[0].length)) + 2;
  for (const [flag, help, more] of rows) {
    lines.push(`  ${flag.padEnd(width)}${help}`);
    lines.push(`  ${''.padEnd(width)}${more}`);
  }
  lines.push(`  ${'--help, -h'.padEnd(width)}print this help and exit`);
  return `${lines.join('\n')}\n`;
}

/** Runs the engine until SIGTERM/SIGINT, the frontend's departure or a fatal error. */
export async function runEngineCommand(argv: readonly string[]): Promise<ExitCode> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(engineHelp());
    return ExitCode.Ok;
  }
  const args = parseEngineArgs(argv);
  const { config, layout } = args;
  process.title = 'ringserve-vllm-engine';
  // Installed first: a signal during the handshake ends the process at once (nothing to drain).
  let engine: VllmHeadlessEngine | null = null;
  const stop = (): void => {
    if (engine === null) process.exit(ExitCode.Ok);
    engine.stop();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  // Before pino's thread starts: SIGUSR2 collects in every thread, as in serve's processes.
  const collect = shareMemoryCollect();
  const log = createLogger(config.logLevel, { name: 'ringserve-vllm-engine' });
  collect.onSignal(log);
  const nixlConfig = args.nixl === null ? null : nixlOfRank(args.nixl, args.dp);
  // A NIXL prefill keeps a prompt's blocks for its lease (the simulator's pin timeout).
  const sim = new SimEngine({
    ...engineConfigFrom(config),
    ...(nixlConfig === null ? {} : { kvTransferTimeoutS: nixlConfig.leaseS }),
  });
  const nixl = nixlConfig === null ? null : await NixlConnector.start(nixlConfig, sim, log);
  if (nixl !== null && nixlConfig !== null) {
    const { engineId, role, failurePolicy } = nixlConfig;
    log.info(
      { engine_id: engineId, kv_role: role, kv_load_failure_policy: failurePolicy },
      'NIXL connector',
    );
    // Not a log record: scripts and tests read the side channel's address from stderr.
    console.error(
      `ringserve: NIXL side channel of engine ${engineId} on ${nixlConfig.sideChannelHost}:${nixl.port}`,
    );
  }
  log.info(
    { vllm_layout: layout.name, series: layout.series, source: layout.source, model: config.model },
    'vLLM message layout',
  );
  const dp = args.dp;
  const mode = dpModeOf(dp.size, sim.model.routingLayers);
  if (mode !== 'single') {
    log.info(
      { dp_rank: dp.rank, dp_size: dp.size, dp_sync_interval: dp.syncInterval, mode },
      mode === 'waves'
        ? 'DP rank of a MoE model: lockstep waves over the DP group'
        : 'DP rank of a dense model: runs independently (no group, no waves)',
    );
  }
  // Formed during the handshake (afterInit), as vLLM forms its DP group while building the engine.
  const joined: { group: DpGroup | null } = { group: null };
  const sockets = await dialFrontend(
    args.host,
    args.port,
    layout,
    registrationOf(sim, layout, mode, dp),
    INIT_TIMEOUT_MS,
    {
      rank: dp.rank,
      parallelConfigHash:
        mode === 'waves'
          ? parallelConfigHash({
              model: modelKey(sim.model),
              size: dp.size,
              syncInterval: dp.syncInterval,
              layout: layout.name,
            })
          : null,
      afterInit:
        mode !== 'waves'
          ? undefined
          : async (init) => {
              joined.group = await openDpGroup({
                ...dpGroupAddress(init.parallelConfig ?? null, dp),
                rank: dp.rank,
                size: dp.size,
                syncInterval: dp.syncInterval,
                log,
              });
            },
    },
  ).catch((error: unknown) => {
    joined.group?.close();
    throw error;
  });
  log.info(
    { input: sockets.inputAddress, output: sockets.outputAddress },
    'registered with the frontend',
  );
  // Not a log record: scripts and tests wait for this line on stderr.
  console.error(
    `ringserve: vLLM engine ready (${config.model}, layout ${layout.name}) for ${sockets.inputAddress}`,
  );
  // A dummy step (an idle rank in a wave) is an empty forward: the preset's fixed step cost.
  const dummyStepMs = config.maxSpeed ? 0 : sim.preset.stepTime.baseMs / config.speedup;
  engine = new VllmHeadlessEngine({
    engine: sim,
    layout,
    sockets,
    wide: { routedExperts: args.returnRoutedExperts, samplingMasks: args.returnSamplingMask },
    rank: dp.rank,
    log,
    nixl,
    dp: joined.group === null ? null : { group: joined.group, dummyStepMs },
  });
  const outcome = await engine.run();
  nixl?.close();
  if (outcome === 'frontend-gone') log.warn('the frontend is gone: exiting');
  else if (outcome === 'fatal') log.error('fatal error: sent ENGINE_CORE_DEAD, exiting');
  else log.info('stopped');
  log.flush();
  return outcome === 'fatal' ? ExitCode.Failure : ExitCode.Ok;
}

/**
 * A DP rank's NIXL side, as vLLM's run_engine_core and NixlConnector make it: `_dp<rank>` appended
 * to the engine id under data parallelism (size > 1 or rank > 0), the side channel's port offset by
 * the rank (VLLM_NIXL_SIDE_CHANNEL_PORT + the DP index; 0, any free port, stays 0).
 */
export function nixlOfRank(c: NixlConfig, dp: DpArgs): NixlConfig {
  if (dp.size <= 1 && dp.rank === 0) return c;
  const port = c.sideChannelPort === 0 ? 0 : c.sideChannelPort + dp.rank;
  if (port > 65535) {
    throw new RS_ERR_CONFIG_INVALID(
      '--kv-transfer-config',
      `side channel port ${c.sideChannelPort} + DP rank ${dp.rank} is past 65535`,
    );
  }
  return { ...c, engineId: `${c.engineId}_dp${dp.rank}`, sideChannelPort: port };
}

/**
 * Where a MoE rank's DP group forms: the init message's parallel_config (vLLM's frontend sends the
 * DP master address for a MoE model with DP > 1; without it each vLLM rank would pick ports of its
 * own and never meet), at the port vLLM pops from it (dpGroupPort).
 */
export function dpGroupAddress(
  pc: DpGroupConfig | null,
  dp: DpArgs,
): { host: string; port: number } {
  if (pc === null) {
    throw new RS_ERR_VLLM_HANDSHAKE(
      `the init message has no DP master address (parallel_config has no data_parallel_master_port), ` +
        `but DP rank ${dp.rank} of ${dp.size} of a MoE model must join its DP group there: the ` +
        `frontend must send data_parallel_master_ip, data_parallel_master_port, ` +
        `_data_parallel_master_port_list and data_parallel_size, as vLLM's does for MoE DP`,
    );
  }
  if (pc.size !== 0 && pc.size !== dp.size) {
    throw new RS_ERR_VLLM_HANDSHAKE(
      `the init message's data_parallel_size ${pc.size} differs from --data-parallel-size ${dp.size}`,
    );
  }
  const port = dpGroupPort(pc);
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new RS_ERR_VLLM_HANDSHAKE(`the init message's DP master port ${port} is not a TCP port`);
  }
  return { host: pc.masterIp, port };
}

/**
 * The simulator's registration: every key the layout's EngineCoreReadyResponse has, with the
 * figures of a single-GPU engine (no tensor/pipeline parallelism, no LoRA yet) and the series'
 * release as vllm_version, tagged so a reader of logs can tell it is not vLLM. A MoE DP rank
 * registers its DP size and rank; a dense one, as vLLM's `reconfigure_for_independent_dp_rank`
 * leaves it, data_parallel_size 1 and data_parallel_rank 0 (its identity keeps the rank).
 */
function registrationOf(
  sim: SimEngine,
  layout: VllmLayout,
  mode: DpMode,
  dp: DpArgs,
): RegistrationValues {
  const c = sim.config;
  return {
    maxModelLen: c.maxModelLen,
    numGpuBlocks: c.numGpuBlocks,
    blockSize: c.blockSize,
    dpStatsAddress: null,
    dtype: 'bfloat16',
    vllmVersion: `${layout.release}+ringserve`,
    worldSize: 1,
    dataParallelSize: mode === 'waves' ? dp.size : 1,
    dataParallelRank: mode === 'waves' ? dp.rank : 0,
    maxNumSeqs: c.maxNumSeqs,
    maxNumBatchedTokens: c.maxNumBatchedTokens,
    supportsLora: false,
    maxLoras: 0,
    kvCacheSizeTokens: c.numGpuBlocks * c.blockSize,
    instanceId: randomUUID(),
  };
}
