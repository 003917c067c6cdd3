import { RS_ERR_VLLM_BAD_FIELD } from '../../errors.js';
import { checkKvParams, readKvParamsBytes } from './kv-params.js';
import type { MsgReader } from './msgpack-reader.js';
import type { MsgWriter } from './msgpack-writer.js';

/**
 * vLLM's SamplingParams as the frontend sends it inside an ADD (docs/vllm-protocol.md): a
 * msgpack map holding only the keys that differ from vLLM's defaults (max_tokens always), checked
 * against vLLM's own ranges (vllm/sampling_params.py `_verify_args`) before a byte is written,
 * because a SamplingParams that fails there kills the engine's input thread without a word.
 */
export interface VllmSamplingParams {
  /** Always sent: vLLM would otherwise fill max_model_len - prompt length. */
  maxTokens: number;
  temperature?: number;
  topP?: number;
  /** 0 or -1: off. */
  topK?: number;
  minP?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  repetitionPenalty?: number;
  seed?: number | null;
  minTokens?: number;
  ignoreEos?: boolean;
  /** The model's EOS: the engine stops on it only when it is sent (`_eos_token_id`). */
  eosTokenId?: number | null;
  stopTokenIds?: ArrayLike<number>;
  /** EOS and stop ids, masked until min_tokens (`_all_stop_token_ids`). */
  allStopTokenIds?: ArrayLike<number>;
  /** Top-k logprob width; 0 = the sampled token's only; null = none. */
  logprobs?: number | null;
  /**
   * Prompt logprobs: k best candidates beside each prompt token after the first (0 = the prompt
   * token's own only; -1 = the whole vocabulary in vLLM); null = none. The same key in every
   * release series (SamplingParams is a map).
   */
  promptLogprobs?: number | null;
  routedExpertsPromptStart?: number;
  /**
   * `extra_args["kv_transfer_params"]`: where vLLM's KV connector reads a request's P/D handle
   * (there is no EngineCoreRequest field for it), as the msgpack bytes of one map, passed through
   * unchanged; null: no extra_args.
   */
  kvTransferParams?: Uint8Array | null;
}

/** Every field present: what the engine side decodes (vLLM's defaults filled in). */
export type ResolvedSamplingParams = Required<VllmSamplingParams>;

export const SAMPLING_DEFAULTS: Omit<ResolvedSamplingParams, 'maxTokens'> = {
  temperature: 1,
  topP: 1,
  topK: 0,
  minP: 0,
  presencePenalty: 0,
  frequencyPenalty: 0,
  repetitionPenalty: 1,
  seed: null,
  minTokens: 0,
  ignoreEos: false,
  eosTokenId: null,
  stopTokenIds: [],
  allStopTokenIds: [],
  logprobs: null,
  promptLogprobs: null,
  routedExpertsPromptStart: 0,
  kvTransferParams: null,
};

function bad(field: string, what: string, value: unknown): never {
  throw new RS_ERR_VLLM_BAD_FIELD(`sampling_params.${field}`, `${what}, got ${String(value)}`);
}

function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v);
}

function isFiniteNumber(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

function checkIds(field: string, ids: ArrayLike<number>): void {
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    if (!isInt(id) || id < 0) bad(`${field}[${i}]`, 'a token id must be an integer >= 0', id);
  }
}

/**
 * Throws RS_ERR_VLLM_BAD_FIELD naming the first field vLLM would refuse (the order of vLLM's
 * checks); `promptLength` bounds routed_experts_prompt_start.
 */
export function checkSamplingParams(p: ResolvedSamplingParams, promptLength: number): void {
  if (!isInt(p.maxTokens) || p.maxTokens < 1)
    bad('max_tokens', 'must be an integer >= 1', p.maxTokens);
  if (!isFiniteNumber(p.temperature) || p.temperature < 0)
    bad('temperature', 'must be a finite number >= 0', p.temperature);
  if (!isFiniteNumber(p.topP) || p.topP <= 0 || p.topP > 1)
    bad('top_p', 'must be in (0, 1]', p.topP);
  if (!isInt(p.topK) || p.topK < -1) bad('top_k', 'must be an integer >= -1', p.topK);
  if (!isFiniteNumber(p.minP) || p.minP < 0 || p.minP > 1)
    bad('min_p', 'must be in [0, 1]', p.minP);
  if (!isFiniteNumber(p.presencePenalty) || Math.abs(p.presencePenalty) > 2)
    bad('presence_penalty', 'must be in [-2, 2]', p.presencePenalty);
  if (!isFiniteNumber(p.frequencyPenalty) || Math.abs(p.frequencyPenalty) > 2)
    bad('frequency_penalty', 'must be in [-2, 2]', p.frequencyPenalty);
  if (!isFiniteNumber(p.repetitionPenalty) || p.repetitionPenalty <= 0)
    bad('repetition_penalty', 'must be a finite number > 0', p.repetitionPenalty);
  if (p.seed !== null && !isInt(p.seed)) bad('seed', 'must be a safe integer or null', p.seed);
  if (!isInt(p.minTokens) || p.minTokens < 0 || p.minTokens > p.maxTokens)
    bad('min_tokens', 'must be an integer in [0, max_tokens]', p.minTokens);
  if (typeof p.ignoreEos !== 'boolean') bad('ignore_eos', 'must be a bool', p.ignoreEos);
  if (p.eosTokenId !== null && (!isInt(p.eosTokenId) || p.eosTokenId < 0))
    bad('_eos_token_id', 'must be an integer >= 0 or null', p.eosTokenId);
  checkIds('stop_token_ids', p.stopTokenIds);
  checkIds('_all_stop_token_ids', p.allStopTokenIds);
  if (p.logprobs !== null && (!isInt(p.logprobs) || p.logprobs < -1))
    bad('logprobs', 'must be an integer >= -1 or null', p.logprobs);
  if (p.promptLogprobs !== null && (!isInt(p.promptLogprobs) || p.promptLogprobs < -1))
    bad('prompt_logprobs', 'must be an integer >= -1 or null', p.promptLogprobs);
  const start = p.routedExpertsPromptStart;
  if (!isInt(start) || start < 0 || start >= promptLength)
    bad('routed_experts_prompt_start', `must be an integer in [0, ${promptLength - 1}]`, start);
  if (p.kvTransferParams !== null)
    checkKvParams(p.kvTransferParams, 'sampling_params.extra_args.kv_transfer_params');
}

export function resolveSamplingParams(p: VllmSamplingParams): ResolvedSamplingParams {
  const out = { ...SAMPLING_DEFAULTS, maxTokens: p.maxTokens } as ResolvedSamplingParams;
  for (const [k, v] of Object.entries(p))
    if (v !== undefined) (out as unknown as Record<string, unknown>)[k] = v;
  return out;
}

/** Writes the map: max_tokens always, the other keys only when not at vLLM's default. */
export function writeSamplingParams(w: MsgWriter, p: ResolvedSamplingParams): void {
  const d = SAMPLING_DEFAULTS;
  const floats: [string, number, number][] = [
    ['presence_penalty', p.presencePenalty, d.presencePenalty],
    ['frequency_penalty', p.frequencyPenalty, d.frequencyPenalty],
    ['repetition_penalty', p.repetitionPenalty, d.repetitionPenalty],
    ['temperature', p.temperature, d.temperature],
    ['top_p', p.topP, d.topP],
  ];
  let n = 1;
  for (const [, v, def] of floats) if (v !== def) n++;
  if (p.topK !== d.topK) n++;
  if (p.minP !== d.minP) n++;
  if (p.seed !== null) n++;
  if (p.stopTokenIds.length > 0) n++;
  if (p.ignoreEos) n++;
  if (p.minTokens !== 0) n++;
  if (p.logprobs !== null) n++;
  if (p.promptLogprobs !== null) n++;
  if (p.routedExpertsPromptStart !== 0) n++;
  if (p.eosTokenId !== null) n++;
  if (p.allStopTokenIds.length > 0) n++;
  if (p.kvTransferParams !== null) n++;
  w.mapHeader(n);
  for (const [key, v, def] of floats) {
    if (v === def) continue;
    w.str(key);
    w.float(v);
  }
  if (p.topK !== d.topK) intKey(w, 'top_k', p.topK);
  if (p.minP !== d.minP) {
    w.str('min_p');
    w.float(p.minP);
  }
  if (p.seed !== null) intKey(w, 'seed', p.seed);
  if (p.stopTokenIds.length > 0) idsKey(w, 'stop_token_ids', p.stopTokenIds);
  if (p.ignoreEos) {
    w.str('ignore_eos');
    w.bool(true);
  }
  intKey(w, 'max_tokens', p.maxTokens);
  if (p.minTokens !== 0) intKey(w, 'min_tokens', p.minTokens);
  if (p.logprobs !== null) intKey(w, 'logprobs', p.logprobs);
  if (p.promptLogprobs !== null) intKey(w, 'prompt_logprobs', p.promptLogprobs);
  if (p.routedExpertsPromptStart !== 0)
    intKey(w, 'routed_experts_prompt_start', p.routedExpertsPromptStart);
  if (p.eosTokenId !== null) intKey(w, '_eos_token_id', p.eosTokenId);
  if (p.allStopTokenIds.length > 0) idsKey(w, '_all_stop_token_ids', p.allStopTokenIds);
  if (p.kvTransferParams !== null) {
    w.str('extra_args');
    w.mapHeader(1);
    w.str('kv_transfer_params');
    w.raw(p.kvTransferParams);
  }
}

function intKey(w: MsgWriter, key: string, v: number): void {
  w.str(key);
  w.int(v, `sampling_params.${key}`);
}

function idsKey(w: MsgWriter, key: string, ids: ArrayLike<number>): void {
  w.str(key);
  w.arrayHeader(ids.length);
  for (let i = 0; i < ids.length; i++) w.int(ids[i] as number, `sampling_params.${key}`);
}

/** Reads the map (keys this codec does not model are skipped, as msgspec ignores them). */
export function readSamplingParams(r: MsgReader): ResolvedSamplingParams {
  const p = { ...SAMPLING_DEFAULTS, maxTokens: 16 } as ResolvedSamplingParams;
  let maxTokensSeen = false;
  for (let n = r.mapHeader('sampling_params'); n > 0; n--) {
    const key = r.str('sampling_params key');
    const f = `sampling_params.${key}`;
    switch (key) {
      case 'max_tokens':
        maxTokensSeen = true;
        p.maxTokens = r.nil(f) ? -1 : r.int(f);
        break;
      case 'temperature':
        p.temperature = r.float(f);
        break;
      case 'top_p':
        p.topP = r.float(f);
        break;
      case 'top_k':
        p.topK = r.int(f);
        break;
      case 'min_p':
        p.minP = r.float(f);
        break;
      case 'presence_penalty':
        p.presencePenalty = r.float(f);
        break;
      case 'frequency_penalty':
        p.frequencyPenalty = r.float(f);
        break;
      case 'repetition_penalty':
        p.repetitionPenalty = r.float(f);
        break;
      case 'seed':
        p.seed = r.nil(f) ? null : r.int(f);
        break;
      case 'min_tokens':
        p.minTokens = r.int(f);
        break;
      case 'ignore_eos':
        p.ignoreEos = r.bool(f);
        break;
      case '_eos_token_id':
        p.eosTokenId = r.nil(f) ? null : r.int(f);
        break;
      case 'stop_token_ids':
        p.stopTokenIds = r.nil(f) ? [] : readIds(r, f);
        break;
      case '_all_stop_token_ids':
        p.allStopTokenIds = r.nil(f) ? [] : readIds(r, f);
        break;
      case 'logprobs':
        p.logprobs = r.nil(f) ? null : r.int(f);
        break;
      case 'prompt_logprobs':
        p.promptLogprobs = r.nil(f) ? null : r.int(f);
        break;
      case 'routed_experts_prompt_start':
        p.routedExpertsPromptStart = r.int(f);
        break;
      case 'extra_args':
        if (!r.nil(f)) p.kvTransferParams = readExtraArgs(r);
        break;
      default:
        r.skip(f);
    }
  }
  // A SamplingParams without max_tokens is vLLM's default of 16 here; the frontend always sends it.
  if (!maxTokensSeen) p.maxTokens = 16;
  return p;
}

/** extra_args (a map): its kv_transfer_params as bytes (a map; nil: null); other keys skipped. */
function readExtraArgs(r: MsgReader): Uint8Array | null {
  let kv: Uint8Array | null = null;
  for (let n = r.mapHeader('sampling_params.extra_args'); n > 0; n--) {
    const key = r.str('sampling_params.extra_args key');
    const f = `sampling_params.extra_args.${key}`;
    if (key === 'kv_transfer_params') kv = readKvParamsBytes(r, f);
    else r.skip(f);
  }
  return kv;
}

function readIds(r: MsgReader, field: string): number[] {
  const out: number[] = [];
  for (let n = r.arrayHeader(field); n > 0; n--) out.push(r.int(field));
  return out;
}
