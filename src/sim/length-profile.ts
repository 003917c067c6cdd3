import { RS_ERR_CONFIG_INVALID } from '../errors.js';
import { LENGTH_PROFILE_NAMES, type LengthProfileName } from '../wire/engine-defaults.js';
import { combine, unitFloatOpen } from '../wire/hash.js';

/**
 * How long simulated responses are. The model pushes EOS to the top of the distribution once a
 * request reaches its target length, drawn here from a log-normal (response lengths of sampled
 * LLM outputs are right-skewed; a log-normal is the usual fit), deterministic per request seed.
 */
export interface LengthProfile {
  name: string;
  /** Median response length in tokens; the mean is median * exp(sigma^2 / 2). */
  medianTokens: number;
  /** Log-space standard deviation. */
  sigma: number;
  minTokens: number;
  maxTokens: number;
}

/** RL rollouts of reasoning models: mean 12.5k tokens (median 10.4k * e^(0.6^2/2) = 12.5k). */
const RL: LengthProfile = {
  name: 'rl',
  medianTokens: 10_440,
  sigma: 0.6,
  minTokens: 64,
  maxTokens: 1 << 20,
};

/** Chat answers: mean ~350 tokens (median 254 * e^(0.8^2/2) = 350). */
const CHAT: LengthProfile = {
  name: 'chat',
  medianTokens: 254,
  sigma: 0.8,
  minTokens: 4,
  maxTokens: 16_384,
};

/** One profile per name of LENGTH_PROFILE_NAMES (the configuration offers those names). */
const PROFILES: Readonly<Record<LengthProfileName, LengthProfile>> = { rl: RL, chat: CHAT };

export { LENGTH_PROFILE_NAMES };

/** The profile of that name; an unknown name is a config error naming `--length-profile`. */
export function getLengthProfile(name: string): LengthProfile {
  const profile = Object.hasOwn(PROFILES, name) ? PROFILES[name as LengthProfileName] : undefined;
  if (profile === undefined) {
    throw new RS_ERR_CONFIG_INVALID(
      '--length-profile',
      `unknown length profile "${name}"; one of ${LENGTH_PROFILE_NAMES.join(', ')}`,
    );
  }
  return profile;
}

export function validateLengthProfile(p: LengthProfile): LengthProfile {
  const ok =
    Number.isFinite(p.medianTokens) &&
    p.medianTokens >= 1 &&
    Number.isFinite(p.sigma) &&
    p.sigma >= 0 &&
    Number.isInteger(p.minTokens) &&
    p.minTokens >= 1 &&
    Number.isInteger(p.maxTokens) &&
    p.maxTokens >= p.minTokens;
  if (!ok) {
    throw new RS_ERR_CONFIG_INVALID(
      '--length-profile',
      `profile "${p.name}" needs medianTokens >= 1, sigma >= 0, 1 <= minTokens <= maxTokens`,
    );
  }
  return p;
}

/** The target response length for a request, from a 32-bit key of its seed (and prompt). */
export function targetLength(profile: LengthProfile, key: number): number {
  // Box-Muller with two independent uniforms derived from the key.
  const u1 = unitFloatOpen(combine(key, 0x4c454e31));
  const u2 = unitFloatOpen(combine(key, 0x4c454e32));
  const z = Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
  const length = Math.round(profile.medianTokens * Math.exp(profile.sigma * z));
  return Math.min(profile.maxTokens, Math.max(profile.minTokens, length));
}
