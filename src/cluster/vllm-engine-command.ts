import { randomUUID } from 'node:crypto';
import { parseArgs } from '../cli-args.js';
import { CONFIG_FIELDS, type ConfigField, describeRange, type RingserveConfig } from '../config.js';
import { dialFrontend } from '../engine/vllm/headless/dial.js';
import { VllmHeadlessEngine } from '../engine/vllm/headless/engine.js';
import { type NixlConfig, parseKvTransferConfig } from '../engine/vllm/headless/nixl-config.js';
import { NixlConnector } from '../engine/vllm/headless/nixl-connector.js';
import {
  getVllmLayout,
  NEWEST_VLLM_LAYOUT,
  type RegistrationValues,
  VLLM_VERSION_NAMES,
  type VllmLayout,
} from '../engine/vllm/index.js';
import { ExitCode, RS_ERR_CONFIG_INVALID } from '../errors.js';
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
 */

interface EngineFlag {
  readonly flag: string;
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

export interface EngineCommandArgs {
  host: string;
  port: number;
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
    const row = ENGINE_FLAGS.find((f) => f.flag === name);
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
      if (value === undefined) throw new RS_ERR_CONFIG_INVALID(row.flag, 'expects a value');
      own.set(row.flag, value);
    }
  }
  if (own.get('--vllm-protocol') !== true) {
    throw new RS_ERR_CONFIG_INVALID(
      '--vllm-protocol',
      'is required: the engine speaks only the vLLM protocol',
    );
  }
  const port = Number(own.get('--data-parallel-rpc-port') ?? 29550);
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new RS_ERR_CONFIG_INVALID(
      '--data-parallel-rpc-port',
      `must be an integer in [1, 65535], got ${String(own.get('--data-parallel-rpc-port'))}`,
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
    layout,
    returnRoutedExperts: own.get('--enable-return-routed-experts') === true,
    returnSamplingMask,
    nixl: typeof kvConfig === 'string' ? parseKvTransferConfig(kvConfig) : null,
    config: parseArgs(rest, {}),
  };
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
  const nixlConfig = args.nixl;
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
  const sockets = await dialFrontend(args.host, args.port, layout, registrationOf(sim, layout));
  log.info(
    { input: sockets.inputAddress, output: sockets.outputAddress },
    'registered with the frontend',
  );
  // Not a log record: scripts and tests wait for this line on stderr.
  console.error(
    `ringserve: vLLM engine ready (${config.model}, layout ${layout.name}) for ${sockets.inputAddress}`,
  );
  engine = new VllmHeadlessEngine({
    engine: sim,
    layout,
    sockets,
    wide: { routedExperts: args.returnRoutedExperts, samplingMasks: args.returnSamplingMask },
    rank: 0,
    log,
    nixl,
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
 * The simulator's registration: every key the layout's EngineCoreReadyResponse has, with the
 * figures of a single-GPU engine (no parallelism, no LoRA yet) and the series' release as
 * vllm_version, tagged so a reader of logs can tell it is not vLLM.
 */
function registrationOf(sim: SimEngine, layout: VllmLayout): RegistrationValues {
  const c = sim.config;
  return {
    maxModelLen: c.maxModelLen,
    numGpuBlocks: c.numGpuBlocks,
    blockSize: c.blockSize,
    dpStatsAddress: null,
    dtype: 'bfloat16',
    vllmVersion: `${layout.release}+ringserve`,
    worldSize: 1,
    dataParallelSize: 1,
    dataParallelRank: 0,
    maxNumSeqs: c.maxNumSeqs,
    maxNumBatchedTokens: c.maxNumBatchedTokens,
    supportsLora: false,
    maxLoras: 0,
    kvCacheSizeTokens: c.numGpuBlocks * c.blockSize,
    instanceId: randomUUID(),
  };
}
