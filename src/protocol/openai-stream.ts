import type { ChatDeltaPart } from './chat-parse/chat-output.js';
import { writeUsageJson } from './choice-json.js';
import type { JsonWriter } from './json-writer.js';
import type { LogprobsWriter } from './openai-logprobs.js';
import {
  OPENAI_ID_PREFIX,
  type OpenAiChoice,
  type OpenAiKind,
  writeFinish,
  writeIds,
  writeText,
} from './openai-response.js';
import type { UsageFigures } from './response-columns.js';

/**
 * The server-sent events of a streamed OpenAI answer, shaped as vLLM writes them: completions'
 * chunks serialize every field (`"usage": null` included), chat's only the fields set (vLLM's
 * `exclude_unset=True`), with a first chat chunk that carries `delta.role` and empty content.
 * The usage-only last event (`stream_options.include_usage`) has `choices: []`; the stream ends
 * with `data: [DONE]` (protocol/sse.ts). Framing is the same `data: {...}\n\n` as sse.ts's.
 */

export interface OpenAiChunk {
  kind: OpenAiKind;
  requestId: string;
  model: string;
  created: number;
  /** The new positions of one choice and their text (finish fields set on its last chunk). */
  choice: OpenAiChoice;
  /** The request's first chunk: chat writes its role chunk before it. */
  first: boolean;
  /** Completions' logprobs: characters of text already streamed (vLLM's text_offset start). */
  textOffset: number;
  /** stream_options.continuous_usage_stats: usage so far, else null. */
  usage: UsageFigures | null;
  topLogprobs: number;
  returnTokenIds: boolean;
  /**
   * Chat with a parser on: this chunk's text as the parser split it (then `choice.text` is not
   * written); absent or null: the text is content.
   */
  parts?: readonly ChatDeltaPart[] | null;
  /** The parser found tool calls: a choice that stopped reports "tool_calls". */
  toolCallsFinish?: boolean;
}

function writeHead(
  w: JsonWriter,
  kind: OpenAiKind,
  requestId: string,
  model: string,
  created: number,
): void {
  w.raw('data: {"id":').string(OPENAI_ID_PREFIX[kind] + requestId);
  w.raw(kind === 'chat' ? ',"object":"chat.completion.chunk"' : ',"object":"text_completion"');
  w.raw(',"created":').int(created);
  w.raw(',"model":').string(model);
}

/** The event(s) of one chunk (chat's role chunk first when `first`). */
export function writeOpenAiChunk(
  w: JsonWriter,
  chunk: OpenAiChunk,
  logprobs: LogprobsWriter,
): void {
  if (chunk.kind === 'chat') writeChatChunk(w, chunk, logprobs);
  else writeCompletionChunk(w, chunk, logprobs);
}

function writeCompletionChunk(w: JsonWriter, k: OpenAiChunk, logprobs: LogprobsWriter): void {
  const c = k.choice.columns;
  writeHead(w, k.kind, k.requestId, k.model, k.created);
  w.raw(',"choices":[{"index":').int(c.index).raw(',"text":');
  writeText(w, k.first ? k.choice.echo : null, k.choice.text);
  w.raw(',"logprobs":');
  if (c.logprobs === null || k.topLogprobs < 0) w.null();
  else logprobs.completion(w, c.tokenIds, c.logprobs, c.top ?? null, k.topLogprobs, k.textOffset);
  writeFinish(w, c);
  w.raw(',"prompt_token_ids":');
  writeIds(w, k.returnTokenIds && k.first ? k.choice.promptTokenIds : null);
  w.raw(',"token_ids":');
  writeIds(w, k.returnTokenIds ? c.tokenIds : null);
  w.raw('}],"usage":');
  if (k.usage === null) w.null();
  else writeUsageJson(w, k.usage);
  w.raw('}\n\n');
}

function writeChatChunk(w: JsonWriter, k: OpenAiChunk, logprobs: LogprobsWriter): void {
  const c = k.choice.columns;
  if (k.first) {
    writeHead(w, k.kind, k.requestId, k.model, k.created);
    w.raw(',"choices":[{"index":').int(c.index);
    w.raw(',"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null');
    if (k.returnTokenIds && k.choice.promptTokenIds !== null) {
      w.raw(',"prompt_token_ids":').intArray(k.choice.promptTokenIds);
    }
    w.raw('}]');
    if (k.usage !== null) {
      w.raw(',"usage":');
      writeUsageJson(w, { ...k.usage, completionTokens: 0 });
    }
    w.raw('}\n\n');
  }
  writeHead(w, k.kind, k.requestId, k.model, k.created);
  w.raw(',"choices":[{"index":').int(c.index).raw(',"delta":');
  if (k.parts === undefined || k.parts === null) {
    w.raw('{"content":').utf8String(k.choice.text, 0, k.choice.text.length).raw('}');
  } else {
    writeParsedDelta(w, k.parts);
  }
  w.raw(',"logprobs":');
  if (c.logprobs === null || k.topLogprobs < 0) w.null();
  else logprobs.chat(w, c.tokenIds, c.logprobs, c.top ?? null, k.topLogprobs);
  if (c.finishReason === null) w.raw(',"finish_reason":null');
  else writeFinish(w, c, k.toolCallsFinish === true);
  if (k.returnTokenIds) w.raw(',"token_ids":').intArray(c.tokenIds);
  w.raw('}]');
  if (k.usage !== null) {
    w.raw(',"usage":');
    writeUsageJson(w, k.usage);
  }
  w.raw('}\n\n');
}

/** The last event with `stream_options.include_usage`: no choices, the final usage. */
export function writeOpenAiUsageChunk(
  w: JsonWriter,
  kind: OpenAiKind,
  requestId: string,
  model: string,
  created: number,
  usage: UsageFigures,
): void {
  writeHead(w, kind, requestId, model, created);
  w.raw(',"choices":[],"usage":');
  writeUsageJson(w, usage);
  w.raw('}\n\n');
}

/**
 * A parsed chunk's delta, as vLLM's DeltaMessage serializes with only the fields set: the
 * reasoning and content parts joined, and each tool call's parts in order (its first with id,
 * type and name; later ones with an `arguments` fragment). `{"content": ""}` when the parser held
 * all of it back (a chunk that carries logprobs or the finish still goes out).
 */
function writeParsedDelta(w: JsonWriter, parts: readonly ChatDeltaPart[]): void {
  let reasoning = '';
  let content = '';
  let calls = 0;
  for (const p of parts) {
    if (p.kind === 'reasoning') reasoning += p.text;
    else if (p.kind === 'content') content += p.text;
    else calls++;
  }
  w.raw('{');
  let first = true;
  const field = (name: string): void => {
    w.raw(first ? '"' : ',"')
      .raw(name)
      .raw('":');
    first = false;
  };
  if (reasoning !== '') {
    field('reasoning_content');
    w.string(reasoning);
  }
  if (content !== '' || (reasoning === '' && calls === 0)) {
    field('content');
    w.string(content);
  }
  if (calls > 0) {
    field('tool_calls');
    w.raw('[');
    let n = 0;
    for (const p of parts) {
      if (p.kind !== 'tool_call') continue;
      w.raw(n++ === 0 ? '{"index":' : ',{"index":').int(p.index);
      if (p.id !== undefined) w.raw(',"id":').string(p.id).raw(',"type":"function"');
      w.raw(',"function":{');
      if (p.name !== undefined) w.raw('"name":').string(p.name);
      if (p.arguments !== undefined) {
        w.raw(p.name !== undefined ? ',"arguments":' : '"arguments":').string(p.arguments);
      }
      w.raw('}}');
    }
    w.raw(']');
  }
  w.raw('}');
}
