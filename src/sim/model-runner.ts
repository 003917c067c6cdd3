import type { StepOutputs } from '../engine/step-outputs.js';
import { combine, UINT32_TO_UNIT } from '../wire/hash.js';
import { FinishReason, type SamplingParams, type StepTiming } from '../wire/types.js';
import type { ResolvedEngineConfig } from './engine-config.js';
import type { KvBlockPool } from './kv-block-pool.js';
import { PositionShape, type SimModel } from './model.js';
import { PromptLogprobs } from './prompt-logprobs.js';
import type { ExpertRouter } from './routing.js';
import { LOGPROB_FLOOR, type Sampler } from './sampler.js';
import type { Scheduler } from './scheduler.js';
import type { Sequence } from './sequence.js';

/** Re-exported from the sampler, which floors the top candidates' logprobs with it too. */
export { LOGPROB_FLOOR };

/** Counters the runner feeds (EngineStats reads them). */
export interface RunnerCounters {
  promptTokens: number;
  generationTokens: number;
}

/**
 * Executes one scheduled batch: forwards each request's scheduled tokens (routing rows for the
 * forwarded positions and for any prefix-cache hit before them, prompt logprobs for the prompt
 * positions they cover (prompt-logprobs.ts), prefix-cache registration of the blocks they fill)
 * and, for a request whose
 * every known token is now computed, samples the next token, applies the stop rules, and writes
 * one output row. Finished requests are collected in `finished` for the engine to free.
 */
export class ModelRunner {
  readonly finished: Sequence[] = [];
  finishedCount = 0;
  readonly #cfg: ResolvedEngineConfig;
  readonly #model: SimModel;
  readonly #router: ExpertRouter;
  readonly #sampler: Sampler;
  readonly #pool: KvBlockPool;
  readonly #counters: RunnerCounters;
  readonly #shape = new PositionShape();
  readonly #prompt: PromptLogprobs;

  constructor(
    cfg: ResolvedEngineConfig,
    model: SimModel,
    router: ExpertRouter,
    sampler: Sampler,
    pool: KvBlockPool,
    counters: RunnerCounters,
  ) {
    this.#cfg = cfg;
    this.#model = model;
    this.#router = router;
    this.#sampler = sampler;
    this.#pool = pool;
    this.#counters = counters;
    this.#prompt = new PromptLogprobs(model, sampler.candidates);
  }

  run(scheduler: Scheduler, out: StepOutputs, timing: StepTiming): void {
    this.finishedCount = 0;
    for (let i = 0; i < scheduler.batchSize; i++) {
      const seq = scheduler.batch[i] as Sequence;
      const numNew = scheduler.batchTokens[i] as number;
      const row = this.#forward(seq, numNew, out);
      timing.totalContext += seq.numComputed;
      if (seq.numComputed < seq.numTokens) {
        timing.prefillTokens += numNew;
        continue;
      }
      if (numNew === 1 && seq.prefillDone) timing.decodeSeqs++;
      else timing.prefillTokens += numNew;
      if (!seq.prefillDone) {
        seq.prefillDone = true;
        this.#counters.promptTokens += seq.numPromptTokens;
      }
      this.#sampleNext(seq, row, out);
      timing.sampledSeqs++;
      timing.generatedTokens++;
    }
  }

  /** Forwards tokens [numComputed, numComputed + numNew); returns its output row or -1. */
  #forward(seq: Sequence, numNew: number, out: StepOutputs): number {
    const start = seq.numComputed;
    const end = start + numNew;
    const p = seq.params;
    let row = -1;
    if (p.returnRoutedExperts && this.#router.rowWidth > 0) {
      // From the first position not yet emitted, not from `start`: positions served from the
      // prefix cache were forwarded by an earlier request and their rows are part of the
      // sequence (a real engine keeps them with the KV blocks; here they are a pure function of
      // weights, token and position, so they are recomputed).
      const from = Math.max(seq.routingEmittedTo, p.routedExpertsPromptStart);
      if (end > from) {
        row = out.addRow(seq.server, seq.slot, this.#model.weightVersion);
        const rows = end - from;
        let at = out.reserveRoutingRows(rows);
        const width = this.#router.rowWidth;
        for (let pos = from; pos < end; pos++) {
          this.#router.writeRow(seq.tokens[pos] as number, pos, out.routing, at);
          at += width;
        }
        out.routingRows[row] = rows;
        out.routingFirstPos[row] = from;
        out.routingRowCount += rows;
        seq.routingEmittedTo = end;
      }
    }
    // Into the routing rows' output row: one output per sequence per step.
    if (p.promptLogprobs >= 0) row = this.#prompt.emit(seq, end, row, out);
    seq.numComputed = end;
    if (this.#cfg.enablePrefixCaching) this.#registerFullBlocks(seq);
    if (row >= 0) out.numCachedTokens[row] = seq.numCachedTokens;
    return row;
  }

  /** Offers blocks that just became full to the prefix cache. */
  #registerFullBlocks(seq: Sequence): void {
    const B = this.#cfg.blockSize;
    const full = Math.floor(seq.numComputed / B);
    if (full <= seq.numRegisteredBlocks) return;
    seq.hashBlocksUpTo(full, B);
    for (let b = seq.numRegisteredBlocks; b < full; b++) {
      this.#pool.cache(
        seq.blocks[b] as number,
        seq.blockHashHi[b] as number,
        seq.blockHashLo[b] as number,
      );
    }
    seq.numRegisteredBlocks = full;
  }

  #sampleNext(seq: Sequence, existingRow: number, out: StepOutputs): void {
    const p = seq.params;
    const model = this.#model;
    const sampler = this.#sampler;
    const position = seq.numTokens;
    const outputIndex = position - seq.numPromptTokens;
    model.shapeAt(seq.contextHash, position, this.#shape);
    sampler.eosLogit = model.eosLogit(outputIndex, seq.targetLength, p.ignoreEos);
    // The draw depends on (request seed, position) only: batch- and chunking-invariant. Written
    // out rather than through unitFloat(): a double returned from a call V8 does not inline is
    // boxed, and this runs once per token.
    sampler.uniform = (combine(seq.seedKey, position) >>> 0) * UINT32_TO_UNIT;
    sampler.forced = this.#forcedToken(seq, outputIndex);
    sampler.sample(this.#shape, p, seq.counts, outputIndex < p.minTokens);
    const token = sampler.token;
    const row =
      existingRow >= 0 ? existingRow : out.addRow(seq.server, seq.slot, model.weightVersion);
    out.token[row] = token;
    out.logprob[row] = Math.max(sampler.logprobOut[0] as number, LOGPROB_FLOOR);
    // Written with every token, as the logprob is: it costs the sampler nothing.
    out.rank[row] = sampler.rank;
    out.numCachedTokens[row] = seq.numCachedTokens;
    this.#writeSets(p, row, out);
    seq.appendOutput(token);
    this.#counters.generationTokens++;
    const finish = this.#checkStop(seq, token, out, row);
    if (finish !== FinishReason.None) {
      out.finish[row] = finish;
      this.finished[this.finishedCount++] = seq;
    }
  }

  /**
   * The token a scripted answer (EngineRequest.script) puts at output index `outputIndex`, or -1
   * (sampled): the script's tokens, then, when it ends the answer, the model's EOS at the first
   * index where it may end (min_tokens holds it back as it holds back a sampled EOS; ignore_eos
   * lets sampling go on instead). The stop rules then apply to it as to any sampled token.
   */
  #forcedToken(seq: Sequence, outputIndex: number): number {
    const script = seq.script;
    if (script === null) return -1;
    if (outputIndex < script.length) return script[outputIndex] as number;
    const p = seq.params;
    if (!seq.scriptEnds || p.ignoreEos || outputIndex < p.minTokens) return -1;
    return this.#model.primaryEos;
  }

  /** The row's kept set (when asked and something truncated) and top candidates (when asked). */
  #writeSets(p: SamplingParams, row: number, out: StepOutputs): void {
    const sampler = this.#sampler;
    const kept = sampler.keptCount;
    if (p.returnSamplingMask && kept > 0) {
      const at = out.reserveMask(kept);
      sampler.writeKept(out.maskIds, at);
      out.maskStart[row] = at;
      out.maskCount[row] = kept;
      out.maskLength = at + kept;
    }
    const k = p.topLogprobs;
    if (p.logprobs && k > 0) {
      const at = out.reserveTop(k);
      const n = sampler.writeTop(out.topIds, out.topLogprobs, at, k);
      out.topStart[row] = at;
      out.topCount[row] = n;
      out.topLength = at + n;
    }
  }

  /** vLLM v1's check_stop order: length caps, then min_tokens, then EOS, then stop ids. */
  #checkStop(seq: Sequence, token: number, out: StepOutputs, row: number): FinishReason {
    const p = seq.params;
    const numOutput = seq.numOutputTokens;
    if (seq.numTokens >= this.#cfg.maxModelLen || numOutput >= p.maxTokens) {
      return FinishReason.Length;
    }
    if (numOutput < p.minTokens) return FinishReason.None;
    if (!p.ignoreEos && this.#model.isEos(token)) {
      // vLLM reports EOS with stop_reason null; generation_config's other EOS ids are stop ids.
      if (token !== this.#model.primaryEos) out.stopTokenId[row] = token;
      return FinishReason.Stop;
    }
    const stops = p.stopTokenIds;
    for (let i = 0; i < stops.length; i++) {
      if (stops[i] === token) {
        out.stopTokenId[row] = token;
        return FinishReason.Stop;
      }
    }
    return FinishReason.None;
  }
}
