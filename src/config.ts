import { existsSync } from 'node:fs';
import { isIPv4 } from 'node:net';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { RS_ERR_CONFIG_INVALID } from './errors.js';
import {
  REASONING_PARSERS,
  type ReasoningParserName,
  TOOL_PARSERS,
  type ToolParserName,
} from './wire/chat-formats.js';
import {
  ENGINE_DEFAULTS,
  ENGINE_LIMITS,
  LENGTH_PROFILE_NAMES,
  type LengthProfileName,
  MAX_SLOTS_PER_SERVER,
  SCHEDULING_POLICIES,
  type SchedulingPolicy,
} from './wire/engine-defaults.js';
import { defaultNumGpuBlocks, getModelCard, isPresetName, MODEL_NAMES } from './wire/model-card.js';

/** pino's levels, for --log-level (the server's and the router's). */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/**
 * ringserve's one configuration object. Every field is a row of CONFIG_FIELDS: flag (named like
 * vLLM's), default, range or choices, one line of help. The CLI (cli-args.ts) and programmatic
 * callers (tests, bench) go through the same checks in buildConfig, and the result is frozen.
 */
export interface RingserveConfig {
  readonly host: string;
  readonly port: number;
  readonly apiServerCount: number;
  readonly listener: 'primary' | 'reuseport';
  readonly model: string;
  readonly servedModelName: string;
  readonly maxModelLen: number;
  readonly maxNumSeqs: number;
  readonly maxNumBatchedTokens: number;
  readonly numGpuBlocks: number;
  readonly blockSize: number;
  readonly seed: number;
  readonly speedup: number;
  readonly maxSpeed: boolean;
  readonly schedulingPolicy: SchedulingPolicy;
  readonly outputProcessing: 'workers' | 'inline';
  readonly generateFormat: 'packed' | 'legacy';
  readonly returnSamplingMask: boolean;
  readonly returnRoutedExperts: boolean;
  readonly lengthProfile: LengthProfileName;
  readonly apiKey: string | null;
  readonly adminApiKey: string | null;
  readonly logLevel: (typeof LOG_LEVELS)[number];
  readonly maxQueueLen: number;
  readonly bodyLimitMb: number;
  readonly drainTimeoutS: number;
  readonly drainGraceS: number;
  readonly packerThreads: number;
  readonly inlinePackValues: number;
  readonly workerNice: number;
  readonly workerSchedPolicy: 'other' | 'batch' | 'idle';
  readonly responsePoolMb: number;
  readonly mallocTrimIntervalS: number;
  readonly mallocArenaMax: number;
  readonly allowUnauthenticated: boolean;
  readonly failureRate: number;
  readonly failureKinds: string;
  readonly allowFailureHeader: boolean;
  readonly role: 'both' | 'prefill' | 'decode';
  readonly kvTransferTimeoutS: number;
  readonly kvLoadFailureRate: number;
  readonly kvTransferBandwidthGbs: number;
  readonly kvOffloadGib: number;
  readonly engine: 'sim' | 'vllm';
  readonly dataParallelSize: number;
  readonly dataParallelAddress: string;
  readonly dataParallelRpcPort: number;
  readonly vllmVersion: string;
  readonly vllmPingTimeoutS: number;
  readonly enableReturnSamplingMask: boolean;
  readonly tokenizer: string | null;
  readonly maxUnreadBytes: number;
  readonly requestTimeout: number;
  readonly updateWeightsTimeoutS: number;
  readonly reasoningParser: 'none' | ReasoningParserName;
  readonly enableAutoToolChoice: boolean;
  readonly toolCallParser: 'none' | ToolParserName;
  readonly simMode: 'random' | 'echo';
  readonly simToolCallShare: number;
}

/** What a caller may set; a null or absent field takes its default. */
export type ConfigInput = { -readonly [K in keyof RingserveConfig]?: RingserveConfig[K] | null };

export type ConfigFieldKind = 'int' | 'number' | 'bool' | 'enum' | 'string';

export interface ConfigField {
  readonly key: keyof RingserveConfig;
  readonly flag: string;
  readonly kind: ConfigFieldKind;
  /** null: derived from other fields (see `derived`), or absent for optional strings. */
  readonly default: number | string | boolean | null;
  readonly min?: number;
  readonly max?: number;
  /** The lower bound excludes its value (e.g. speedup > 0). */
  readonly minExclusive?: boolean;
  readonly choices?: readonly (string | number)[];
  /** Environment variable read when the flag is not given (the flag wins). */
  readonly env?: string;
  /** How a null default is worked out, for --help. */
  readonly derived?: string;
  /** The allowed values in words, where the kind's own (`a non-empty string`) says too little. */
  readonly accepts?: string;
  readonly help: string;
}

// The engine's defaults, and its bounds where a flag offers all it runs with, come from
// src/wire/engine-defaults.ts, as the simulator's do. A flag offers less where the API tier needs
// it. --max-model-len stops at MAX_MODEL_LEN_CAP: the token-count histograms' 1-2-5 buckets up to it
// fit their slots in the region (test/obs/buckets.test.ts), and a request ring, sized to hold four
// whole prompts (layout-params.ts), stays at its minimum size.
const MAX_MODEL_LEN_CAP = 262_144;
const D = ENGINE_DEFAULTS;
const L = ENGINE_LIMITS;

/** The failures --failure-kinds may name (src/server/main/http/failure-injection.ts injects them). */
export const FAILURE_KINDS = ['rate_limit', 'unavailable', 'context_length', 'abort'] as const;
export type FailureKind = (typeof FAILURE_KINDS)[number];

// biome-ignore format: one row per field reads as the table it is
export const CONFIG_FIELDS: readonly ConfigField[] = [
  { key: 'host', flag: '--host', kind: 'string', default: '127.0.0.1', help: 'address to listen on; to serve on a network: --host 0.0.0.0 --api-key <key> (or --allow-unauthenticated)' },
  { key: 'port', flag: '--port', kind: 'int', default: 8000, min: 0, max: 65535, help: 'TCP port (0 = any free port)' },
  { key: 'apiServerCount', flag: '--api-server-count', kind: 'int', default: 1, min: 1, max: 32, help: 'API-server processes sharing the port' },
  { key: 'listener', flag: '--listener', kind: 'enum', default: null, choices: ['primary', 'reuseport'], derived: 'reuseport where Node has it (>= 22.12, 23.1 on the 23 line, Linux), else primary', help: 'primary: the primary accepts and hands each connection to an API server (Node 20+); reuseport: each API server listens on the port itself with SO_REUSEPORT, the kernel spreads connections (Node >= 22.12)' },
  { key: 'model', flag: '--model', kind: 'string', default: 'qwen3-30b-a3b', accepts: `one of ${MODEL_NAMES.join(', ')}, or a local Hugging Face model directory`, help: 'model the simulated engine imitates: a preset, or a local Hugging Face model directory (config.json and the tokenizer files) whose shape it takes' },
  { key: 'servedModelName', flag: '--served-model-name', kind: 'string', default: null, derived: 'sim-<model> (a directory: the --model path)', help: 'model name clients must send and /v1/models lists' },
  { key: 'maxModelLen', flag: '--max-model-len', kind: 'int', default: null, min: 16, max: MAX_MODEL_LEN_CAP, derived: "the model's", help: 'longest sequence (prompt + completion) in tokens' },
  { key: 'maxNumSeqs', flag: '--max-num-seqs', kind: 'int', default: D.maxNumSeqs, min: L.maxNumSeqs.min, max: 4096, help: 'most sequences running in one engine step' },
  { key: 'maxNumBatchedTokens', flag: '--max-num-batched-tokens', kind: 'int', default: D.maxNumBatchedTokens, min: L.maxNumBatchedTokens.min, max: 1_048_576, help: 'token budget of one engine step (decode first, then prefill chunks)' },
  { key: 'numGpuBlocks', flag: '--num-gpu-blocks', kind: 'int', default: null, min: L.numGpuBlocks.min, max: 16_777_216, derived: "the model's reference deployment", help: 'KV-cache blocks in the simulated pool' },
  { key: 'blockSize', flag: '--block-size', kind: 'int', default: D.blockSize, choices: [1, 8, 16, 32, 64, 128], help: 'tokens per KV-cache block' },
  { key: 'seed', flag: '--seed', kind: 'int', default: D.seed, min: L.seed.min, max: L.seed.max, help: 'model seed: same seed, same outputs' },
  { key: 'speedup', flag: '--speedup', kind: 'number', default: D.speedup, min: 0, minExclusive: true, max: 1_000_000, help: 'divide modelled step times by this' },
  { key: 'maxSpeed', flag: '--max-speed', kind: 'bool', default: D.maxSpeed, help: 'do not sleep for modelled step times at all' },
  { key: 'schedulingPolicy', flag: '--scheduling-policy', kind: 'enum', default: D.policy, choices: SCHEDULING_POLICIES, help: 'order of waiting requests (priority uses the request field)' },
  { key: 'outputProcessing', flag: '--output-processing', kind: 'enum', default: 'workers', choices: ['workers', 'inline'], help: 'workers: packed off-thread; inline: per-token objects (baseline)' },
  { key: 'generateFormat', flag: '--generate-format', kind: 'enum', default: 'packed', choices: ['packed', 'legacy'], help: 'default response form when a request does not say "packed"' },
  { key: 'returnSamplingMask', flag: '--return-sampling-mask', kind: 'bool', default: false, help: 'return sampling masks unless a request says otherwise' },
  { key: 'returnRoutedExperts', flag: '--return-routed-experts', kind: 'bool', default: false, help: 'return MoE routing unless a request says otherwise' },
  { key: 'lengthProfile', flag: '--length-profile', kind: 'enum', default: D.lengthProfile, choices: LENGTH_PROFILE_NAMES, help: 'response lengths: rl (~12.5k tokens) or chat (short)' },
  { key: 'apiKey', flag: '--api-key', kind: 'string', default: null, env: 'VLLM_API_KEY', help: 'require "Authorization: Bearer <key>" on API routes' },
  { key: 'adminApiKey', flag: '--admin-api-key', kind: 'string', default: null, env: 'RINGSERVE_ADMIN_API_KEY', help: 'require this key on control routes (pause, update_weights, ...)' },
  { key: 'logLevel', flag: '--log-level', kind: 'enum', default: 'info', choices: LOG_LEVELS, help: 'pino log level' },
  { key: 'maxQueueLen', flag: '--max-queue-len', kind: 'int', default: 4096, min: 1, max: MAX_SLOTS_PER_SERVER, help: 'sequences in flight per API server (one per choice: n per prompt; running or waiting, until the engine confirms their end) before answering 429 with Retry-After (the default is far above 300 RL clients)' },
  { key: 'bodyLimitMb', flag: '--body-limit-mb', kind: 'number', default: 32, min: 0, minExclusive: true, max: 1024, help: 'largest request body in MiB (413 above; a 128k-token prompt is under 1 MiB of JSON)' },
  { key: 'drainTimeoutS', flag: '--drain-timeout-s', kind: 'number', default: 30, min: 0, max: 3600, help: 'on SIGTERM, wait this long for in-flight requests, then abort them' },
  { key: 'drainGraceS', flag: '--drain-grace-s', kind: 'number', default: 3, min: 0, max: 600, help: 'on SIGTERM, the listener answers new connections 503 (Retry-After) from the start of the drain until this long after it, so a load balancer that has not yet noticed gets an answer, not a reset (0 = close it at once)' },
  { key: 'packerThreads', flag: '--packer-threads', kind: 'int', default: null, min: 1, max: 64, derived: 'cores / api-server-count, between 1 and 4', help: 'packer worker threads per API server' },
  { key: 'inlinePackValues', flag: '--inline-pack-values', kind: 'int', default: 256, min: 0, max: 65_536, help: 'an answer of at most this many numbers (4 a token, plus top candidates, mask and routing ids, prompt logprobs; 16 tokens count 64) is encoded on the main thread, not handed to a packer: cheaper than the hand-off (0 = every answer to a packer)' },
  { key: 'workerNice', flag: '--worker-nice', kind: 'int', default: 10, min: 0, max: 19, env: 'RINGSERVE_WORKER_NICE', help: 'nice of the output worker and packer threads above the main thread (0 = same priority)' },
  { key: 'workerSchedPolicy', flag: '--worker-sched-policy', kind: 'enum', default: 'other', choices: ['other', 'batch', 'idle'], env: 'RINGSERVE_WORKER_SCHED_POLICY', help: 'Linux scheduling policy of the output worker and packer threads' },
  { key: 'responsePoolMb', flag: '--response-pool-mb', kind: 'int', default: 256, min: 0, max: 4096, env: 'RINGSERVE_RESPONSE_POOL_MB', help: 'shared memory the packers write answers into, MiB (0 = a new buffer per answer)' },
  { key: 'mallocTrimIntervalS', flag: '--malloc-trim-interval-s', kind: 'number', default: 30, min: 0, max: 86400, env: 'RINGSERVE_MALLOC_TRIM_INTERVAL_S', help: 'every process gives the C heap\'s free pages back to the kernel this often (glibc malloc_trim, from a thread of its own), so RSS follows what is in use rather than the worst fragmentation seen (0 = never)' },
  { key: 'mallocArenaMax', flag: '--malloc-arena-max', kind: 'int', default: 2, min: 0, max: 1024, env: 'RINGSERVE_MALLOC_ARENA_MAX', help: 'glibc malloc arenas per process, the main one included (MALLOC_ARENA_MAX in the environment of the engine and API servers; the primary restarts itself with it where Node has process.execve, 22.15+): each thread that allocates may otherwise get an arena of its own, up to 8 per core, each holding its own fragmentation; a MALLOC_ARENA_MAX already in the environment wins (0 = glibc\'s own limit)' },
  { key: 'allowUnauthenticated', flag: '--allow-unauthenticated', kind: 'bool', default: false, help: 'allow a non-loopback --host without --api-key (anyone who reaches the port may generate)' },
  { key: 'failureRate', flag: '--failure-rate', kind: 'number', default: 0, min: 0, max: 1, help: 'fraction of inference requests answered with an injected failure (for clients\' own tests)' },
  { key: 'failureKinds', flag: '--failure-kinds', kind: 'string', default: FAILURE_KINDS.join(','), help: 'comma list of injected failures: rate_limit (429), unavailable (503), context_length (400), abort (connection cut mid-answer)' },
  { key: 'allowFailureHeader', flag: '--allow-failure-header', kind: 'bool', default: false, help: 'honour a request header "x-ringserve-fail: <kind>" that forces one injected failure' },
  { key: 'role', flag: '--role', kind: 'enum', default: 'both', choices: ['both', 'prefill', 'decode'], help: 'prefill: every request keeps its KV for a decode instance and answers kv_transfer_params; decode/both: import it when given' },
  { key: 'kvTransferTimeoutS', flag: '--kv-transfer-timeout-s', kind: 'number', default: D.kvTransferTimeoutS, min: L.kvTransferTimeoutS.min, max: L.kvTransferTimeoutS.max, help: 'how long a prefill instance keeps a prompt\'s KV pinned for a decode instance' },
  { key: 'kvLoadFailureRate', flag: '--kv-load-failure-rate', kind: 'number', default: D.kvLoadFailureRate, min: L.kvLoadFailureRate.min, max: L.kvLoadFailureRate.max, help: 'fraction of KV imports that fail (decided by request seed) and are recomputed' },
  { key: 'kvTransferBandwidthGbs', flag: '--kv-transfer-bandwidth-gbs', kind: 'number', default: D.kvTransferBandwidthGbs, min: L.kvTransferBandwidthGbs.min, max: L.kvTransferBandwidthGbs.max, help: 'GB/s of a modelled KV import and of CPU-tier reloads' },
  { key: 'kvOffloadGib', flag: '--kv-offload-gib', kind: 'number', default: D.kvOffloadGib, min: L.kvOffloadGib.min, max: L.kvOffloadGib.max, help: 'CPU tier evicted prefix blocks spill to and reload from, GiB (0 = none)' },
  { key: 'engine', flag: '--engine', kind: 'enum', default: 'sim', choices: ['sim', 'vllm'], help: 'sim: the simulator in-process; vllm: a bridge to a headless vLLM engine that dials in' },
  { key: 'dataParallelSize', flag: '--data-parallel-size', kind: 'int', default: 1, min: 1, max: 256, help: 'data-parallel engine ranks behind this cluster (with --engine vllm: headless vLLM engines dialling the handshake port); 1 with the simulator' },
  { key: 'dataParallelAddress', flag: '--data-parallel-address', kind: 'string', default: '127.0.0.1', help: 'with --engine vllm: address the bridge binds its vLLM sockets on; with --data-parallel-size > 1 and a MoE model also where the ranks meet as a DP group (data_parallel_master_ip: not a wildcard)' },
  { key: 'dataParallelRpcPort', flag: '--data-parallel-rpc-port', kind: 'int', default: 29550, min: 0, max: 65535, help: 'with --engine vllm: handshake port the vLLM engine dials (0 = any free port, logged)' },
  { key: 'vllmVersion', flag: '--vllm-version', kind: 'string', default: 'auto', help: 'with --engine vllm: the vLLM release series whose message layouts to speak (0.22, 0.26, 0.28, 0.29, 0.33); auto: picked from the engine\'s registration, confirmed by its first output' },
  { key: 'vllmPingTimeoutS', flag: '--vllm-ping-timeout-s', kind: 'number', default: 5, min: 0.1, max: 600, help: 'with --engine vllm: a vLLM engine silent this long is dead (in-flight requests fail with 503)' },
  { key: 'enableReturnSamplingMask', flag: '--enable-return-sampling-mask', kind: 'bool', default: false, help: 'with --engine vllm: the engine runs with vLLM\'s --enable-return-sampling-mask (vLLM >= 0.28): requests may ask for masks, and each must sample with temperature > 0 and top_k > 0' },
  { key: 'tokenizer', flag: '--tokenizer', kind: 'string', default: null, help: "a local Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json, generation_config.json) instead of the preset's" },
  { key: 'maxUnreadBytes', flag: '--max-unread-bytes', kind: 'int', default: 64 * 1024 * 1024, min: 65_536, max: 4_294_967_296, help: 'a stream whose client leaves this many bytes unread is aborted and its memory freed (a client that reads, however slowly, leaves a few events unread)' },
  { key: 'updateWeightsTimeoutS', flag: '--update-weights-timeout-s', kind: 'number', default: 10_800, min: 1, max: 604_800, help: 'seconds /update_weights may take before it is answered 503 (a vLLM engine loads or receives the weights meanwhile); longer than any client waits, since a 503 makes the client retry the update (prime-rl waits 720 s; large MoE runs set 7,200 s)' },
  { key: 'requestTimeout', flag: '--request-timeout', kind: 'number', default: 3600, min: 0, max: 604_800, help: 'seconds a generate request may take from arrival before it is answered 504 and aborted in the engine (0 = none; the default is many times a 16k-token rollout under 300 clients); the header x-request-deadline-ms can shorten it' },
  { key: 'reasoningParser', flag: '--reasoning-parser', kind: 'enum', default: null, choices: ['none', ...REASONING_PARSERS], derived: "the model's: qwen3 for qwen3-30b-a3b, glm45 for glm-4.5-air, else none", help: 'split /v1/chat/completions answers into reasoning_content and content, as vLLM\'s parser of that name' },
  { key: 'enableAutoToolChoice', flag: '--enable-auto-tool-choice', kind: 'bool', default: false, help: 'parse tool calls out of chat answers for tool_choice "auto" (as vLLM; needs a --tool-call-parser)' },
  { key: 'toolCallParser', flag: '--tool-call-parser', kind: 'enum', default: null, choices: ['none', ...TOOL_PARSERS], derived: "the model's: hermes for qwen3-30b-a3b, glm45 for glm-4.5-air, else none", help: 'the tool-call format chat answers are parsed in, as vLLM\'s parser of that name' },
  { key: 'simMode', flag: '--sim-mode', kind: 'enum', default: 'random', choices: ['random', 'echo'], help: 'with the simulator: random tokens (chat answers open with the model\'s reasoning span and tool calls, see --sim-tool-call-share), or echo: a chat answer is the last user message' },
  { key: 'simToolCallShare', flag: '--sim-tool-call-share', kind: 'number', default: 0.5, min: 0, max: 1, help: 'with the simulator: share of chat answers to tool_choice "auto" requests offering tools that are tool calls' },
];

const FIELD_BY_KEY: ReadonlyMap<string, ConfigField> = new Map(
  CONFIG_FIELDS.map((f) => [f.key, f]),
);

export function configField(key: keyof RingserveConfig): ConfigField {
  const field = FIELD_BY_KEY.get(key);
  if (field === undefined) throw new RS_ERR_CONFIG_INVALID(key, 'not a configuration field');
  return field;
}

/** The allowed values of a field in words, for error messages and --help. */
export function describeRange(field: ConfigField): string {
  if (field.accepts !== undefined) return field.accepts;
  if (field.choices !== undefined) return `one of ${field.choices.join(', ')}`;
  if (field.kind === 'bool') return 'true or false';
  if (field.kind === 'string') return 'a non-empty string';
  const noun = field.kind === 'int' ? 'an integer' : 'a number';
  const open = field.minExclusive === true ? '(' : '[';
  return `${noun} in ${open}${field.min}, ${field.max}]`;
}

function invalid(field: ConfigField, value: unknown): never {
  const shown = typeof value === 'string' ? `"${value}"` : String(value);
  throw new RS_ERR_CONFIG_INVALID(field.flag, `must be ${describeRange(field)}, got ${shown}`);
}

/** Check one typed value against its row; throws RS_ERR_CONFIG_INVALID naming the flag. */
export function checkFieldValue(field: ConfigField, value: unknown): void {
  switch (field.kind) {
    case 'bool':
      if (typeof value !== 'boolean') invalid(field, value);
      return;
    case 'string':
      if (typeof value !== 'string' || value.length === 0) invalid(field, value);
      return;
    case 'enum':
      if (!field.choices?.includes(value as string)) invalid(field, value);
      return;
    case 'int':
    case 'number':
      checkNumber(field, value);
      return;
  }
}

function checkNumber(field: ConfigField, value: unknown): void {
  if (typeof value !== 'number' || !Number.isFinite(value)) invalid(field, value);
  if (field.kind === 'int' && !Number.isSafeInteger(value)) invalid(field, value);
  if (field.choices !== undefined) {
    if (!field.choices.includes(value)) invalid(field, value);
    return;
  }
  const min = field.min ?? Number.NEGATIVE_INFINITY;
  const max = field.max ?? Number.POSITIVE_INFINITY;
  if (value > max || value < min || (field.minExclusive === true && value === min)) {
    invalid(field, value);
  }
}

/**
 * Validate every given value, fill defaults (derived ones from the model preset), check the
 * fields that constrain each other, and freeze. Unknown keys are errors.
 */
export function buildConfig(input: ConfigInput = {}): RingserveConfig {
  const values: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(input)) {
    const field = FIELD_BY_KEY.get(key);
    if (field === undefined) throw new RS_ERR_CONFIG_INVALID(key, 'unknown configuration field');
    if (value === null || value === undefined) continue;
    checkFieldValue(field, value);
    values[key] = value;
  }
  for (const field of CONFIG_FIELDS) {
    if (values[field.key] === undefined && field.default !== null)
      values[field.key] = field.default;
  }
  const partial = values as Partial<Record<keyof RingserveConfig, unknown>>;
  fillDerived(partial);
  const config = partial as unknown as RingserveConfig;
  checkCrossFields(config);
  return Object.freeze(config);
}

/** The presets' chat formats: what vLLM is run with for the models they imitate. */
const MODEL_CHAT_FORMATS: Readonly<
  Record<string, { reasoning: ReasoningParserName; tools: ToolParserName }>
> = {
  'qwen3-30b-a3b': { reasoning: 'qwen3', tools: 'hermes' },
  'glm-4.5-air': { reasoning: 'glm45', tools: 'glm45' },
};

function fillDerived(values: Partial<Record<keyof RingserveConfig, unknown>>): void {
  const model = values.model as string;
  // A bad --model (neither a preset nor a readable model directory) is reported here, in full.
  const preset = getModelCard(model);
  // vLLM serves a model under its --model argument unless --served-model-name says otherwise.
  values.servedModelName ??= isPresetName(model) ? `sim-${model}` : model;
  values.apiKey ??= null;
  values.adminApiKey ??= null;
  values.tokenizer ??= null;
  // As vLLM's API servers share their port, where Node can listen with SO_REUSEPORT.
  values.listener ??= nodeHasReusePort() ? 'reuseport' : 'primary';
  const formats = MODEL_CHAT_FORMATS[model];
  values.reasoningParser ??= formats?.reasoning ?? 'none';
  values.toolCallParser ??= formats?.tools ?? 'none';
  if (values.maxModelLen === undefined) {
    values.maxModelLen = Math.min(preset.maxModelLen, MAX_MODEL_LEN_CAP);
  }
  if (values.numGpuBlocks === undefined) {
    values.numGpuBlocks = defaultNumGpuBlocks(preset, values.blockSize as number);
  }
  if (values.packerThreads === undefined) {
    const perServer = Math.floor(availableParallelism() / (values.apiServerCount as number));
    values.packerThreads = Math.max(1, Math.min(4, perServer));
  }
}

function checkCrossFields(c: RingserveConfig): void {
  checkExposure(c, 'serving');
  if (c.listener === 'reuseport' && !nodeHasReusePort()) {
    throw new RS_ERR_CONFIG_INVALID(
      '--listener',
      `reuseport needs Node >= 22.12 (on the 23 line >= 23.1) on Linux, whose net.Server listens with SO_REUSEPORT (reusePort); this is Node ${process.versions.node} on ${process.platform}: use --listener primary`,
    );
  }
  parseFailureKinds(c.failureKinds);
  // The simulator is one engine core, rank 0: an X-data-parallel-rank header may name only it.
  if (c.engine !== 'vllm' && c.dataParallelSize > 1) {
    throw new RS_ERR_CONFIG_INVALID(
      '--data-parallel-size',
      `must be 1 with --engine ${c.engine} (the simulator is one engine rank); more ranks need --engine vllm, got ${c.dataParallelSize}`,
    );
  }
  // vLLM refuses these combinations at startup for the same reasons: a step must be able to
  // hold one token per running sequence, and one full-length sequence must fit in the KV cache.
  if (c.enableAutoToolChoice && c.toolCallParser === 'none') {
    throw new RS_ERR_CONFIG_INVALID(
      '--enable-auto-tool-choice',
      `needs a --tool-call-parser (${TOOL_PARSERS.join(', ')}): ${c.model} has none of its own`,
    );
  }
  if (c.maxNumBatchedTokens < c.maxNumSeqs) {
    throw new RS_ERR_CONFIG_INVALID(
      '--max-num-batched-tokens',
      `must be >= --max-num-seqs (${c.maxNumSeqs}), got ${c.maxNumBatchedTokens}`,
    );
  }
  if (c.numGpuBlocks * c.blockSize < c.maxModelLen) {
    throw new RS_ERR_CONFIG_INVALID(
      '--num-gpu-blocks',
      `${c.numGpuBlocks} blocks of ${c.blockSize} tokens cannot hold one sequence of --max-model-len ${c.maxModelLen}`,
    );
  }
  // Checked here, not when an API server loads it: a bad directory is a usage error at startup.
  if (c.tokenizer !== null && !existsSync(join(c.tokenizer, 'tokenizer.json'))) {
    throw new RS_ERR_CONFIG_INVALID('--tokenizer', `${c.tokenizer} has no tokenizer.json`);
  }
  if (
    c.tokenizer === null &&
    !isPresetName(c.model) &&
    !existsSync(join(c.model, 'tokenizer.json'))
  ) {
    throw new RS_ERR_CONFIG_INVALID(
      '--model',
      `${c.model} has no tokenizer.json: give the tokenizer's directory with --tokenizer DIR`,
    );
  }
}

/**
 * Whether this Node can listen with SO_REUSEPORT (`reusePort` in net.Server.listen): added in
 * 22.12.0 and 23.1.0, so 22.12+, 23.1+ and 24+; earlier versions ignore the option. Only Linux is
 * a platform ringserve runs on (its region lives in /dev/shm), and Linux has had SO_REUSEPORT since
 * 3.9. src/cluster/listener.ts's reusePortSupported() is this check for the cluster and the tests
 * (the config layer imports nothing of src/cluster).
 */
export function nodeHasReusePort(
  version: string = process.versions.node,
  platform: NodeJS.Platform = process.platform,
): boolean {
  if (platform !== 'linux') return false;
  const [major = 0, minor = 0] = version.split('.').map(Number);
  return major >= 24 || (major === 23 && minor >= 1) || (major === 22 && minor >= 12);
}

/**
 * A server (or router) on a non-loopback address without a key would let anyone who reaches the
 * port generate, pause the engine or swap its weights: refused unless the operator says so.
 */
export function checkExposure(
  c: { host: string; apiKey: string | null; allowUnauthenticated: boolean },
  doing: 'serving' | 'routing',
): void {
  if (c.apiKey !== null || c.allowUnauthenticated || isLoopbackHost(c.host)) return;
  const bare = doing === 'serving' ? 'serve' : 'route';
  throw new RS_ERR_CONFIG_INVALID(
    '--host',
    `${c.host} is not a loopback address: ${doing} on a network needs --api-key (or --allow-unauthenticated to ${bare} without one)`,
  );
}

/** 127.0.0.0/8, ::1 (also IPv4-mapped) and `localhost`. */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase();
  if (h === 'localhost' || h === '::1' || h === '0:0:0:0:0:0:0:1') return true;
  const v4 = h.startsWith('::ffff:') ? h.slice(7) : h;
  return isIPv4(v4) && v4.startsWith('127.');
}

export function isFailureKind(text: string): text is FailureKind {
  return (FAILURE_KINDS as readonly string[]).includes(text);
}

/** `rate_limit,abort` as its kinds; RS_ERR_CONFIG_INVALID naming --failure-kinds for anything else. */
export function parseFailureKinds(text: string): FailureKind[] {
  const kinds = text.split(',').map((k) => k.trim());
  for (const kind of kinds) {
    if (!isFailureKind(kind)) {
      throw new RS_ERR_CONFIG_INVALID(
        '--failure-kinds',
        `"${kind}" is not one of ${FAILURE_KINDS.join(', ')}`,
      );
    }
  }
  return [...new Set(kinds as FailureKind[])];
}
