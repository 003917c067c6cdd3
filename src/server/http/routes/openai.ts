/**
 * POST /v1/completions and POST /v1/chat/completions (vLLM's OpenAI-compatible routes): parse
 * (every 400, naming the field), check the model (404 in OpenAI's error shape), tokenize (the
 * tokenizer's pool, off this thread for long prompts), then the same path as the generate route:
 * the coordinator fans out n, the output worker detokenizes and streams, a packer writes the answer.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { RingserveConfig } from '../../../config.js';
import { RS_ERR_OPENAI_INLINE_OUTPUT } from '../../../errors.js';
import { parseChatBody } from '../../../protocol/openai-chat-request.js';
import { parseCompletionBody } from '../../../protocol/openai-completion-request.js';
import { type OpenAiRequestOptions, toGenerateRequest } from '../../../protocol/openai-request.js';
import type { PromptTokenizer } from '../../openai/prompt-tokenizer.js';
import type { ReplySink } from '../../reply-sink.js';
import type { RequestCoordinator } from '../../request-coordinator.js';
import type { ServedModels } from '../../served-models.js';
import { checkVllmSampling, type MaskCapability } from '../../vllm-sampling.js';
import { DEADLINE_HEADER, requestDeadline } from '../deadline.js';
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
    coordinator.submit(parsed, sink, 'completion', headerRequestId(request), deadline);
    return reply;
  });

  app.post('/v1/chat/completions', async (request, reply) => {
    checkOutput('/v1/chat/completions');
    const body = parseChatBody(request.body, opts);
    const deadline = requestDeadline(request.headers[DEADLINE_HEADER], config.requestTimeout);
    const loraId = deps.models.loraId(body.common.model);
    const ids = await tokenizer.encodeChat(body.messages, {
      tools: body.tools,
      addGenerationPrompt: body.addGenerationPrompt,
      continueFinalMessage: body.continueFinalMessage,
      chatTemplateKwargs: body.chatTemplateKwargs,
      addSpecialTokens: body.addSpecialTokens,
    });
    const sink = sinkFor(request, reply);
    const parsed = toGenerateRequest(
      body.common,
      { kind: 'chat', prompts: [ids], echo: null },
      'messages',
      opts,
    );
    parsed.loraId = loraId;
    checkVllmSampling(config, parsed.params, '', deps.engine);
    coordinator.submit(parsed, sink, 'chat', headerRequestId(request), deadline);
    return reply;
  });
}

function headerRequestId(request: FastifyRequest): string | undefined {
  const header = request.headers['x-request-id'];
  return typeof header === 'string' && header !== '' ? header : undefined;
}
