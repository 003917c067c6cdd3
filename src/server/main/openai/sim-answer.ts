/**
 * The text the simulator answers a chat choice with first, so that an RL environment's own
 * parsing and reward code runs end to end against it (as llm-d-inference-sim's echo mode and
 * schema-fitting tool calls allow): the served model's reasoning span and tool calls in that
 * model's own output format, with arguments that satisfy the function's JSON schema. The API
 * server tokenizes the text; the simulator emits those tokens, then EOS or random tokens.
 *
 * The layouts are what each model's chat template renders for an assistant turn after the
 * generation prompt, since that is what the model learned to write:
 * - Qwen3 (tokenizer_config.json of Qwen3): `<think>\n{reasoning}\n</think>\n\n{content}`, and
 *   tool calls `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` joined by "\n"
 *   (JSON as Python's json.dumps writes it). With enable_thinking false the template puts the
 *   empty think block in the prompt itself, so the answer has none.
 * - GLM-4.5 (tokenizers/glm-4.5-air): `\n<think>{reasoning}</think>`, then "\n" + content, and
 *   per call `\n<tool_call>{name}` + (`\n<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>`)*
 *   + `\n</tool_call>`, string values as they are, others as JSON (the template's `tojson`). With
 *   thinking off the prompt ends `<think></think>`, after which content still starts with "\n".
 *   vLLM's glm4_moe_tool_parser strips each value and reads it back as JSON unless the
 *   property's schema type is "string"; the words schema-instance.ts writes read back as text.
 * - tool_choice "required": what vLLM's guided decoding makes the model write, a JSON array
 *   `[{"name": ..., "parameters": {...}}]`; a named function: the arguments object alone. Not
 *   for glm45, whose parser vLLM does not guide for these: its own markup, as for "auto".
 */
import { combine, seedKey, unitFloat } from '../../../wire/hash.js';
import { sampleSchemaInstance } from './schema-instance.js';

export interface SimAnswerInput {
  /** The served model's formats: reasoning span style and tool-call style; null: none. */
  format: { reasoning: 'qwen3' | 'glm45' | null; tools: 'hermes' | 'glm45' | null };
  /** Thinking on (chat_template_kwargs.enable_thinking, default true) and the model has a reasoning format. */
  thinking: boolean;
  /** The request's `tools` as given (OpenAI shape: {type: "function", function: {name, description?, parameters?}}), or null. */
  tools: readonly Record<string, unknown>[] | null;
  toolChoice: 'none' | 'auto' | 'required' | { name: string };
  /** The choice's seed (a 53-bit safe integer). */
  seed: number;
  /** 'echo': answer with `echoText` and end. 'random': formats as below, else nothing scripted. */
  mode: 'random' | 'echo';
  /** The last user message's text (for echo mode), or null. */
  echoText: string | null;
  /** Share of tool_choice "auto" answers (when tools are offered and format.tools is set) that are tool calls, 0..1. */
  toolCallShare: number;
}

export interface SimAnswer {
  /** The text the simulator emits first. */
  text: string;
  /** The answer ends after it (the simulator emits EOS next); false: random tokens follow. */
  ends: boolean;
}

interface OfferedFunction {
  name: string;
  parameters: unknown;
}

/** Chance that a tool-call answer calls two functions rather than one. */
const SECOND_CALL = { required: 0.3, auto: 0.2 } as const;

/** Reasoning is made of these: plain sentences that tokenize as ordinary text. */
const REASONING_SENTENCES = [
  'The user wants to know about this.',
  'Let me think about what is being asked.',
  'First I should check the details of the request.',
  'There may be more than one way to do this.',
  'I need to find the right answer step by step.',
  'Maybe a tool can help with this part.',
  'That seems to be the best way forward.',
  'Let me look at the question again.',
  'The answer should be short and clear.',
  'I think I have enough to reply now.',
  'Some of the numbers need a second look.',
  'So the next step is easy to see.',
  'This part of the task is simple.',
  'Wait, I should make sure that is right.',
  'Yes, that fits what the user asked for.',
  'Now I can write the answer.',
];

/** null: nothing scripted (the simulator answers with random tokens as today). */
export function composeSimAnswer(input: SimAnswerInput): SimAnswer | null {
  if (input.mode === 'echo') return { text: input.echoText ?? '', ends: true };
  const rand = seededRandom(input.seed);
  const functions = offeredFunctions(input.tools);
  const choice = input.toolChoice;
  // Drawn first, so the share of calls does not depend on anything drawn after.
  const autoCall =
    choice === 'auto' &&
    input.format.tools !== null &&
    functions.length > 0 &&
    rand() < clampShare(input.toolCallShare);
  const reasoningFormat = input.thinking ? input.format.reasoning : null;
  const span = reasoningFormat === null ? '' : reasoningSpan(reasoningFormat, reasoning(rand));
  // What the template puts between `</think>` (the model's or the prompt's) and the content.
  const sep = input.format.reasoning === 'glm45' ? '\n' : '';
  // vLLM does not guide a glm45 model's "required" or named answer (its parser declares no
  // support): the model writes its own markup, which the parser reads as for "auto".
  const guided = input.format.tools !== 'glm45';
  let body: string | null = null;
  if (typeof choice === 'object') {
    const f = functions.find((g) => g.name === choice.name);
    // vLLM rejects a name that is not offered before this point; no schema here gives `{}`.
    const args = sampleSchemaInstance(f?.parameters, rand);
    body = guided ? pyJson(args) : glmCalls([{ name: choice.name, args }]);
  } else if (choice === 'required' && functions.length > 0) {
    const calls = drawCalls(rand, functions, SECOND_CALL.required);
    body = guided
      ? pyJson(calls.map((c) => ({ name: c.name, parameters: c.args })))
      : glmCalls(calls);
  } else if (autoCall) {
    const calls = drawCalls(rand, functions, SECOND_CALL.auto);
    body = input.format.tools === 'glm45' ? glmCalls(calls) : hermesCalls(calls);
  }
  if (body !== null) return { text: span + sep + body, ends: true };
  // No call drawn, "none", or "required" with nothing callable (the request parser refuses that
  // without tools): the span alone, the content left to random tokens.
  return span === '' ? null : { text: span + sep, ends: false };
}

function clampShare(share: number): number {
  return Number.isFinite(share) ? Math.min(1, Math.max(0, share)) : 0;
}

/** The functions of `tools` that have a name; odd entries are skipped rather than refused. */
function offeredFunctions(tools: SimAnswerInput['tools']): OfferedFunction[] {
  const out: OfferedFunction[] = [];
  for (const tool of tools ?? []) {
    if (tool === null || typeof tool !== 'object') continue;
    const f = isRecord(tool.function) ? tool.function : tool;
    if (typeof f.name !== 'string' || f.name === '') continue;
    out.push({ name: f.name, parameters: f.parameters });
  }
  return out;
}

interface Call {
  name: string;
  args: unknown;
}

function drawCalls(rand: () => number, functions: OfferedFunction[], second: number): Call[] {
  const count = rand() < second ? 2 : 1;
  const calls: Call[] = [];
  for (let i = 0; i < count; i++) {
    const f = functions[Math.min(functions.length - 1, Math.floor(rand() * functions.length))]!;
    calls.push({ name: f.name, args: sampleSchemaInstance(f.parameters, rand) });
  }
  return calls;
}

function reasoningSpan(format: 'qwen3' | 'glm45', text: string): string {
  return format === 'qwen3' ? `<think>\n${text}\n</think>\n\n` : `\n<think>${text}</think>`;
}

/** Two to four sentences, none twice. */
function reasoning(rand: () => number): string {
  const left = [...REASONING_SENTENCES];
  const out: string[] = [];
  const n = 2 + Math.floor(rand() * 3);
  for (let i = 0; i < n; i++) out.push(left.splice(Math.floor(rand() * left.length), 1)[0]!);
  return out.join(' ');
}

function hermesCalls(calls: readonly Call[]): string {
  return calls
    .map((c) => `<tool_call>\n${pyJson({ name: c.name, arguments: c.args })}\n</tool_call>`)
    .join('\n');
}

/**
 * GLM-4.5's calls, joined by "\n": the template starts each with "\n", the first one's being the
 * separator after `</think>`.
 */
function glmCalls(calls: readonly Call[]): string {
  return calls
    .map((c) => {
      let out = `<tool_call>${c.name}`;
      const args = isRecord(c.args) ? c.args : {};
      for (const [key, value] of Object.entries(args)) {
        const text = typeof value === 'string' ? value : pyJson(value);
        out += `\n<arg_key>${key}</arg_key>\n<arg_value>${text}</arg_value>`;
      }
      return `${out}\n</tool_call>`;
    })
    .join('\n');
}

/**
 * JSON as Python's json.dumps writes it by default (", " and ": " between items, as the models
 * saw in training and as Qwen3's and GLM's templates render tool calls with `tojson`); non-ASCII
 * stays as it is (transformers' tojson uses ensure_ascii=False).
 */
function pyJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(pyJson).join(', ')}]`;
  if (isRecord(v)) {
    return `{${Object.entries(v)
      .map(([k, x]) => `${JSON.stringify(k)}: ${pyJson(x)}`)
      .join(', ')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Uniform draws in [0, 1) from the seed, hashed as the simulator hashes everything it draws. */
function seededRandom(seed: number): () => number {
  const key = seedKey(Number.isFinite(seed) ? Math.trunc(seed) : 0);
  let n = 0;
  return () => unitFloat(combine(key, n++));
}
