import { RS_ERR_CONFIG_INVALID } from '../../src/errors.js';
import { ARM_NAMES, ARMS, type ArmDef, armByName } from './arms.js';

/**
 * Profiles and flags of `npm run bench` (= `ringserve-bench`). A profile fixes the load and the
 * engine's time compression; flags override single figures. See docs/performance.md, "The rollout benchmark".
 */
export interface Profile {
  name: string;
  /** Concurrent requests (closed loop). */
  concurrency: number;
  promptTokens: number;
  /** Mean response length; lengths are log-normal with `sigma`, exact thanks to ignore_eos. */
  meanTokens: number;
  sigma: number;
  minTokens: number;
  maxTokens: number;
  /** Measured seconds per arm (cluster start, warm-up and stop come on top). */
  armSeconds: number;
  /** Seconds of load before the measured window (the closed loop's start, JIT warm-up). */
  warmupSeconds: number;
  model: string;
  /** Engine time compression (`--speedup`), or null for `--max-speed`. */
  speedup: number | null;
  /** Extra `ringserve serve` flags every arm gets. */
  clusterFlags: readonly string[];
  /** Response bodies kept per arm for the client-parse measurement. */
  sampleBodies: number;
}

// Prompt ids stay below every preset's special ids (tiny: 998; the others: ~151k).
const PROMPT_ID_CEILING_MARGIN = 8;

/**
 * quick: 64 x ~4k tokens, 40 s per arm, about 4 minutes for five arms.
 * rl: the reference's load (130 x ~12.5k tokens), 200 s per arm, about 18 minutes.
 * smoke: a few seconds per arm on the tiny preset, for the benchmark's own test.
 *
 * Time compression: the glm-4.5-air preset models the reference node (~5.5k tok/s at 130 x 12.5k).
 * In real time no 4k-token request would finish within an arm, so the engine runs SPEEDUP times
 * faster: every arm is offered the same ~33k tok/s (64 x 4k) or ~40k tok/s (130 x 12.5k). That is
 * more than the per-token-object tier absorbs with masks on this machine (~12-15k tok/s: it falls
 * behind, the engine holds its sequences while its output ring is full), and less than ringserve's tier absorbs, so
 * the arms are compared under one identical offered load, as the reference compared frontends in
 * front of one GPU node. The simulated engine sleeps its modelled step times, as a GPU-bound engine
 * leaves the host CPU to the API tier. --max-speed (or a speedup past ~13, where a modelled step
 * is under the loop's 1 ms sleep threshold) makes the engine spin a core of the two the tier needs
 * and measures the machine's total capacity instead; docs/performance.md has both.
 */
const SPEEDUP = 8;

export const PROFILES: Readonly<Record<string, Profile>> = {
  quick: {
    name: 'quick',
    concurrency: 64,
    promptTokens: 512,
    meanTokens: 4096,
    sigma: 0.5,
    minTokens: 256,
    maxTokens: 16_384,
    armSeconds: 40,
    warmupSeconds: 5,
    model: 'glm-4.5-air',
    speedup: SPEEDUP,
    clusterFlags: [],
    sampleBodies: 12,
  },
  rl: {
    name: 'rl',
    concurrency: 130,
    promptTokens: 1024,
    meanTokens: 12_500,
    sigma: 0.5,
    minTokens: 1024,
    maxTokens: 49_152,
    armSeconds: 200,
    warmupSeconds: 15,
    model: 'glm-4.5-air',
    speedup: SPEEDUP,
    clusterFlags: [],
    sampleBodies: 8,
  },
  smoke: {
    name: 'smoke',
    concurrency: 4,
    promptTokens: 16,
    meanTokens: 48,
    sigma: 0.3,
    minTokens: 8,
    maxTokens: 256,
    armSeconds: 3,
    warmupSeconds: 1,
    model: 'tiny',
    speedup: 1,
    clusterFlags: [],
    sampleBodies: 2,
  },
};

export interface RolloutOptions {
  profile: Profile;
  arms: ArmDef[];
  json: boolean;
  html: boolean;
  outDir: string;
  seed: number;
  promptIdCeiling: number;
}

const USAGE =
  'npm run bench -- [--profile quick|rl|smoke] [--arms a,b,...] [--json] [--no-html] ' +
  '[--concurrency N] [--prompt-tokens N] [--mean-tokens N] [--arm-seconds S] ' +
  '[--warmup-seconds S] [--speedup X | --max-speed] [--seed N] [--out-dir DIR]';

export function rolloutUsage(): string {
  return `usage: ${USAGE}\narms: ${ARM_NAMES.join(', ')}`;
}

function positive(flag: string, text: string | undefined, integer: boolean): number {
  const value = Number(text);
  if (
    text === undefined ||
    !Number.isFinite(value) ||
    value <= 0 ||
    (integer && !Number.isInteger(value))
  ) {
    throw new RS_ERR_CONFIG_INVALID(
      flag,
      `must be a ${integer ? 'positive integer' : 'number > 0'}, got ${String(text)}`,
    );
  }
  return value;
}

function parseArms(text: string | undefined): ArmDef[] {
  const names = (text ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (names.length === 0)
    throw new RS_ERR_CONFIG_INVALID('--arms', `expects a list of ${ARM_NAMES.join(', ')}`);
  return names.map((name) => {
    const arm = armByName(name);
    if (arm === undefined)
      throw new RS_ERR_CONFIG_INVALID(
        '--arms',
        `unknown arm "${name}"; one of ${ARM_NAMES.join(', ')}`,
      );
    return arm;
  });
}

/** Flags that override one figure of the profile: [field, integer only, zero allowed]. */
const PROFILE_FLAGS: Readonly<Record<string, readonly [keyof Profile, boolean, boolean]>> = {
  '--concurrency': ['concurrency', true, false],
  '--prompt-tokens': ['promptTokens', true, false],
  '--mean-tokens': ['meanTokens', true, false],
  '--arm-seconds': ['armSeconds', false, false],
  '--warmup-seconds': ['warmupSeconds', false, true],
  '--speedup': ['speedup', false, false],
};

function profileByName(name: string | undefined): Profile {
  const p = PROFILES[name ?? ''];
  if (p === undefined) {
    const known = Object.keys(PROFILES).join(', ');
    throw new RS_ERR_CONFIG_INVALID('--profile', `unknown profile "${name}"; one of ${known}`);
  }
  return p;
}

/** The profile with its overrides; a new mean length scales the length bounds with it. */
function withOverrides(profile: Profile, overrides: Partial<Profile>): Profile {
  const merged: Profile = { ...profile, ...overrides };
  const ratio = merged.meanTokens / profile.meanTokens;
  merged.minTokens = Math.max(1, Math.round(profile.minTokens * ratio));
  merged.maxTokens = Math.max(merged.minTokens, Math.round(profile.maxTokens * ratio));
  return merged;
}

/** Flags to options; an unknown flag or a bad value is RS_ERR_CONFIG_INVALID naming the flag. */
export function parseRolloutArgs(
  argv: readonly string[],
  promptIdCeiling: (model: string) => number,
): RolloutOptions {
  let profile = PROFILES.quick as Profile;
  const overrides: Record<string, number | null> = {};
  const opts = { arms: [...ARMS], json: false, html: true, outDir: 'bench/results', seed: 1 };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i] as string;
    const numeric = PROFILE_FLAGS[flag];
    if (numeric !== undefined) {
      const [field, integer, zeroOk] = numeric;
      const text = argv[++i];
      overrides[field] = zeroOk && text === '0' ? 0 : positive(flag, text, integer);
    } else if (flag === '--profile') profile = profileByName(argv[++i]);
    else if (flag === '--arms') opts.arms = parseArms(argv[++i]);
    else if (flag === '--json') opts.json = true;
    else if (flag === '--no-html') opts.html = false;
    else if (flag === '--max-speed') overrides.speedup = null;
    else if (flag === '--seed') opts.seed = positive(flag, argv[++i], true);
    else if (flag === '--out-dir' && (argv[i + 1] ?? '') !== '') opts.outDir = argv[++i] as string;
    else throw new RS_ERR_CONFIG_INVALID(flag, `unknown flag or missing value\n${rolloutUsage()}`);
  }
  const merged = withOverrides(profile, overrides as Partial<Profile>);
  return {
    ...opts,
    profile: merged,
    promptIdCeiling: promptIdCeiling(merged.model) - PROMPT_ID_CEILING_MARGIN,
  };
}
