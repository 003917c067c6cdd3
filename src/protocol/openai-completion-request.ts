import { RS_ERR_REQ_INVALID_BODY } from '../errors.js';
import {
  type Body,
  describeValue,
  fail,
  intElement,
  isPlainObject,
  optBool,
  optInt,
} from './fields.js';
import {
  type OpenAiCommon,
  type OpenAiRequestOptions,
  readCommon,
  readMaxTokens,
} from './openai-request.js';

/**
 * A POST /v1/completions body (vLLM's CompletionRequest): the prompt in any of its four forms
 * (a string, strings, token ids, lists of token ids), `max_tokens` (default 16, as OpenAI and
 * vLLM), `logprobs` as the number of alternatives per position, `echo`, `suffix` (refused), and
 * the shared fields of openai-request.ts.
 */

/** The prompt as sent: texts to tokenize, or token ids (one entry per prompt). */
export type PromptInput = { kind: 'text'; texts: string[] } | { kind: 'ids'; ids: Int32Array[] };

export interface CompletionBody {
  common: OpenAiCommon;
  prompt: PromptInput;
  echo: boolean;
  /** vLLM's add_special_tokens for completions (default true: BOS and the like are added). */
  addSpecialTokens: boolean;
}

/** Prompts per request: each becomes n engine sequences. */
export const MAX_PROMPTS = 64;
/** Engine sequences one request may fan out into (prompts x n). */
export const OPENAI_CHOICES_LIMIT = 256;
const DEFAULT_MAX_TOKENS = 16;

export function parseCompletionBody(body: unknown, opts: OpenAiRequestOptions): CompletionBody {
  if (!isPlainObject(body)) {
    throw new RS_ERR_REQ_INVALID_BODY(`expected an object, got ${describeValue(body)}`);
  }
  if (body.suffix !== undefined && body.suffix !== null) {
    fail('suffix', 'is not supported by this server; send null');
  }
  const prompt = readPrompt(body, opts.vocabSize);
  const echo = optBool(body, '', 'echo', false);
  const topLogprobs = readLogprobs(body, opts.maxLogprobs);
  if (echo && topLogprobs >= 0) {
    fail('echo', 'echo with logprobs needs prompt logprobs, which this server does not produce');
  }
  const common = readCommon(
    body,
    opts,
    { value: readMaxTokens(body, 'max_tokens') ?? DEFAULT_MAX_TOKENS, field: 'max_tokens' },
    topLogprobs,
  );
  const count = prompt.kind === 'text' ? prompt.texts.length : prompt.ids.length;
  if (count * common.n > OPENAI_CHOICES_LIMIT) {
    fail('n', `prompts x n may be at most ${OPENAI_CHOICES_LIMIT}, got ${count * common.n}`);
  }
  return {
    common,
    prompt,
    echo,
    addSpecialTokens: optBool(body, '', 'add_special_tokens', true),
  };
}

/** logprobs: null -> -1 (none); an integer in [0, maxLogprobs]. */
function readLogprobs(body: Body, maxLogprobs: number): number {
  const v = body.logprobs;
  if (v === undefined || v === null) return -1;
  return optInt(body, '', 'logprobs', 0, 0, maxLogprobs);
}

function readPrompt(body: Body, vocabSize: number): PromptInput {
  const v = body.prompt;
  if (v === undefined || v === null) fail('prompt', 'is required');
  if (typeof v === 'string') return { kind: 'text', texts: [v] };
  if (!Array.isArray(v)) {
    fail(
      'prompt',
      `must be a string, strings, token ids or lists of token ids, got ${describeValue(v)}`,
    );
  }
  if (v.length === 0) fail('prompt', 'must not be empty');
  const first: unknown = v[0];
  if (typeof first === 'number' || typeof first === 'bigint') {
    return { kind: 'ids', ids: [readIds(v, 'prompt', vocabSize)] };
  }
  if (v.length > MAX_PROMPTS) fail('prompt', `at most ${MAX_PROMPTS} prompts, got ${v.length}`);
  if (typeof first === 'string') {
    const texts: string[] = new Array(v.length);
    for (let i = 0; i < v.length; i++) {
      const s: unknown = v[i];
      if (typeof s !== 'string') fail(`prompt[${i}]`, `must be a string, got ${describeValue(s)}`);
      texts[i] = s;
    }
    return { kind: 'text', texts };
  }
  const ids: Int32Array[] = new Array(v.length);
  for (let i = 0; i < v.length; i++) {
    const list: unknown = v[i];
    if (!Array.isArray(list)) {
      fail(`prompt[${i}]`, `must be a list of token ids, got ${describeValue(list)}`);
    }
    ids[i] = readIds(list, `prompt[${i}]`, vocabSize);
  }
  return { kind: 'ids', ids };
}

function readIds(list: readonly unknown[], path: string, vocabSize: number): Int32Array {
  if (list.length === 0) fail(path, 'must not be empty');
  const out = new Int32Array(list.length);
  for (let i = 0; i < list.length; i++) {
    const id: unknown = list[i];
    out[i] =
      typeof id === 'number' && Number.isInteger(id) && id >= 0 && id < vocabSize
        ? id
        : intElement(id, '', path, i, 0, vocabSize);
  }
  return out;
}
