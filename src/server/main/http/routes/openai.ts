/**
 * POST /v1/completions and POST /v1/chat/completions (vLLM's OpenAI-compatible routes): parse
 * (every 400, naming the field), check the model (404 in OpenAI's error shape), tokenize (on the
 * tokenizer thread), then the same path as the generate route: the coordinator fans out n, the
 * output worker detokenizes and streams, a packer writes the answer. Chat answers are split by the
 * parsers of docs/chat-parsing.md; with the simulator each choice carries its scripted answer.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { RingserveConfig } from '../../../../config.js';
import { RS_ERR_OPENAI_INLINE_OUTPUT } from '../../../../errors.js';
import type {
  ChatParseOptions,
  ChatToolSpec,
} from '../../../../protocol/chat-parse/chat-output.js';
import { DEADLINE_HEADER } from '../../../../protocol/deadline-header.js';
import { fail } from '../../../../protocol/fields.js';
import {
  type ChatBody,
  type ChatMessage,
  parseChatBody,
} from '../../../../protocol/openai-chat-request.js';
import { parseCompletionBody } from '../../../../protocol/openai-completion-request.js';
import {
  type OpenAiRequestOptions,
  type ScriptedAnswer,
  toGenerateRequest,
} from '../../../../protocol/openai-request.js';
import { childSeed } from '../../../../wire/child-seed.js';
import type { PromptTokenizer } from '../../openai/prompt-tokenizer.js';
import { composeSimAnswer } from '../../openai/sim-answer.js';
import type { ReplySink } from '../../reply-sink.js';
import type { RequestCoordinator } from '../../request-coordinator.js';
import type { ServedModels } from '../../served-models.js';
import { checkVllmSampling, type MaskCapability } from '../../vllm-sampling.js';
import { DP_RANK_HEADER, dataParallelRank } from '../data-parallel-rank.js';
import { requestDeadline } from '../deadline.js';
import { AbortingReply, type FailureInjector } from '../failure-injection.js';
import { HttpReply } from '../http-reply.js';

export interface OpenAiDeps {
  config: RingserveConfig;
  coordinator: RequestCoordinator;
  openaiOptions: OpenAiRequestOptions;
  tokenizer: PromptTokenizer;
  /** Injected failures for clients' tests (failure-injection.ts); absent: none. */
  failures?: FailureInjector;
  /** With --engine vllm: whether the engine returns sampling masks (vllm-sampling.ts). */
  engine?: MaskCapability;
  /** What `model` may name (the base model, a loaded LoRA adapter). */
  models: ServedModels;
}

export function registerOpenAiRoutes(app: FastifyInstance, deps: OpenAiDeps): void {
  const { config, coordinator, tokenizer } = deps;
  const opts: OpenAiRequestOptions = {
    ...deps.openaiOptions,
    priorityScheduling: config.schedulingPolicy === 'priority',
  };
  const checkOutput = (route: string): void => {
    if (config.outputProcessing === 'inline') throw new RS_ERR_OPENAI_INLINE_OUTPUT(route);
  };
  /** The reply sink, after any injected failure (which bad input never reaches: it is a 400 first). */
  const sinkFor = (request: FastifyRequest, reply: FastifyReply): ReplySink => {
    const injected = deps.failures?.active ? deps.failures.check(request, reply) : null;
    const sink = new HttpReply(reply, config.maxUnreadBytes);
    return injected === 'abort' ? new AbortingReply(sink, reply) : sink;
  };

  app.post('/v1/completions', async (request, reply) => {
    checkOutput('/v1/completions');
    const body = parseCompletionBody(request.body, opts);
    const deadline = requestDeadline(request.headers[DEADLINE_HEADER], config.requestTimeout);
    const rank = dataParallelRank(request.headers[DP_RANK_HEADER], config.dataParallelSize);
    const loraId = deps.models.loraId(body.common.model);
    const { prompt } = body;
    const prompts =
      prompt.kind === 'ids'
        ? prompt.ids
        : await Promise.all(prompt.texts.map((t) => tokenizer.encode(t, body.addSpecialTokens)));
    let echo: string[] | null = null;
    if (body.echo) {
      echo =
        prompt.kind === 'text'
          ? prompt.texts
          : await Promise.all(prompt.ids.map((ids) => tokenizer.decode(ids)));
    }
    const sink = sinkFor(request, reply);
    const parsed = toGenerateRequest(
      body.common,
      { kind: 'completion', prompts, echo },
      'prompt',
      opts,
    );
    parsed.loraId = loraId;
    checkVllmSampling(config, parsed.params, '', deps.engine);
    coordinator.submit(parsed, sink, 'completion', headerRequestId(request), deadline, rank);
    return reply;
  });

  app.post('/v1/chat/completions', async (request, reply) => {
    checkOutput('/v1/chat/completions');
    const body = parseChatBody(request.body, opts);
    const deadline = requestDeadline(request.headers[DEADLINE_HEADER], config.requestTimeout);
    const rank = dataParallelRank(request.headers[DP_RANK_HEADER], config.dataParallelSize);
    const loraId = deps.models.loraId(body.common.model);
    const chatParse = chatParseOptions(config, body);
    const ids = await tokenizer.encodeChat(body.messages, {
      tools: body.tools,
      addGenerationPrompt: body.addGenerationPrompt,
      continueFinalMessage: body.continueFinalMessage,
      chatTemplateKwargs: body.chatTemplateKwargs,
      addSpecialTokens: body.addSpecialTokens,
    });
    const parsed = toGenerateRequest(
      body.common,
      { kind: 'chat', prompts: [ids], echo: null },
      'messages',
      opts,
    );
    parsed.loraId = loraId;
    checkVllmSampling(config, parsed.params, '', deps.engine);
    const openai = parsed.openai!;
    openai.chatParse = chatParse;
    if (config.engine === 'sim') {
      openai.scripts = await simScripts(config, body, parsed.params.seed, parsed.n, tokenizer);
    }
    const sink = sinkFor(request, reply);
    coordinator.submit(parsed, sink, 'chat', headerRequestId(request), deadline, rank);
    return reply;
  });
}

/**
 * How a chat answer's text is split, as vLLM's serving_chat decides it: the reasoning parser when
 * one is set; tool calls for "auto" only with --enable-auto-tool-choice (else a 400, as vLLM), and
 * always for "required" and a named function (whose output vLLM parses as JSON). null: all content.
 */
function chatParseOptions(config: RingserveConfig, body: ChatBody): ChatParseOptions | null {
  const choice = body.toolChoice;
  if (choice === 'auto' && !config.enableAutoToolChoice) {
    fail(
      'tool_choice',
      '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    );
  }
  const reasoning = config.reasoningParser === 'none' ? null : config.reasoningParser;
  const serverTools = config.toolCallParser === 'none' ? null : config.toolCallParser;
  const tools = choice === 'none' ? null : (serverTools ?? 'hermes');
  if (reasoning === null && tools === null) return null;
  return {
    reasoning,
    thinking: body.thinking,
    tools,
    toolChoice: choice === 'none' ? 'auto' : choice,
    ...(body.tools === null ? {} : { requestTools: body.tools as unknown as ChatToolSpec[] }),
  };
}

/**
 * With the simulator: per choice, the tokens it answers with first (sim-answer.ts): the model's
 * reasoning span and tool calls in its own formats, or in echo mode the last user message. Choice
 * i is composed from the seed the engine runs it with (childSeed), so a seeded request answers the
 * same every time; an unseeded one gets a drawn seed here.
 */
async function simScripts(
  config: RingserveConfig,
  body: ChatBody,
  seed: number | null,
  n: number,
  tokenizer: PromptTokenizer,
): Promise<(ScriptedAnswer | null)[] | null> {
  const base = seed ?? Math.floor(Math.random() * Number.MAX_SAFE_INTEGER);
  const echoText = config.simMode === 'echo' ? lastUserText(body.messages) : null;
  const scripts: (ScriptedAnswer | null)[] = new Array(n).fill(null);
  // Choices that answer the same text (echo mode: all of them) share one trip to the tokenizer.
  const encoded = new Map<string, Promise<Int32Array>>();
  let any = false;
  for (let i = 0; i < n; i++) {
    const answer = composeSimAnswer({
      format: {
        reasoning: config.reasoningParser === 'none' ? null : config.reasoningParser,
        tools: config.toolCallParser === 'none' ? null : config.toolCallParser,
      },
      thinking: body.thinking && config.reasoningParser !== 'none',
      tools: body.tools,
      toolChoice: body.toolChoice,
      seed: childSeed(base, i)!,
      mode: config.simMode,
      echoText,
      toolCallShare: config.enableAutoToolChoice ? config.simToolCallShare : 0,
    });
    if (answer === null) continue;
    let tokens = encoded.get(answer.text);
    if (tokens === undefined) {
      tokens = tokenizer.encode(answer.text, false);
      encoded.set(answer.text, tokens);
    }
    scripts[i] = { tokens: await tokens, ends: answer.ends };
    any = true;
  }
  return any ? scripts : null;
}

/** The text of the last user message (text parts joined), or '' when there is none. */
function lastUserText(messages: readonly ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]!.role === 'user') return messages[i]!.content ?? '';
  }
  return '';
}

function headerRequestId(request: FastifyRequest): string | undefined {
  const header = request.headers['x-request-id'];
  return typeof header === 'string' && header !== '' ? header : undefined;
}
