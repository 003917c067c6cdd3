import type { ParsedChatOutput, ToolCall } from './chat-parse/chat-output.js';
import { writeUsageJson } from './choice-json.js';
import type { JsonWriter } from './json-writer.js';
import type { LogprobsWriter } from './openai-logprobs.js';
import type { ChoiceColumns, UsageFigures } from './response-columns.js';

/**
 * The non-streaming answers of /v1/completions and /v1/chat/completions, shaped as vLLM's
 * CompletionResponse and ChatCompletionResponse serialize (every field, nulls included), written
 * from a finished request's columns and its text bytes: the text goes from the bytes the output
 * worker detokenized straight into a JSON string, with no JS string per token or per answer.
 */

export type OpenAiKind = 'completion' | 'chat';

/** One choice: the engine's columns plus its detokenized text. */
export interface OpenAiChoice {
  columns: ChoiceColumns;
  /** The choice's text bytes (after stop-string truncation), or a delta's. */
  text: Uint8Array;
  /** Completions' echo: the prompt's text, written before the choice's text; else null. */
  echo: string | null;
  /** The choice's prompt ids when `return_token_ids` is set, else null. */
  promptTokenIds: Int32Array | null;
  /**
   * Chat with a parser on: the text split into reasoning, content and tool calls (then `text` is
   * not written); absent or null: `text` is the content.
   */
  parsed?: ParsedChatOutput | null;
}

export interface OpenAiResponseColumns {
  kind: OpenAiKind;
  /** Without the `cmpl-` / `chatcmpl-` prefix. */
  requestId: string;
  model: string;
  created: number;
  choices: readonly OpenAiChoice[];
  usage: UsageFigures;
  /** -1: no logprobs; else the k asked (completions' `logprobs`, chat's `top_logprobs`). */
  topLogprobs: number;
  returnTokenIds: boolean;
  kvTransferParams: unknown;
}

export const OPENAI_ID_PREFIX: Readonly<Record<OpenAiKind, string>> = {
  completion: 'cmpl-',
  chat: 'chatcmpl-',
};

export function writeOpenAiResponse(
  w: JsonWriter,
  res: OpenAiResponseColumns,
  logprobs: LogprobsWriter,
): void {
  const chat = res.kind === 'chat';
  w.raw('{"id":').string(OPENAI_ID_PREFIX[res.kind] + res.requestId);
  w.raw(chat ? ',"object":"chat.completion"' : ',"object":"text_completion"');
  w.raw(',"created":').int(res.created);
  w.raw(',"model":').string(res.model);
  w.raw(',"choices":[');
  for (let i = 0; i < res.choices.length; i++) {
    if (i > 0) w.raw(',');
    const choice = res.choices[i]!;
    if (chat) writeChatChoice(w, choice, res, logprobs);
    else writeCompletionChoice(w, choice, res, logprobs);
  }
  w.raw('],"service_tier":null,"system_fingerprint":null,"usage":');
  writeUsageJson(w, res.usage);
  if (chat) w.raw(',"prompt_logprobs":null,"prompt_token_ids":null');
  w.raw(',"kv_transfer_params":').value(res.kvTransferParams ?? null);
  w.raw('}');
}

function writeCompletionChoice(
  w: JsonWriter,
  choice: OpenAiChoice,
  res: OpenAiResponseColumns,
  logprobs: LogprobsWriter,
): void {
  const c = choice.columns;
  w.raw('{"index":').int(c.index).raw(',"text":');
  writeText(w, choice.echo, choice.text);
  w.raw(',"logprobs":');
  if (c.logprobs === null || res.topLogprobs < 0) w.null();
  else logprobs.completion(w, c.tokenIds, c.logprobs, c.top ?? null, res.topLogprobs, 0);
  writeFinish(w, c);
  w.raw(',"token_ids":');
  writeIds(w, res.returnTokenIds ? c.tokenIds : null);
  w.raw(',"prompt_logprobs":null,"prompt_token_ids":');
  writeIds(w, res.returnTokenIds ? choice.promptTokenIds : null);
  w.raw('}');
}

function writeChatChoice(
  w: JsonWriter,
  choice: OpenAiChoice,
  res: OpenAiResponseColumns,
  logprobs: LogprobsWriter,
): void {
  const c = choice.columns;
  const parsed = choice.parsed ?? null;
  w.raw('{"index":').int(c.index).raw(',"message":{"role":"assistant","content":');
  if (parsed === null) w.utf8String(choice.text, 0, choice.text.length);
  else writeNullable(w, parsed.content);
  w.raw(',"refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[');
  if (parsed !== null) {
    for (let i = 0; i < parsed.toolCalls.length; i++) {
      if (i > 0) w.raw(',');
      writeToolCall(w, parsed.toolCalls[i]!, null);
    }
  }
  w.raw('],"reasoning_content":');
  writeNullable(w, parsed?.reasoning ?? null);
  w.raw('},"logprobs":');
  if (c.logprobs === null || res.topLogprobs < 0) w.null();
  else logprobs.chat(w, c.tokenIds, c.logprobs, c.top ?? null, res.topLogprobs);
  writeFinish(w, c, parsed?.toolCallsFinish === true);
  w.raw(',"token_ids":');
  writeIds(w, res.returnTokenIds ? c.tokenIds : null);
  w.raw('}');
}

/**
 * `"finish_reason":..,"stop_reason":..` with their leading comma; `toolCalls`: the parser found
 * tool calls, and a choice that stopped reports "tool_calls" (as vLLM).
 */
export function writeFinish(w: JsonWriter, c: ChoiceColumns, toolCalls = false): void {
  w.raw(',"finish_reason":');
  if (c.finishReason === null) w.null();
  else if (toolCalls && c.finishReason === 'stop') w.raw('"tool_calls"');
  else w.raw('"').raw(c.finishReason).raw('"');
  w.raw(',"stop_reason":');
  if (c.stopReason === null) w.null();
  else if (typeof c.stopReason === 'number') w.int(c.stopReason);
  else w.string(c.stopReason);
}

/** One JSON string of `echo` (when set) followed by the text bytes. */
export function writeText(w: JsonWriter, echo: string | null, text: Uint8Array): void {
  if (echo === null || echo === '') {
    w.utf8String(text, 0, text.length);
    return;
  }
  const bytes = Buffer.from(echo, 'utf8');
  const both = new Uint8Array(bytes.length + text.length);
  both.set(bytes, 0);
  both.set(text, bytes.length);
  w.utf8String(both, 0, both.length);
}

export function writeIds(w: JsonWriter, ids: Int32Array | null): void {
  if (ids === null) w.null();
  else w.intArray(ids);
}

function writeNullable(w: JsonWriter, text: string | null): void {
  if (text === null) w.null();
  else w.string(text);
}

/**
 * One tool call as vLLM's ToolCall serializes: `{"id", "type": "function", "function": {"name",
 * "arguments"}}`; a stream's delta also carries its `index` (`index` non-null).
 */
export function writeToolCall(w: JsonWriter, call: ToolCall, index: number | null): void {
  w.raw('{');
  if (index !== null) w.raw('"index":').int(index).raw(',');
  w.raw('"id":').string(call.id).raw(',"type":"function","function":{"name":').string(call.name);
  w.raw(',"arguments":').string(call.arguments).raw('}}');
}
