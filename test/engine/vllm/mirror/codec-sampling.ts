/**
 * SamplingParams: a msgspec Struct with omit_defaults, so a map of the keys not at their default
 * (VE §4, vllm/sampling_params.py:198-352 at 52a31cc; VH §7 for extra_args). msgspec checks each
 * key's type while decoding and then runs `__post_init__`, whose `_verify_args` refuses values out
 * of range (SP:428-584); the checks below are the ones a frontend is likely to trip.
 */
import { f64 } from './msgpack.js';
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

export interface SamplingParams {
  n?: number;
  max_tokens?: number | null;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  seed?: number | null;
  logprobs?: number | null;
  prompt_logprobs?: number | null;
  stop_token_ids?: number[] | null;
  ignore_eos?: boolean;
  min_tokens?: number;
  routed_experts_prompt_start?: number;
  _eos_token_id?: number | null;
  _all_stop_token_ids?: number[];
  extra_args?: Record<string, unknown> | null;
  [key: string]: unknown;
}

/** vLLM's defaults for the keys the mirror engine reads. */
export const SAMPLING_DEFAULTS = {
  n: 1,
  max_tokens: 16,
  temperature: 1,
  top_p: 1,
  top_k: 0,
  min_tokens: 0,
  ignore_eos: false,
  routed_experts_prompt_start: 0,
} as const;

type Check = (v: unknown, where: string) => unknown;

const intList = arrayOf(int);

const KEY_TYPES: Readonly<Record<string, Check>> = {
  n: int,
  top_k: int,
  min_tokens: int,
  routed_experts_prompt_start: int,
  output_kind: int,
  seed: nullable(int),
  max_tokens: nullable(int),
  logprobs: nullable(int),
  prompt_logprobs: nullable(int),
  truncate_prompt_tokens: nullable(int),
  prompt_logprob_start: nullable(int),
  _eos_token_id: nullable(int),
  temperature: float,
  top_p: float,
  min_p: float,
  presence_penalty: float,
  frequency_penalty: float,
  repetition_penalty: float,
  ignore_eos: bool,
  detokenize: bool,
  skip_special_tokens: bool,
  spaces_between_special_tokens: bool,
  include_stop_str_in_output: bool,
  stop_token_ids: nullable(intList),
  _all_stop_token_ids: intList,
  allowed_token_ids: nullable(intList),
  logprob_token_ids: nullable(intList),
  prompt_logprob_token_ids: nullable(intList),
  bad_words: nullable(arrayOf(str)),
  stop: nullable((v, w) => (typeof v === 'string' ? v : arrayOf(str)(v, w))),
  extra_args: nullable(plainMap),
  structured_outputs: nullable(plainMap),
  logit_bias: nullable(plainMap),
};

const FLOAT_KEYS = new Set(
  Object.entries(KEY_TYPES)
    .filter(([, check]) => check === float)
    .map(([k]) => k),
);

/** Floats go out as float64 even when integral (temperature 1.0), as Python sends them. */
export function encodeSamplingParams(p: SamplingParams): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(p)) {
    if (v === undefined) continue;
    out[k] = FLOAT_KEYS.has(k) && typeof v === 'number' ? f64(v) : v;
  }
  return out;
}

function verify(p: SamplingParams, where: string): void {
  const bad = (key: string, why: string): never => {
    throw new MirrorDecodeError(`${where}.${key}`, `${JSON.stringify(p[key])}: ${why}`);
  };
  if (p.n !== undefined && p.n < 1) bad('n', 'must be at least 1');
  if (p.temperature !== undefined && p.temperature < 0) bad('temperature', 'must be >= 0');
  if (p.top_p !== undefined && !(p.top_p > 0 && p.top_p <= 1)) bad('top_p', 'must be in (0, 1]');
  if (p.top_k !== undefined && p.top_k < -1) bad('top_k', 'must be -1 (off), 0 (off) or > 0');
  if (typeof p.max_tokens === 'number' && p.max_tokens < 1) bad('max_tokens', 'must be >= 1');
  if (p.min_tokens !== undefined && p.min_tokens < 0) bad('min_tokens', 'must be >= 0');
  const max = p.max_tokens ?? SAMPLING_DEFAULTS.max_tokens;
  if (p.min_tokens !== undefined && p.min_tokens > max) bad('min_tokens', 'must be <= max_tokens');
  if (typeof p.logprobs === 'number' && p.logprobs < -1) bad('logprobs', 'must be >= -1');
}

export function decodeSamplingParams(v: unknown, where: string): SamplingParams {
  const m = map(v, where);
  const out: SamplingParams = {};
  for (const [k, x] of Object.entries(m)) {
    const check = KEY_TYPES[k];
    out[k] = check === undefined ? plain(x) : check(x, `${where}.${k}`);
  }
  verify(out, where);
  return out;
}
