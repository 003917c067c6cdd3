/**
 * POST /inference/v1/generate: parse (every 400, naming the field), resolve the model (the base
 * model or a LoRA adapter; else 404), pick the answer's form, its deadline (deadline.ts) and its
 * data-parallel rank (data-parallel-rank.ts), hand the request to the coordinator. The answer
 * comes later, as one finished Buffer or an SSE stream.
 */
import type { FastifyInstance } from 'fastify';
import type { RingserveConfig } from '../../../../config.js';
import { DEADLINE_HEADER } from '../../../../protocol/deadline-header.js';
import {
  type GenerateRequestOptions,
  parseGenerateRequest,
} from '../../../../protocol/generate-request.js';
import type { RequestCoordinator } from '../../request-coordinator.js';
import type { ServedModels } from '../../served-models.js';
import { checkVllmSampling, type MaskCapability } from '../../vllm-sampling.js';
import { DP_RANK_HEADER, dataParallelRank } from '../data-parallel-rank.js';
import { requestDeadline } from '../deadline.js';
import { AbortingReply, type FailureInjector } from '../failure-injection.js';
import { HttpReply } from '../http-reply.js';
import { responseForm } from '../negotiate.js';

/** The vLLM generate route's path. */
export const GENERATE_PATH = '/inference/v1/generate';

export interface GenerateDeps {
  config: RingserveConfig;
  coordinator: RequestCoordinator;
  requestOptions: GenerateRequestOptions;
  /** Injected failures for clients' tests (failure-injection.ts); absent: none. */
  failures?: FailureInjector;
  /** With --engine vllm: whether the engine returns sampling masks (vllm-sampling.ts). */
  engine?: MaskCapability;
  /** What `model` may name (the base model, a loaded LoRA adapter). */
  models: ServedModels;
}

export function registerGenerateRoute(app: FastifyInstance, deps: GenerateDeps): void {
  const { config, coordinator } = deps;
  const requestOptions: GenerateRequestOptions = {
    ...deps.requestOptions,
    priorityScheduling: config.schedulingPolicy === 'priority',
  };
  // Not async: the answer is sent later through `reply`, and a handler that returned it would have
  // fastify wait on it as a thenable (an end-of-stream watcher and its listeners on every response).
  app.post(GENERATE_PATH, (request, reply) => {
    const parsed = parseGenerateRequest(request.body, requestOptions);
    const deadline = requestDeadline(request.headers[DEADLINE_HEADER], config.requestTimeout);
    const rank = dataParallelRank(request.headers[DP_RANK_HEADER], config.dataParallelSize);
    parsed.loraId = deps.models.loraId(parsed.model);
    checkVllmSampling(config, parsed.params, 'sampling_params.', deps.engine);
    const injected = deps.failures?.active ? deps.failures.check(request, reply) : null;
    const form = responseForm(request.headers.accept, parsed.packed, config.generateFormat);
    // Only the legacy form lists candidates beside the sampled token; the packed forms carry the
    // sampled token's logprob alone, so the engine is not asked for the k best.
    if (form !== 'legacy') parsed.params.topLogprobs = 0;
    const header = request.headers['x-request-id'];
    const headerId = typeof header === 'string' && header !== '' ? header : undefined;
    const sink = new HttpReply(reply, config.maxUnreadBytes);
    const answer = injected === 'abort' ? new AbortingReply(sink, reply) : sink;
    coordinator.submit(parsed, answer, form, headerId, deadline, rank);
  });
}
