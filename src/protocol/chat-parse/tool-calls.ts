import type { ChatParseOptions, ChatToolSpec } from './chat-output.js';
import { dumpsPython, loadsPython, type PyValue } from './python-json.js';
import { literalEvalPython } from './python-literal.js';
import { isBlank, pyStrip } from './python-str.js';
import { TOOL_CALL_END, TOOL_CALL_START } from './reasoning.js';

/**
 * One tool call region at a time, as vLLM's `hermes` and `glm45` tool parsers read it, and the
 * JSON of `tool_choice: "required"`. Everything here is a pure function of its text; the whole-
 * output rules (which text is content, when one bad call spoils the rest) are in chat-output.ts and
 * the streaming ones in chat-stream.ts.
 */

export interface ParsedCall {
  name: string;
  /** json.dumps of the arguments, Python style (or, for a named tool choice, the text itself). */
  arguments: string;
}

/**
 * What one region gives: a call; 'skip' (glm45 ignores a region it cannot split into a name and
 * arguments, and goes on); 'fail' (the parser raises, and vLLM returns the whole output as content
 * with no tool calls at all).
 */
export type RegionResult = ParsedCall | 'skip' | 'fail';

function asDict(v: PyValue | undefined): Map<string, PyValue> | undefined {
  return v instanceof Map ? v : undefined;
}

/**
 * A hermes region: `{"name": ..., "arguments": ...}` as JSON. A missing key, a non-object, a
 * non-string name or bad JSON raises in vLLM (KeyError, TypeError, pydantic's ValidationError).
 */
export function parseHermesRegion(body: string): RegionResult {
  const obj = asDict(loadsPython(body));
  if (obj === undefined) return 'fail';
  const name = obj.get('name');
  if (typeof name !== 'string' || !obj.has('arguments')) return 'fail';
  const args = dumpsPython(obj.get('arguments') as PyValue);
  return args === undefined ? 'fail' : { name, arguments: args };
}

// Python's `\s` in vLLM's patterns (the `regex` module on str): str.isspace() characters.
const PY_SPACE =
  '[\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]';
const GLM_ARG = new RegExp(
  `<arg_key>([\\s\\S]*?)</arg_key>${PY_SPACE}*<arg_value>([\\s\\S]*?)</arg_value>`,
  'g',
);

/** The `type` a tool's JSON schema gives one argument, as vLLM's `_is_string_type` looks it up. */
function isStringArg(
  tools: readonly ChatToolSpec[] | undefined,
  toolName: string,
  argName: string,
): boolean {
  if (tools === undefined) return false;
  for (const tool of tools) {
    if (tool.function.name !== toolName) continue;
    const props = field(tool.function.parameters, 'properties');
    return field(field(props, argName), 'type') === 'string';
  }
  return false;
}

function field(obj: unknown, key: string): unknown {
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) return undefined;
  return Object.hasOwn(obj, key) ? (obj as Record<string, unknown>)[key] : undefined;
}

/** vLLM's `_deserialize`: JSON, else a Python literal, else the text. */
function deserializeGlmValue(text: string): PyValue {
  const json = loadsPython(text);
  if (json !== undefined) return json;
  const literal = literalEvalPython(text);
  return literal === undefined ? text : literal;
}

/**
 * A glm45 region (`inner` is the text between the tags):
 * `name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n...`. The name runs to the first newline
 * (a region without one is skipped); string-typed arguments (per the request's tools) stay as
 * written, the rest are stripped and deserialized. json.dumps refusing a value raises.
 */
export function parseGlm45Region(
  inner: string,
  tools: readonly ChatToolSpec[] | undefined,
): RegionResult {
  const nl = inner.indexOf('\n');
  if (nl < 0) return 'skip';
  const name = pyStrip(inner.slice(0, nl));
  const args = new Map<string, PyValue>();
  GLM_ARG.lastIndex = 0;
  const rest = inner.slice(nl + 1);
  for (let m = GLM_ARG.exec(rest); m !== null; m = GLM_ARG.exec(rest)) {
    const key = pyStrip(m[1] as string);
    const raw = m[2] as string;
    args.set(key, isStringArg(tools, name, key) ? raw : deserializeGlmValue(pyStrip(raw)));
  }
  const dumped = dumpsPython(args);
  return dumped === undefined ? 'fail' : { name, arguments: dumped };
}

export interface ExtractedCalls {
  calls: ParsedCall[];
  /** Content when calls were found: the text before the first `<tool_call>` (null if blank). */
  content: string | null;
}

/**
 * The whole-output extraction of the hermes and glm45 parsers, or null where they find no call
 * (the caller then keeps its content as it was). Hermes reads every `<tool_call>` region, the last
 * one unterminated if the output ends inside it, and any bad region spoils all; glm45 reads only
 * terminated regions and skips the ones it cannot split.
 */
export function extractToolCalls(
  text: string,
  parser: 'hermes' | 'glm45',
  tools: readonly ChatToolSpec[] | undefined,
): ExtractedCalls | null {
  const first = text.indexOf(TOOL_CALL_START);
  if (first < 0) return null;
  const calls: ParsedCall[] = [];
  let pos = first;
  while (pos >= 0) {
    const bodyStart = pos + TOOL_CALL_START.length;
    const end = text.indexOf(TOOL_CALL_END, bodyStart);
    if (end < 0 && parser === 'glm45') break;
    const body = text.slice(bodyStart, end < 0 ? text.length : end);
    const r = parser === 'hermes' ? parseHermesRegion(body) : parseGlm45Region(body, tools);
    if (r === 'fail') return null;
    if (r !== 'skip') calls.push(r);
    if (end < 0) break;
    pos = text.indexOf(TOOL_CALL_START, end + TOOL_CALL_END.length);
  }
  if (calls.length === 0) return null;
  const before = text.slice(0, first);
  return { calls, content: isBlank(before) ? null : before };
}

/**
 * `tool_choice: "required"`: the guided output is a JSON array of `{"name", "parameters"}`, read
 * with pydantic as list[FunctionDefinition] (name a string, description a string or null,
 * parameters an object or null, other keys allowed). Anything else gives no calls at all.
 */
export function parseRequiredCalls(content: string): ParsedCall[] {
  const list = loadsPython(content);
  if (!Array.isArray(list)) return [];
  const calls: ParsedCall[] = [];
  for (const item of list) {
    const obj = asDict(item);
    if (obj === undefined) return [];
    const name = obj.get('name');
    const description = obj.get('description');
    const parameters = obj.get('parameters') ?? null;
    if (typeof name !== 'string') return [];
    if (description !== undefined && description !== null && typeof description !== 'string') {
      return [];
    }
    if (parameters !== null && !(parameters instanceof Map)) return [];
    const args = dumpsPython(parameters);
    if (args === undefined) return [];
    calls.push({ name, arguments: args });
  }
  return calls;
}

/**
 * How the tool-call part of one answer is read. 'markup': the parser's own format (auto; and glm45
 * for every choice). 'json-required' / 'json-named': hermes with a forced choice, where vLLM's
 * guided decoding made the output JSON.
 */
export type ToolMode = 'none' | 'markup' | 'json-required' | 'json-named';

export function toolModeOf(opts: ChatParseOptions): ToolMode {
  if (opts.tools === null) return 'none';
  if (opts.toolChoice === 'auto' || opts.tools === 'glm45') return 'markup';
  return opts.toolChoice === 'required' ? 'json-required' : 'json-named';
}

/** finish_reason "tool_calls" (serving.py): auto when it called, required always, named never. */
export function finishesWithToolCalls(opts: ChatParseOptions, calls: number): boolean {
  if (opts.tools === null) return false;
  if (opts.toolChoice === 'auto') return calls > 0;
  return opts.toolChoice === 'required';
}
