/**
 * A merge thread's side of the P/D merge (merge-messages.ts has the exchange): the requests whose
 * prefill answer this thread decoded, keyed by the pool's id, each until its answer is written
 * (merge) or its stream is over (chunk, end), or the main thread gives it up (drop). No thread of
 * its own: workers/router-merge.ts runs one per merge thread, the tests call it directly.
 *
 * A task that fails throws the request's coded error and forgets the request: the contract's 502s
 * (RS_ERR_ROUTER_UPSTREAM for an answer that does not decode, RS_ERR_ROUTER_SHORT_ROWS for rows
 * that do not meet), RS_ERR_ROUTER_MERGE_WORKER for an id this thread does not hold (the thread
 * that held it died and this one replaced it).
 */
import { decodeGenerateBody, type GenerateResult } from '../client/decode.js';
import { decodePromptLogprobs } from '../client/prompt-logprobs.js';
import { RS_ERR_ROUTER_UPSTREAM, toRingserveError } from '../errors.js';
import { GenerateResponseEncoder } from '../protocol/generate-response.js';
import { ChurnMap } from '../wire/churn-map.js';
import { RS_ERR_ROUTER_MERGE_WORKER } from './errors.js';
import { mergeAnswers } from './merge.js';
import { KvOutcome, type MergeReply, type MergeSpec, type MergeTask } from './merge-messages.js';
import { StreamMerger } from './stream-merge.js';

interface Held {
  spec: MergeSpec;
  prefill: GenerateResult;
  /** A streamed request's merger, made with the prefill answer; null for a non-streamed one. */
  stream: StreamMerger | null;
}

const reply = (out: Uint8Array | null, done: boolean, handle: unknown, kv: KvOutcome) => ({
  out: out === null || out.length === 0 ? null : out,
  done,
  handle,
  kv,
});

export class MergeTable {
  readonly #held = new ChurnMap<number, Held>();
  readonly #encoder = new GenerateResponseEncoder();

  /** Requests held (tests: none is left behind). */
  get size(): number {
    return this.#held.size;
  }

  /** One task of a request; throws its coded error, and the request is then forgotten. */
  run(task: MergeTask): MergeReply {
    if (task.op === 'drop') {
      this.#held.delete(task.id);
      return reply(null, true, null, KvOutcome.None);
    }
    if (task.op === 'prefill') return this.#prefill(task);
    const held = this.#held.get(task.id);
    if (held === undefined) {
      throw new RS_ERR_ROUTER_MERGE_WORKER(
        `request ${task.id} is not held here: the thread that held it exited and was replaced`,
      );
    }
    try {
      if (task.op === 'merge') return this.#merge(task, held);
      if (task.op === 'chunk') return this.#chunk(task, held);
      return this.#end(task, held);
    } catch (error) {
      this.#held.delete(task.id);
      throw error;
    }
  }

  #prefill(task: MergeTask): MergeReply {
    const spec = task.spec as MergeSpec;
    const prefill = decodeAnswer('prefill', task);
    const stream = spec.stream
      ? new StreamMerger(
          spec.requestId,
          spec.form === 'legacy',
          prefill.choices[0]?.routedExperts ?? null,
          prefill.usage?.promptTokens ?? 0,
          prefill.usage?.cachedTokens ?? null,
        )
      : null;
    this.#held.set(task.id, { spec, prefill, stream });
    return reply(null, false, prefill.kvTransferParams, KvOutcome.None);
  }

  /** As pd-proxy.ts did it on the main thread before (issue 32): merge, prompt logprobs, encode. */
  #merge(task: MergeTask, held: Held): MergeReply {
    this.#held.delete(task.id);
    const { spec, prefill } = held;
    const decode = decodeAnswer('decode', task);
    const merged = mergeAnswers(prefill, decode, spec.requestId, spec.clientKv);
    if (spec.promptLogprobsK >= 0) {
      try {
        merged.promptLogprobs = decodePromptLogprobs(
          prefill.promptLogprobs,
          spec.promptTokenIds ?? [],
          spec.promptLogprobsK,
        );
      } catch (error) {
        throw new RS_ERR_ROUTER_UPSTREAM('prefill', '', (error as Error).message);
      }
    }
    return reply(this.#encoder.encode(merged, spec.form), true, null, kvOutcome(prefill, decode));
  }

  #chunk(task: MergeTask, held: Held): MergeReply {
    const merger = held.stream as StreamMerger;
    const out = merger.push(task.bytes as Uint8Array);
    if (merger.done) this.#held.delete(task.id);
    return reply(out, merger.done, null, KvOutcome.None);
  }

  /** The decode stream ended without [DONE]: the client's stream ends with an error event. */
  #end(task: MergeTask, held: Held): MergeReply {
    this.#held.delete(task.id);
    const merger = held.stream as StreamMerger;
    const cut = new RS_ERR_ROUTER_UPSTREAM(
      'decode',
      task.upstream,
      'its stream ended before [DONE]',
    );
    return reply(merger.fail(cut), true, null, KvOutcome.None);
  }
}

function decodeAnswer(role: 'prefill' | 'decode', task: MergeTask): GenerateResult {
  try {
    return decodeGenerateBody(task.bytes as Uint8Array, task.contentType);
  } catch (error) {
    throw new RS_ERR_ROUTER_UPSTREAM(role, task.upstream, toRingserveError(error).message);
  }
}

/** A decode answer whose rows start before the prompt's last token recomputed the prompt. */
export function kvOutcome(prefill: GenerateResult, decode: GenerateResult): KvOutcome {
  const p = prefill.choices[0]?.routedExperts;
  const d = decode.choices[0]?.routedExperts;
  if (p === undefined || p === null || d === undefined || d === null) return KvOutcome.None;
  return d.start < p.start + p.shape[0] - 1 ? KvOutcome.Recomputed : KvOutcome.Imported;
}
