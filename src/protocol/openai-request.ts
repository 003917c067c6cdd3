import type { SamplingParams } from '../wire/types.js';
import type { ChatParseOptions } from './chat-parse/chat-output.js';
import {
  type Body,
  checkFreeForm,
  describeValue,
  fail,
  intElement,
  isPlainObject,
  optBool,
  optInt,
  optNumber,
  optString,
  readStreamOptions,
} from './fields.js';
import type { GenerateRequest } from './generate-request.js';
import { stopStringsProblem } from './stop-strings.js';

/**
 * What /v1/completions and /v1/chat/completions share (vLLM's protocol.py, CompletionRequest and
 * ChatCompletionRequest): the sampling fields, vLLM's extra ones, the stream switches and the
 * fields this server refuses (a 400 naming each, never dropped). Parsing happens in two steps
 * because the length checks need the tokenized prompt: parse the body (every field but those),
 * tokenize, then toGenerateRequest() checks lengths and yields the request the coordinator runs,
 * with `openai` saying how its answer is shaped.
 */

export interface OpenAiRequestOptions {
  vocabSize: number;
  maxModelLen: number;
  /** The most top logprobs a request may ask (vLLM's --max-logprobs, 20). */
  maxLogprobs: number;
  priorityScheduling?: boolean;
}

/** How an OpenAI request's answer is shaped, carried on its GenerateRequest. */
export interface OpenAiAnswer {
  kind: 'completion' | 'chat';
  /** Choices per prompt (the body's `n`); the GenerateRequest's n is prompts x this. */
  n: number;
  /** Each prompt's token ids (completions may send several; choice i runs prompt floor(i / n)). */
  prompts: readonly Int32Array[];
  /** Completions with `echo`: each prompt's text, written before its choices' text. */
  echo: readonly string[] | null;
  /** Alternatives per position (completions' `logprobs`, chat's `top_logprobs`); -1: no logprobs. */
  topLogprobs: number;
  /** vLLM's `return_token_ids`: choices carry `token_ids` and `prompt_token_ids`. */
  returnTokenIds: boolean;
  /**
   * Chat with a reasoning or tool-call parser on: how each choice's text is split into
   * reasoning_content, content and tool_calls (chat-parse/chat-output.ts); absent: all content.
   */
  chatParse?: ChatParseOptions | null;
  /** With the simulator: per choice, the tokens it answers with first; absent or null: none. */
  scripts?: readonly (ScriptedAnswer | null)[] | null;
}

/** Tokens the simulator emits first for one choice (EngineRequest.script). */
export interface ScriptedAnswer {
  tokens: Int32Array;
  /** The answer ends after them (the model's EOS next). */
  ends: boolean;
}

/** The parsed fields both routes share, before the prompt's length is known. */
export interface OpenAiCommon {
  model: string | null;
  requestId: string | null;
  stream: boolean;
  includeUsage: boolean;
  continuousUsageStats: boolean;
  n: number;
  /** max_tokens (completions; default 16) or max_completion_tokens; null: what the context leaves. */
  maxTokens: number | null;
  /** The field max_tokens came from, for the 400 that names it. */
  maxTokensField: string;
  minTokens: number;
  stop: string[];
  includeStopStrInOutput: boolean;
  skipSpecialTokens: boolean;
  topLogprobs: number;
  returnTokenIds: boolean;
  priority: number;
  cacheSalt: string | null;
  kvTransferParams: Readonly<Record<string, unknown>> | null;
  params: Omit<SamplingParams, 'maxTokens' | 'minTokens' | 'logprobs'>;
}

const INT32_MAX = 2_147_483_647;
const INT32_MIN = -2_147_483_648;
export const OPENAI_MAX_N = 128;

/** Reads the fields both routes share; `maxTokens` and `topLogprobs` are read by each route. */
export function readCommon(
  body: Body,
  opts: OpenAiRequestOptions,
  maxTokens: { value: number | null; field: string },
  topLogprobs: number,
): OpenAiCommon {
  refuseUnsupported(body);
  const stream = optBool(body, '', 'stream', false);
  const so = readStreamOptions(body, stream);
  const n = optInt(body, '', 'n', 1, 1, OPENAI_MAX_N);
  const kv = body.kv_transfer_params;
  if (kv !== undefined && kv !== null) {
    if (!isPlainObject(kv))
      fail('kv_transfer_params', `must be an object, got ${describeValue(kv)}`);
    checkFreeForm(kv, 'kv_transfer_params');
  }
  const priority = optInt(body, '', 'priority', 0, INT32_MIN, INT32_MAX);
  if (priority !== 0 && opts.priorityScheduling !== true) {
    fail('priority', 'needs --scheduling-policy priority');
  }
  const topK = optInt(body, '', 'top_k', 0, -1, INT32_MAX);
  const seed = optInt(body, '', 'seed', -1, -Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER);
  return {
    model: optString(body, '', 'model', 1, 1024),
    requestId: optString(body, '', 'request_id', 1, 1024),
    stream,
    includeUsage: so.includeUsage,
    continuousUsageStats: so.continuousUsageStats,
    n,
    maxTokens: maxTokens.value,
    maxTokensField: maxTokens.field,
    minTokens: optInt(body, '', 'min_tokens', 0, 0, INT32_MAX),
    stop: readStop(body),
    includeStopStrInOutput: optBool(body, '', 'include_stop_str_in_output', false),
    skipSpecialTokens: optBool(body, '', 'skip_special_tokens', true),
    topLogprobs,
    returnTokenIds: optBool(body, '', 'return_token_ids', false),
    priority,
    cacheSalt: optString(body, '', 'cache_salt', 1, 1024),
    kvTransferParams: (kv as Readonly<Record<string, unknown>> | undefined) ?? null,
    params: {
      temperature: optNumber(body, '', 'temperature', 1, 0, 2),
      topP: optNumber(body, '', 'top_p', 1, 0, 1, true),
      topK: topK <= 0 ? 0 : Math.min(topK, opts.vocabSize),
      minP: optNumber(body, '', 'min_p', 0, 0, 1),
      seed: seed === -1 ? null : seed,
      stopTokenIds: readStopTokenIds(body, opts.vocabSize),
      ignoreEos: optBool(body, '', 'ignore_eos', false),
      presencePenalty: optNumber(body, '', 'presence_penalty', 0, -2, 2),
      frequencyPenalty: optNumber(body, '', 'frequency_penalty', 0, -2, 2),
      repetitionPenalty: optNumber(
        body,
        '',
        'repetition_penalty',
        1,
        0,
        Number.POSITIVE_INFINITY,
        true,
      ),
      // Set by each route from its logprobs / top_logprobs (engineRequest).
      topLogprobs: 0,
      promptLogprobs: -1,
      returnSamplingMask: false,
      returnRoutedExperts: false,
      routedExpertsPromptStart: 0,
    },
  };
}

/** A positive max_tokens-like field, or null when absent. */
export function readMaxTokens(body: Body, field: string): number | null {
  const v = body[field];
  if (v === undefined || v === null) return null;
  return optInt(body, '', field, 1, 1, INT32_MAX);
}

/**
 * The request the coordinator runs, once the prompts are tokenized: each prompt non-empty, in the
 * vocabulary and leaving room for max_tokens (vLLM's "maximum context length" 400).
 */
export function toGenerateRequest(
  c: OpenAiCommon,
  answer: Omit<OpenAiAnswer, 'n' | 'topLogprobs' | 'returnTokenIds'>,
  promptField: string,
  opts: OpenAiRequestOptions,
): GenerateRequest {
  let longest = 0;
  for (const ids of answer.prompts) {
    if (ids.length === 0) fail(promptField, 'must not be empty');
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      if (id >= opts.vocabSize) intElement(id, '', promptField, i, 0, opts.vocabSize);
    }
    longest = Math.max(longest, ids.length);
  }
  const room = opts.maxModelLen - longest;
  if (room < 1 || (c.maxTokens !== null && c.maxTokens > room)) {
    fail(
      c.maxTokens === null ? promptField : c.maxTokensField,
      `this model's maximum context length is ${opts.maxModelLen} tokens; the prompt has ` +
        `${longest} tokens and ${c.maxTokens ?? 1} more were asked to be generated`,
    );
  }
  const maxTokens = c.maxTokens ?? room;
  if (c.minTokens > maxTokens) {
    fail('min_tokens', `must not exceed the ${maxTokens} tokens that may be generated`);
  }
  return {
    requestId: c.requestId,
    model: c.model,
    stream: c.stream,
    includeUsage: c.includeUsage,
    continuousUsageStats: c.continuousUsageStats,
    cacheSalt: c.cacheSalt,
    priority: c.priority,
    kvTransferParams: c.kvTransferParams,
    packed: null,
    n: answer.prompts.length * c.n,
    promptTokenIds: answer.prompts[0]!,
    params: {
      ...c.params,
      maxTokens,
      minTokens: c.minTokens,
      logprobs: c.topLogprobs >= 0,
      topLogprobs: Math.max(0, c.topLogprobs),
    },
    stop: c.stop,
    detokenize: true,
    skipSpecialTokens: c.skipSpecialTokens,
    includeStopStrInOutput: c.includeStopStrInOutput,
    openai: {
      ...answer,
      n: c.n,
      topLogprobs: c.topLogprobs,
      returnTokenIds: c.returnTokenIds,
    },
  };
}

/** vLLM fields this server cannot honour: a 400 naming each when it asks for something. */
function refuseUnsupported(body: Body): void {
  const asked = (key: string): boolean => body[key] !== undefined && body[key] !== null;
  if (asked('logit_bias') && !isEmptyObject(body.logit_bias)) {
    fail('logit_bias', 'is not supported by this server; send null');
  }
  if (body.use_beam_search === true) fail('use_beam_search', 'beam search is not supported');
  for (const key of [
    'prompt_logprobs',
    'allowed_token_ids',
    'bad_words',
    'truncate_prompt_tokens',
    'structured_outputs',
    'guided_json',
    'guided_regex',
    'guided_choice',
    'guided_grammar',
    'logits_processors',
    'prompt_embeds',
  ]) {
    if (asked(key)) fail(key, 'is not supported by this server; send null');
  }
  const best = body.best_of;
  if (best !== undefined && best !== null && best !== 1 && best !== body.n) {
    fail('best_of', 'is not supported by this server (only best_of = n)');
  }
  const rf = body.response_format;
  if (rf !== undefined && rf !== null) {
    if (!isPlainObject(rf)) fail('response_format', `must be an object, got ${describeValue(rf)}`);
    if (rf.type !== 'text') {
      fail('response_format.type', `only "text" is supported, got ${describeValue(rf.type)}`);
    }
  }
}

function isEmptyObject(v: unknown): boolean {
  return isPlainObject(v) && Object.keys(v).length === 0;
}

function readStop(body: Body): string[] {
  const v = body.stop;
  if (v === undefined || v === null) return [];
  const stop = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(stop)) {
    fail('stop', `must be a string or an array of strings, got ${describeValue(v)}`);
  }
  const out: string[] = new Array(stop.length);
  for (let i = 0; i < stop.length; i++) {
    const s: unknown = stop[i];
    const path = typeof v === 'string' ? 'stop' : `stop[${i}]`;
    if (typeof s !== 'string') fail(path, `must be a string, got ${describeValue(s)}`);
    if (s.length === 0) fail(path, 'must not be an empty string');
    out[i] = s;
  }
  const problem = stopStringsProblem(out);
  if (problem !== null) fail('stop', problem);
  return out;
}

function readStopTokenIds(body: Body, vocabSize: number): Int32Array {
  const v = body.stop_token_ids;
  if (v === undefined || v === null) return new Int32Array(0);
  if (!Array.isArray(v)) {
    fail('stop_token_ids', `must be an array of integers, got ${describeValue(v)}`);
  }
  const out = new Int32Array(v.length);
  for (let i = 0; i < v.length; i++)
    out[i] = intElement(v[i], '', 'stop_token_ids', i, 0, vocabSize);
  return out;
}
