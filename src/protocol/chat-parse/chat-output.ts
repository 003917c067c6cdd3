import type { ReasoningParserName, ToolParserName } from '../../wire/chat-formats.js';
import { isBlank } from './python-str.js';
import { splitReasoning } from './reasoning.js';
import {
  extractToolCalls,
  finishesWithToolCalls,
  type ParsedCall,
  parseRequiredCalls,
  toolModeOf,
} from './tool-calls.js';

/**
 * The reasoning text, content and tool calls of one chat choice, as vLLM returns them with
 * `--reasoning-parser qwen3|glm45` and `--enable-auto-tool-choice --tool-call-parser hermes|glm45`
 * (docs/chat-parsing.md: formats, rules, and the vLLM commit each rule was read at). parseChatOutput
 * reads a finished text; ChatStreamParser (chat-stream.ts) reads it delta by delta and gives the same
 * answer in parts. Neither throws on what a model writes: malformed markup ends up as content, as
 * in vLLM.
 */

export {
  REASONING_PARSERS,
  type ReasoningParserName,
  TOOL_PARSERS,
  type ToolParserName,
} from '../../wire/chat-formats.js';

export type ToolChoice = 'auto' | 'required' | { name: string };

/** One entry of the request's `tools`, as far as the glm45 parser reads it (argument types). */
export interface ChatToolSpec {
  function: { name: string; parameters?: unknown };
}

export interface ChatParseOptions {
  /** null: no reasoning parsing (all text is content). */
  reasoning: ReasoningParserName | null;
  /** chat_template_kwargs.enable_thinking (true when not given): false means the template already
   *  closed the thinking span in the prompt, so the output is content (as vLLM's parsers decide). */
  thinking: boolean;
  /** null: no tool-call parsing (no tools in the request, tool_choice "none", or auto tool choice off
   *  while tool_choice is "auto"). For 'required' and named choices the parser name is irrelevant
   *  (vLLM parses JSON) but must still be non-null to enable tool parsing; the caller passes the
   *  server's parser or 'hermes'. Exception: with 'glm45' vLLM skips guided decoding for those
   *  choices (its glm45 parser declares no support for them) and reads the model's own markup. */
  tools: ToolParserName | null;
  toolChoice: ToolChoice;
  /** The request's `tools`. glm45 keeps a string-typed argument as written and deserializes the
   *  others; without these it deserializes every value (as vLLM does for an unknown tool). */
  requestTools?: readonly ChatToolSpec[];
}

export interface ToolCall {
  id: string;
  name: string;
  /** a JSON string, as vLLM returns it */
  arguments: string;
}

export interface ParsedChatOutput {
  reasoning: string | null;
  /** null where vLLM returns null content (e.g. only tool calls) */
  content: string | null;
  toolCalls: ToolCall[];
  /** vLLM would report finish_reason "tool_calls" instead of "stop" for this answer (given it stopped) */
  toolCallsFinish: boolean;
}

export type ChatDeltaPart =
  | { kind: 'reasoning'; text: string }
  | { kind: 'content'; text: string }
  /** First part of a call: its index (0-based in this choice), id and name, arguments usually ''. Later parts: index and an arguments fragment only. */
  | { kind: 'tool_call'; index: number; id?: string; name?: string; arguments?: string };

/** The content and calls of the text after the thinking span. */
function readTools(content: string | null, opts: ChatParseOptions): ExtractedAnswer {
  const mode = toolModeOf(opts);
  const forced = opts.toolChoice !== 'auto';
  if (mode === 'json-named') {
    const name = (opts.toolChoice as { name: string }).name;
    if (content === null || isBlank(content)) return { content: null, calls: [] };
    return { content: null, calls: [{ name, arguments: content }] };
  }
  if (mode === 'json-required') {
    return { content: null, calls: parseRequiredCalls(content ?? '') };
  }
  const found = extractToolCalls(content ?? '', opts.tools ?? 'hermes', opts.requestTools);
  if (found !== null) return found;
  // No call: a forced choice drops blank content; auto keeps the text as it was.
  return { content: forced && content !== null && isBlank(content) ? null : content, calls: [] };
}

interface ExtractedAnswer {
  content: string | null;
  calls: ParsedCall[];
}

/** `newId()` gives each tool call its id (the caller makes `chatcmpl-tool-<hex>`). */
export function parseChatOutput(
  text: string,
  opts: ChatParseOptions,
  newId: () => string,
): ParsedChatOutput {
  const split = splitReasoning(text, opts.reasoning, opts.thinking);
  if (opts.tools === null) {
    return {
      reasoning: split.reasoning,
      content: split.content,
      toolCalls: [],
      toolCallsFinish: false,
    };
  }
  const answer = readTools(split.content, opts);
  const toolCalls: ToolCall[] = answer.calls.map((c) => ({
    id: newId(),
    name: c.name,
    arguments: c.arguments,
  }));
  return {
    reasoning: split.reasoning,
    // serving.py writes `content or ""` for required and named choices.
    content: opts.toolChoice === 'auto' ? answer.content : (answer.content ?? ''),
    toolCalls,
    toolCallsFinish: finishesWithToolCalls(opts, toolCalls.length),
  };
}

export { ChatStreamParser } from './chat-stream.js';
