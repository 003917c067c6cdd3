import { RS_ERR_REQ_INVALID_BODY } from '../errors.js';
import {
  type Body,
  checkFreeForm,
  describeValue,
  fail,
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
 * A POST /v1/chat/completions body (vLLM's ChatCompletionRequest): the messages (roles, text
 * content or text parts), `tools` for the chat template and `tool_choice` for the answer's parsing, the template switches
 * (`add_generation_prompt`, `continue_final_message`, `chat_template_kwargs`),
 * `max_completion_tokens` (or the deprecated `max_tokens`), `logprobs` + `top_logprobs`, and the
 * shared fields of openai-request.ts. Rendering and tokenizing are the tokenizer's.
 */

/** A message as the chat template reads it: text content, and the tool fields passed through. */
export interface ChatMessage {
  role: string;
  content: string | null;
  [key: string]: unknown;
}

export interface ChatBody {
  common: OpenAiCommon;
  messages: ChatMessage[];
  /** The `tools` array as given (each `{type: "function", function: {name, ...}}`), or null. */
  tools: readonly Body[] | null;
  addGenerationPrompt: boolean;
  /** Leave the last (assistant) message open for the model to continue. */
  continueFinalMessage: boolean;
  /** Extra variables for the template (Qwen3's `enable_thinking`, ...). */
  chatTemplateKwargs: Readonly<Record<string, unknown>>;
  /** Default false: the template writes the special tokens itself. */
  addSpecialTokens: boolean;
  toolChoice: ChatToolChoice;
  /** chat_template_kwargs.enable_thinking, true unless false. */
  thinking: boolean;
}

/** `tool_choice` as read: a named function is `{name}`. */
export type ChatToolChoice = 'none' | 'auto' | 'required' | { name: string };

const MAX_MESSAGES = 4096;
const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool', 'function']);
/** Message fields the template may read besides role and content. */
const PASSED_THROUGH = ['name', 'tool_calls', 'tool_call_id', 'reasoning_content', 'reasoning'];

export function parseChatBody(body: unknown, opts: OpenAiRequestOptions): ChatBody {
  if (!isPlainObject(body)) {
    throw new RS_ERR_REQ_INVALID_BODY(`expected an object, got ${describeValue(body)}`);
  }
  const messages = readMessages(body.messages);
  const tools = readTools(body);
  const toolChoice = readToolChoice(body, tools);
  for (const key of ['chat_template', 'echo'] as const) {
    const v = body[key];
    if (v !== undefined && v !== null && v !== false) {
      fail(key, 'is not supported by this server; send null');
    }
  }
  const continueFinalMessage = optBool(body, '', 'continue_final_message', false);
  // As vLLM: both set explicitly is a mistake; continuing leaves out the generation prompt.
  if (continueFinalMessage && body.add_generation_prompt === true) {
    fail('continue_final_message', 'cannot be true together with add_generation_prompt');
  }
  const addGenerationPrompt = optBool(body, '', 'add_generation_prompt', !continueFinalMessage);
  const logprobs = optBool(body, '', 'logprobs', false);
  const top = optInt(body, '', 'top_logprobs', 0, 0, opts.maxLogprobs);
  if (top > 0 && !logprobs) fail('top_logprobs', 'needs logprobs set to true');
  const maxTokens =
    readMaxTokens(body, 'max_completion_tokens') === null
      ? { value: readMaxTokens(body, 'max_tokens'), field: 'max_tokens' }
      : { value: readMaxTokens(body, 'max_completion_tokens'), field: 'max_completion_tokens' };
  const kwargs = body.chat_template_kwargs;
  if (kwargs !== undefined && kwargs !== null) {
    if (!isPlainObject(kwargs)) {
      fail('chat_template_kwargs', `must be an object, got ${describeValue(kwargs)}`);
    }
    checkFreeForm(kwargs, 'chat_template_kwargs');
  }
  return {
    common: readCommon(body, opts, maxTokens, logprobs ? top : -1),
    messages,
    tools,
    addGenerationPrompt,
    continueFinalMessage,
    chatTemplateKwargs: (kwargs as Body | undefined | null) ?? {},
    addSpecialTokens: optBool(body, '', 'add_special_tokens', false),
    toolChoice,
    // Qwen3's and GLM-4.5's templates think unless told not to.
    thinking: (kwargs as Body | undefined | null)?.enable_thinking !== false,
  };
}

function readMessages(v: unknown): ChatMessage[] {
  if (v === undefined || v === null) fail('messages', 'is required');
  if (!Array.isArray(v)) fail('messages', `must be an array, got ${describeValue(v)}`);
  if (v.length === 0) fail('messages', 'must hold at least one message');
  if (v.length > MAX_MESSAGES) fail('messages', `at most ${MAX_MESSAGES}, got ${v.length}`);
  const out: ChatMessage[] = new Array(v.length);
  for (let i = 0; i < v.length; i++) out[i] = readMessage(v[i], `messages[${i}]`);
  return out;
}

function readMessage(m: unknown, path: string): ChatMessage {
  if (!isPlainObject(m)) fail(path, `must be an object, got ${describeValue(m)}`);
  const role = m.role;
  if (typeof role !== 'string' || !ROLES.has(role)) {
    fail(`${path}.role`, `must be one of ${[...ROLES].join(', ')}, got ${describeValue(role)}`);
  }
  const message: ChatMessage = { role, content: readContent(m.content, `${path}.content`) };
  for (const key of PASSED_THROUGH) {
    const v = m[key];
    if (v === undefined) continue;
    message[key] = checkFreeForm(v, `${path}.${key}`);
  }
  return message;
}

/** A string, null, or text parts (joined with newlines, as vLLM does for string-content templates). */
function readContent(v: unknown, path: string): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v === 'string') return v;
  if (!Array.isArray(v))
    fail(path, `must be a string or an array of parts, got ${describeValue(v)}`);
  const texts: string[] = [];
  for (let j = 0; j < v.length; j++) {
    const part: unknown = v[j];
    if (!isPlainObject(part))
      fail(`${path}[${j}]`, `must be an object, got ${describeValue(part)}`);
    if (part.type !== 'text') {
      fail(
        `${path}[${j}].type`,
        `only "text" parts are supported, got ${describeValue(part.type)}`,
      );
    }
    if (typeof part.text !== 'string') {
      fail(`${path}[${j}].text`, `must be a string, got ${describeValue(part.text)}`);
    }
    texts.push(part.text);
  }
  return texts.join('\n');
}

function readTools(body: Body): Body[] | null {
  const v = body.tools;
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v)) fail('tools', `must be an array, got ${describeValue(v)}`);
  checkFreeForm(v, 'tools');
  for (let i = 0; i < v.length; i++) {
    const t: unknown = v[i];
    if (!isPlainObject(t)) fail(`tools[${i}]`, `must be an object, got ${describeValue(t)}`);
    if (t.type !== 'function') {
      fail(`tools[${i}].type`, `must be "function", got ${describeValue(t.type)}`);
    }
    const f = t.function;
    if (!isPlainObject(f))
      fail(`tools[${i}].function`, `must be an object, got ${describeValue(f)}`);
    if (typeof f.name !== 'string' || f.name.length === 0) {
      fail(`tools[${i}].function.name`, `must be a non-empty string, got ${describeValue(f.name)}`);
    }
  }
  return v.length === 0 ? null : (v as Body[]);
}

/**
 * As vLLM's ChatCompletionRequest: absent, `tool_choice` is "auto" when tools are given, else
 * "none"; "required" and a named function need tools, and the name must be one of them. Whether
 * "auto" may be served (it needs --enable-auto-tool-choice) is the route's to say.
 */
function readToolChoice(body: Body, tools: readonly Body[] | null): ChatToolChoice {
  const v = body.tool_choice;
  if (v === undefined || v === null) return tools === null ? 'none' : 'auto';
  if (v === 'none') return 'none';
  if (v === 'auto' || v === 'required') {
    if (tools === null) fail('tool_choice', `"${v}" needs tools`);
    return v;
  }
  if (!isPlainObject(v)) {
    fail(
      'tool_choice',
      `must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}, got ${describeValue(v)}`,
    );
  }
  if (v.type !== 'function') {
    fail('tool_choice.type', `must be "function", got ${describeValue(v.type)}`);
  }
  const f = v.function;
  if (!isPlainObject(f) || typeof f.name !== 'string' || f.name === '') {
    fail('tool_choice.function.name', `must be a non-empty string, got ${describeValue(f)}`);
  }
  const name = f.name;
  if (tools === null) fail('tool_choice', 'a named function needs tools');
  if (!tools.some((t) => (t.function as Body).name === name)) {
    fail('tool_choice.function.name', `"${name}" is not one of the tools given`);
  }
  return { name };
}
