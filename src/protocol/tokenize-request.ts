/**
 * POST /tokenize and POST /detokenize bodies, as vLLM's (vllm/entrypoints/serve/tokenize/
 * protocol.py): a `prompt` to encode (add_special_tokens default true) or chat `messages` to render
 * and encode (add_generation_prompt default true, add_special_tokens default false, tools,
 * chat_template_kwargs, continue_final_message), `return_token_strs`; or `tokens` to decode.
 * Every bad field is a 400 naming it.
 */
import { RS_ERR_REQ_INVALID_BODY } from '../errors.js';
import {
  type Body,
  describeValue,
  fail,
  intElement,
  isPlainObject,
  optBool,
  optString,
} from './fields.js';

/** A chat message as the template takes it (role checked, content a string, parts or null). */
export interface ChatMessageBody {
  role: string;
  content?: string | readonly ContentPartBody[] | null;
  [field: string]: unknown;
}

export interface ContentPartBody {
  type: string;
  text?: string;
  [field: string]: unknown;
}

interface TokenizeCommon {
  model: string | null;
  addSpecialTokens: boolean;
  returnTokenStrs: boolean;
}

export type TokenizeRequest =
  | (TokenizeCommon & { kind: 'prompt'; prompt: string })
  | (TokenizeCommon & {
      kind: 'chat';
      messages: ChatMessageBody[];
      addGenerationPrompt: boolean;
      continueFinalMessage: boolean;
      tools: unknown[] | null;
      chatTemplateKwargs: Record<string, unknown> | null;
    });

export interface DetokenizeRequest {
  model: string | null;
  tokens: Int32Array;
}

const MODEL_MAX = 1024;

function body(raw: unknown): Body {
  if (!isPlainObject(raw)) throw new RS_ERR_REQ_INVALID_BODY('expected a JSON object');
  return raw;
}

export function parseTokenizeRequest(raw: unknown): TokenizeRequest {
  const b = body(raw);
  const model = optString(b, '', 'model', 1, MODEL_MAX);
  const returnTokenStrs = optBool(b, '', 'return_token_strs', false);
  if (b.messages !== undefined && b.messages !== null) {
    const addGenerationPrompt = optBool(b, '', 'add_generation_prompt', true);
    const continueFinalMessage = optBool(b, '', 'continue_final_message', false);
    if (addGenerationPrompt && continueFinalMessage && b.add_generation_prompt === true) {
      fail('continue_final_message', 'cannot be true with add_generation_prompt true');
    }
    return {
      kind: 'chat',
      model,
      returnTokenStrs,
      addSpecialTokens: optBool(b, '', 'add_special_tokens', false),
      messages: parseChatMessages(b.messages, 'messages'),
      addGenerationPrompt: addGenerationPrompt && !continueFinalMessage,
      continueFinalMessage,
      tools: optArray(b, 'tools'),
      chatTemplateKwargs: optObject(b, 'chat_template_kwargs'),
    };
  }
  const prompt = b.prompt;
  if (typeof prompt !== 'string') {
    fail('prompt', `must be a string (or give messages), got ${describeValue(prompt)}`);
  }
  return {
    kind: 'prompt',
    model,
    returnTokenStrs,
    addSpecialTokens: optBool(b, '', 'add_special_tokens', true),
    prompt,
  };
}

/** `tokens` must be ids in [0, vocabSize) (the tokenizer's decodable ids). */
export function parseDetokenizeRequest(raw: unknown, vocabSize: number): DetokenizeRequest {
  const b = body(raw);
  const model = optString(b, '', 'model', 1, MODEL_MAX);
  const tokens = b.tokens;
  if (!Array.isArray(tokens))
    fail('tokens', `must be an array of token ids, got ${describeValue(tokens)}`);
  const ids = new Int32Array(tokens.length);
  for (let i = 0; i < tokens.length; i++)
    ids[i] = intElement(tokens[i], '', 'tokens', i, 0, vocabSize);
  return { model, tokens: ids };
}

/** A non-empty array of messages, each an object with a string `role`; content checked loosely. */
export function parseChatMessages(value: unknown, path: string): ChatMessageBody[] {
  if (!Array.isArray(value) || value.length === 0) {
    fail(path, `must be a non-empty array of messages, got ${describeValue(value)}`);
  }
  return value.map((m, i) => {
    const at = `${path}[${i}]`;
    if (!isPlainObject(m)) fail(at, `must be an object, got ${describeValue(m)}`);
    if (typeof m.role !== 'string' || m.role === '') {
      fail(`${at}.role`, `must be a non-empty string, got ${describeValue(m.role)}`);
    }
    const content = m.content;
    if (content !== undefined && content !== null && typeof content !== 'string') {
      if (!Array.isArray(content)) {
        fail(
          `${at}.content`,
          `must be a string or an array of content parts, got ${describeValue(content)}`,
        );
      }
      content.forEach((part, k) => {
        if (!isPlainObject(part) || typeof part.type !== 'string') {
          fail(`${at}.content[${k}]`, 'must be a content part object with a string type');
        }
        if (part.type === 'text' && typeof part.text !== 'string') {
          fail(`${at}.content[${k}].text`, `must be a string, got ${describeValue(part.text)}`);
        }
      });
    }
    return m as ChatMessageBody;
  });
}

function optArray(b: Body, key: string): unknown[] | null {
  const v = b[key];
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v)) fail(key, `must be an array, got ${describeValue(v)}`);
  return v;
}

function optObject(b: Body, key: string): Record<string, unknown> | null {
  const v = b[key];
  if (v === undefined || v === null) return null;
  if (!isPlainObject(v)) fail(key, `must be an object, got ${describeValue(v)}`);
  return v as Record<string, unknown>;
}
