import { RS_ERR_REQ_INVALID_BODY } from '../errors.js';
import { MAX_TOP_LOGPROBS } from '../wire/sampling-check.js';
import type { SamplingParams } from '../wire/types.js';
import {
  type Body,
  checkFreeForm,
  describeValue,
  fail,
  intElement,
  isPlainObject,
  optBool,
  optBoolOrNull,
  optInt,
  optNumber,
  optString,
  readStreamOptions,
} from './fields.js';
import type { OpenAiAnswer } from './openai-request.js';
import { stopStringsProblem } from './stop-strings.js';

/**
 * Validation of a POST /inference/v1/generate body (docs/contract.md) into the fixed fields the API
 * server writes into its request ring. Straight-line checks, one per field; `token_ids` becomes an
 * Int32Array in one pass, so no per-token object is made. Unknown fields are ignored; a wrong type
 * or an out-of-range value is a 400 naming the field path (`sampling_params.top_p`, `token_ids[3]`).
 * Every 400 a generate body can get is raised here, including the fields the contract accepts but
 * this server cannot honour (refused, never silently dropped): past this point a request is only
 * refused for the server's state (429, 503) or a duplicate id (409).
 */

export interface GenerateRequestOptions {
  vocabSize: number;
  maxModelLen: number;
  /** Server-wide defaults (--return-sampling-mask, --return-routed-experts). */
  defaultReturnSamplingMask: boolean;
  defaultReturnRoutedExperts: boolean;
  /** --scheduling-policy priority: only then may a request carry a non-zero `priority` (as vLLM). */
  priorityScheduling?: boolean;
}

export interface GenerateRequest {
  requestId: string | null;
  model: string | null;
  stream: boolean;
  includeUsage: boolean;
  continuousUsageStats: boolean;
  cacheSalt: string | null;
  priority: number;
  kvTransferParams: Readonly<Record<string, unknown>> | null;
  /** null: the request did not say; the server's --generate-format decides. */
  packed: boolean | null;
  n: number;
  promptTokenIds: Int32Array;
  params: SamplingParams;
  stop: string[];
  detokenize: boolean;
  skipSpecialTokens: boolean;
  includeStopStrInOutput: boolean;
  /** Set by the OpenAI routes (openai-request.ts): the answer is text, shaped as OpenAI's. */
  openai?: OpenAiAnswer;
  /** The LoRA adapter `model` names (set by the route, served-models.ts); absent or 0: none. */
  loraId?: number;
}

const INT32_MIN = -2_147_483_648;
const INT32_MAX = 2_147_483_647;
// n > 1 fans out into n engine sequences; the bound keeps one request from filling a whole batch.
export const MAX_N = 256;
export const MAX_ID_LENGTH = 1024;
const SP = 'sampling_params';

export function parseGenerateRequest(body: unknown, opts: GenerateRequestOptions): GenerateRequest {
  if (!isPlainObject(body)) {
    throw new RS_ERR_REQ_INVALID_BODY(`expected an object, got ${describeValue(body)}`);
  }
  const promptTokenIds = readTokenIds(body, opts);
  const sp = body[SP];
  if (sp === undefined || sp === null) fail(SP, 'is required');
  if (!isPlainObject(sp)) fail(SP, `must be an object, got ${describeValue(sp)}`);
  const stream = optBool(body, '', 'stream', false);
  const streamOptions = readStreamOptions(body, stream);
  const kvTransferParams = body.kv_transfer_params;
  if (kvTransferParams !== undefined && kvTransferParams !== null) {
    if (!isPlainObject(kvTransferParams)) {
      fail('kv_transfer_params', `must be an object, got ${describeValue(kvTransferParams)}`);
    }
    checkFreeForm(kvTransferParams, 'kv_transfer_params');
  }
  if (body.features !== undefined && body.features !== null) {
    fail('features', 'multimodal inputs are not supported by this server; send token_ids only');
  }
  const request: GenerateRequest = {
    requestId: optString(body, '', 'request_id', 1, MAX_ID_LENGTH),
    model: optString(body, '', 'model', 1, MAX_ID_LENGTH),
    stream,
    includeUsage: streamOptions.includeUsage,
    continuousUsageStats: streamOptions.continuousUsageStats,
    cacheSalt: optString(body, '', 'cache_salt', 1, 1024),
    priority: optInt(body, '', 'priority', 0, INT32_MIN, INT32_MAX),
    kvTransferParams: kvTransferParams ?? null,
    packed: optBoolOrNull(body, '', 'packed'),
    n: optInt(sp, SP, 'n', 1, 1, MAX_N),
    promptTokenIds,
    params: readSamplingParams(sp, promptTokenIds.length, opts),
    stop: readStop(sp),
    detokenize: optBool(sp, SP, 'detokenize', true),
    skipSpecialTokens: optBool(sp, SP, 'skip_special_tokens', true),
    includeStopStrInOutput: optBool(sp, SP, 'include_stop_str_in_output', false),
  };
  refuseUnsupported(request, opts);
  return request;
}

/** Fields that are well-formed but ask for what this server does not do: a 400 naming each. */
function refuseUnsupported(request: GenerateRequest, opts: GenerateRequestOptions): void {
  if (request.n > 1 && request.stream) {
    fail(`${SP}.n`, 'n > 1 is supported without stream only');
  }
  // vLLM's stream leaves prompt logprobs out without a word; here they would be lost silently.
  if (request.params.promptLogprobs >= 0 && request.stream) {
    fail(`${SP}.prompt_logprobs`, 'prompt logprobs are answered without stream only');
  }
  if (request.priority !== 0 && opts.priorityScheduling !== true) {
    fail('priority', 'needs --scheduling-policy priority');
  }
}

/** token_ids → Int32Array in one pass; each id in [0, vocab_size); room left to generate. */
function readTokenIds(body: Body, opts: GenerateRequestOptions): Int32Array {
  const ids = body.token_ids;
  if (ids === undefined || ids === null) fail('token_ids', 'is required');
  // Already an Int32Array of ids >= 0 when the route's JSON parser read it (json-token-ids.ts).
  const read = ids instanceof Int32Array;
  if (!read && !Array.isArray(ids))
    fail('token_ids', `must be an array of integers, got ${describeValue(ids)}`);
  const len = (ids as Int32Array | unknown[]).length;
  if (len === 0) fail('token_ids', 'must hold at least 1 token');
  if (len >= opts.maxModelLen) {
    fail(
      'token_ids',
      `the prompt has ${len} tokens; max_model_len ${opts.maxModelLen} leaves no room to generate`,
    );
  }
  const vocab = opts.vocabSize;
  if (read) {
    for (let i = 0; i < len; i++) {
      if (ids[i]! >= vocab) intElement(ids[i], '', 'token_ids', i, 0, vocab);
    }
    return ids;
  }
  const list = ids as unknown[];
  const out = new Int32Array(len);
  for (let i = 0; i < len; i++) {
    const v: unknown = list[i];
    out[i] =
      typeof v === 'number' && Number.isInteger(v) && v >= 0 && v < vocab
        ? v
        : intElement(v, '', 'token_ids', i, 0, vocab);
  }
  return out;
}

function readSamplingParams(
  sp: Body,
  promptLen: number,
  opts: GenerateRequestOptions,
): SamplingParams {
  const room = opts.maxModelLen - promptLen;
  const maxTokens = readMaxTokens(sp, room);
  const topLogprobs = readLogprobs(sp);
  const topK = optInt(sp, SP, 'top_k', 0, -1, INT32_MAX);
  const seed = optInt(sp, SP, 'seed', -1, -Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER);
  return {
    temperature: optNumber(sp, SP, 'temperature', 1, 0, 2),
    topP: optNumber(sp, SP, 'top_p', 1, 0, 1, true),
    // top_k beyond the vocabulary keeps everything, the same as top_k = vocab_size.
    topK: topK <= 0 ? 0 : Math.min(topK, opts.vocabSize),
    minP: optNumber(sp, SP, 'min_p', 0, 0, 1),
    seed: seed === -1 ? null : seed,
    maxTokens: maxTokens ?? room,
    minTokens: optInt(sp, SP, 'min_tokens', 0, 0, maxTokens ?? room),
    stopTokenIds: readStopTokenIds(sp, opts.vocabSize),
    ignoreEos: optBool(sp, SP, 'ignore_eos', false),
    presencePenalty: optNumber(sp, SP, 'presence_penalty', 0, -2, 2),
    frequencyPenalty: optNumber(sp, SP, 'frequency_penalty', 0, -2, 2),
    repetitionPenalty: optNumber(
      sp,
      SP,
      'repetition_penalty',
      1,
      0,
      Number.POSITIVE_INFINITY,
      true,
    ),
    logprobs: topLogprobs >= 0,
    topLogprobs: Math.max(0, topLogprobs),
    promptLogprobs: optLogprobCount(sp, 'prompt_logprobs'),
    returnSamplingMask:
      optBoolOrNull(sp, SP, 'return_sampling_mask') ?? opts.defaultReturnSamplingMask,
    returnRoutedExperts:
      optBoolOrNull(sp, SP, 'return_routed_experts') ?? opts.defaultReturnRoutedExperts,
    routedExpertsPromptStart: optInt(sp, SP, 'routed_experts_prompt_start', 0, 0, promptLen),
  };
}

/**
 * max_tokens >= 1, null when absent. Past the context it is cut to the room left: the completion
 * stops at max_model_len with finish_reason "length", as prime-rl's vLLM answers this route (its
 * tokenize-params patch; vLLM's token-in/out route sizes its limit the same way). The OpenAI
 * routes keep vLLM's 400 (openai-request.ts).
 */
function readMaxTokens(sp: Body, room: number): number | null {
  const v = sp.max_tokens;
  if (v === undefined || v === null) return null;
  return Math.min(optInt(sp, SP, 'max_tokens', 1, 1, INT32_MAX), room);
}

/**
 * logprobs: null/false → -1 (off); true → 1 (as the contract and vLLM read it); k in
 * [0, MAX_TOP_LOGPROBS] → the sampled token's and, in the legacy form, the k best beside it (vLLM's
 * max_logprobs, 20 by default, bounds k the same way).
 */
function readLogprobs(sp: Body): number {
  const v = sp.logprobs;
  if (v === false) return -1;
  if (v === true) return 1;
  return optLogprobCount(sp, 'logprobs');
}

/** A logprob count k in [0, MAX_TOP_LOGPROBS]; -1 when absent or null. */
function optLogprobCount(sp: Body, key: string): number {
  return optInt(sp, SP, key, -1, 0, MAX_TOP_LOGPROBS);
}

/** stop: a string or an array of strings, none empty, within the limits of stop-strings.ts. */
function readStop(sp: Body): string[] {
  const v = sp.stop;
  if (v === undefined || v === null) return [];
  if (typeof v === 'string') {
    if (v.length === 0) fail(`${SP}.stop`, 'must not be an empty string');
    return checkedStop([v]);
  }
  if (!Array.isArray(v))
    fail(`${SP}.stop`, `must be a string or an array of strings, got ${describeValue(v)}`);
  const out: string[] = new Array(v.length);
  for (let i = 0; i < v.length; i++) {
    const s: unknown = v[i];
    if (typeof s !== 'string')
      fail(`${SP}.stop[${i}]`, `must be a string, got ${describeValue(s)}`);
    if (s.length === 0) fail(`${SP}.stop[${i}]`, 'must not be an empty string');
    out[i] = s;
  }
  return checkedStop(out);
}

function checkedStop(stop: string[]): string[] {
  const problem = stopStringsProblem(stop);
  if (problem !== null) fail(`${SP}.stop`, problem);
  return stop;
}

function readStopTokenIds(sp: Body, vocabSize: number): Int32Array {
  const v = sp.stop_token_ids;
  if (v === undefined || v === null) return new Int32Array(0);
  if (!Array.isArray(v)) {
    fail(`${SP}.stop_token_ids`, `must be an array of integers, got ${describeValue(v)}`);
  }
  const out = new Int32Array(v.length);
  for (let i = 0; i < v.length; i++)
    out[i] = intElement(v[i], SP, 'stop_token_ids', i, 0, vocabSize);
  return out;
}
