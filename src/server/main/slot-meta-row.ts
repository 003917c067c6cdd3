/**
 * The slot meta row of one choice of a request (src/server/cross-thread/slot-meta.ts), as both output
 * paths write it when the choice is opened: what the output side needs to know about a sequence.
 */
import type { ResponseForm } from '../../protocol/generate-response.js';
import { ResponseFormCode, type SlotMetaFields } from '../cross-thread/slot-meta.js';
import type { RequestRecord } from './request-record.js';

const FORM_CODE: Readonly<Record<ResponseForm, ResponseFormCode>> = {
  packed: ResponseFormCode.Packed,
  legacy: ResponseFormCode.Legacy,
  msgpack: ResponseFormCode.Msgpack,
  completion: ResponseFormCode.Completion,
  chat: ResponseFormCode.Chat,
};

export function slotMetaRow(record: RequestRecord, index: number): SlotMetaFields {
  const { request } = record;
  const p = request.params;
  const openai = request.openai;
  return {
    stream: request.stream,
    logprobs: p.logprobs,
    samplingMask: p.returnSamplingMask,
    routedExperts: p.returnRoutedExperts,
    includeStopStrInOutput: request.includeStopStrInOutput,
    includeUsage: request.includeUsage,
    continuousUsageStats: request.continuousUsageStats,
    form: FORM_CODE[record.form],
    promptLen:
      openai === undefined
        ? request.promptTokenIds.length
        : openai.prompts[Math.floor(index / openai.n)]!.length,
    routedExpertsPromptStart: p.routedExpertsPromptStart,
    maxTokens: p.maxTokens,
    minTokens: p.minTokens,
    stop: request.stop,
    choiceIndex: index,
    choiceCount: record.group.size,
    text: openai !== undefined,
    // Candidates kept per position: the OpenAI answer's k, or a legacy generate answer's k (its
    // top_logprobs lists); -1 where the answer has no candidate lists.
    topLogprobs:
      openai !== undefined
        ? openai.topLogprobs
        : record.form === 'legacy' && p.logprobs
          ? p.topLogprobs
          : -1,
    returnTokenIds: openai?.returnTokenIds ?? false,
    keepSpecialTokens: openai !== undefined && !request.skipSpecialTokens,
  };
}
