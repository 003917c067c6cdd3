// The output worker's core, without the thread: reads STEP records (messages.ts) and scatters each
// output row into its request's columns, runs stop strings, and keeps each slot's lifecycle
// (SlotState in accumulators.ts). The worker loop (output-loop.ts) feeds it from the ring and turns
// its event lists into one message per pass; tests feed it hand-written records directly.
//
// A row counts only if its slot generation is the slot's current one in the slot meta: outputs of
// a request the main thread has already moved past (a restarted engine's or server's leftovers, a
// slot reused) are dropped without a handshake. A row of a generation the accumulators have not
// seen yet starts that request.

import type { ScatterMetrics } from '../../obs/request-recorder.js';
import type { TokenBytes } from '../../protocol/token-bytes.js';
import {
  type RegionViews,
  StepColumn,
  StepRecordView,
  stepRecordBytes,
} from '../../wire/messages.js';
import { FinishReason } from '../../wire/types.js';
import {
  type AccumulatorTable,
  AccWord,
  OutputError,
  SlotState,
  WORDS_PER_SLOT,
} from '../cross-thread/accumulators.js';
import type { BlockArena } from '../cross-thread/block-arena.js';
import { StopStringMatcher } from '../cross-thread/detokenizer.js';
import { RS_ERR_OUTPUT_BAD_STEP } from '../cross-thread/errors.js';
import { SlotFlag, type SlotMetaTable } from '../cross-thread/slot-meta.js';
import { ColumnWriter } from './column-writer.js';
import { KvParamsList } from './kv-params-list.js';
import { SlotEventList } from './slot-events.js';

export interface StepScatterOptions {
  meta: SlotMetaTable;
  acc: AccumulatorTable;
  arena: BlockArena;
  tokens: TokenBytes;
  /** Observes request figures as outputs arrive (the output worker's RequestRecorder). */
  metrics?: ScatterMetrics;
}

const NO_METRICS: ScatterMetrics = { step() {}, begin() {}, token() {}, finished() {} };

export class StepScatter {
  /** Responses completed during this pass (pack or end the stream). */
  readonly finished: SlotEventList;
  /** Requests the engine confirmed done during this pass (the slot may be reused once freed). */
  readonly released: SlotEventList;
  /** Requests this worker completed while the engine still runs them: the main thread sends ABORT. */
  readonly stopped: SlotEventList;
  /** Streaming requests with new positions or a finish during this pass. */
  readonly streamed: SlotEventList;
  /** kv_transfer_params engines answered during this pass (kv-params-list.ts). */
  readonly kvParams = new KvParamsList();
  /** Rows dropped because their slot was out of range (engine bug), since the start. */
  badRows = 0;
  readonly #meta: SlotMetaTable;
  readonly #acc: AccumulatorTable;
  readonly #words: Int32Array;
  readonly #metaWords: Int32Array;
  readonly #columns: ColumnWriter;
  readonly #stops: StopStringMatcher;
  readonly #tokens: TokenBytes;
  readonly #rec = new StepRecordView();
  readonly #metrics: ScatterMetrics;

  constructor(opts: StepScatterOptions) {
    this.#meta = opts.meta;
    this.#acc = opts.acc;
    this.#words = opts.acc.words;
    this.#metaWords = opts.meta.words;
    this.#columns = new ColumnWriter(opts.acc, opts.arena);
    this.#stops = new StopStringMatcher(opts.meta, opts.tokens);
    this.#tokens = opts.tokens;
    this.#metrics = opts.metrics ?? NO_METRICS;
    const slots = opts.acc.slots;
    this.finished = new SlotEventList(slots);
    this.released = new SlotEventList(slots);
    this.stopped = new SlotEventList(slots);
    this.streamed = new SlotEventList(slots);
  }

  /** Forget the events of the last pass. */
  clearEvents(): void {
    this.finished.clear();
    this.released.clear();
    this.stopped.clear();
    this.streamed.clear();
    this.kvParams.clear();
  }

  /** Scatters one STEP record (payload at byte `offset`, `length` bytes) of region views `v`. */
  scatterStep(v: RegionViews, offset: number, length: number): void {
    const rec = this.#rec.attach(v, offset);
    const rowIds = rec.layers * rec.topk;
    if (
      rec.count < 0 ||
      rec.maskIdsTotal < 0 ||
      rec.routingRowsTotal < 0 ||
      // Signed factors: two of them negative make stepRecordBytes negative, and the check passes.
      rec.layers < 0 ||
      rec.topk < 0 ||
      rec.topTotal < 0 ||
      rec.promptTotal < 0 ||
      rec.kvTotal < 0 ||
      (rec.routingIdBytes !== 1 && rec.routingIdBytes !== 2) ||
      stepRecordBytes(
        rec.count,
        rec.maskIdsTotal,
        rec.routingRowsTotal,
        rowIds,
        rec.routingIdBytes,
        rec.topTotal,
        rec.promptTotal,
        rec.kvTotal,
      ) > length
    ) {
      throw new RS_ERR_OUTPUT_BAD_STEP(
        `a STEP record of ${length} bytes declares more than it holds`,
      );
    }
    this.#metrics.step(rec.clockMs, rec.stepMs);
    const i32 = v.i32;
    const maskEnd = rec.maskBase + rec.maskIdsTotal;
    let maskAt = rec.maskBase;
    // Routing is walked in rows, not bytes: see column-writer.ts on small integers across calls.
    let routingRow = 0;
    let topAt = 0;
    let promptAt = 0;
    let kvAt = 0;
    for (let j = 0; j < rec.count; j++) {
      const maskCount = i32[rec.at(StepColumn.MaskCount, j)]!;
      const rows = i32[rec.at(StepColumn.RoutingRows, j)]!;
      const top = i32[rec.at(StepColumn.TopCount, j)]!;
      const positions = i32[rec.at(StepColumn.PromptPositions, j)]!;
      const width = i32[rec.at(StepColumn.PromptWidth, j)]!;
      const kv = i32[rec.at(StepColumn.KvParamsBytes, j)]!;
      if (
        kv < 0 ||
        kvAt + kv > rec.kvTotal ||
        maskCount < 0 ||
        rows < 0 ||
        top < 0 ||
        positions < 0 ||
        width < 0 ||
        maskAt + maskCount > maskEnd ||
        routingRow + rows > rec.routingRowsTotal ||
        topAt + top > rec.topTotal ||
        promptAt + positions * width > rec.promptTotal
      ) {
        throw new RS_ERR_OUTPUT_BAD_STEP(
          `output ${j} of a STEP record runs past its mask, top, prompt, routing or kv entries`,
        );
      }
      this.#row(v, j, maskAt, routingRow, topAt, promptAt);
      if (kv > 0) this.#kvParams(v, j, rec.kvByteOffset + kvAt, kv);
      kvAt += kv;
      maskAt += maskCount;
      routingRow += rows;
      topAt += top;
      promptAt += positions * width;
    }
  }

  /** The main thread has sent the response of (slot, generation): give its blocks back. */
  free(slot: number, generation: number): void {
    if (!this.#current(slot, generation)) return;
    const state = this.#acc.state(slot);
    if (state === SlotState.Idle || state === SlotState.Draining) return;
    this.#columns.releaseBlocks(slot);
    this.#setState(slot, state === SlotState.Done ? SlotState.Idle : SlotState.Draining);
  }

  /**
   * The engine died: it will send no final output for (slot, generation). A running request's
   * blocks go back (the main thread fails it); a complete one keeps them until its free.
   */
  engineGone(slot: number, generation: number): void {
    if (!this.#current(slot, generation)) return;
    const state = this.#acc.state(slot);
    if (state === SlotState.Running) {
      this.#columns.releaseBlocks(slot);
      this.#setState(slot, SlotState.Idle);
    } else if (state === SlotState.Finished) {
      this.#setState(slot, SlotState.Done);
    } else if (state === SlotState.Draining) {
      this.#setState(slot, SlotState.Idle);
    }
  }

  #current(slot: number, generation: number): boolean {
    return (
      slot >= 0 &&
      slot < this.#acc.slots &&
      generation !== 0 &&
      this.#acc.generation(slot) === generation
    );
  }

  #row(
    v: RegionViews,
    j: number,
    maskAt: number,
    routingRow: number,
    topAt: number,
    promptAt: number,
  ): void {
    const rec = this.#rec;
    const i32 = v.i32;
    const slot = i32[rec.at(StepColumn.Slot, j)]!;
    if (!(slot >= 0 && slot < this.#acc.slots)) {
      this.badRows++;
      return;
    }
    // Generations reach 2^31: they are compared here, never passed to a per-token call.
    const gen = i32[rec.at(StepColumn.SlotGen, j)]!;
    if (gen === 0 || gen !== Atomics.load(this.#metaWords, this.#meta.generationIndex(slot)))
      return;
    const base = slot * WORDS_PER_SLOT;
    if (this.#words[base + AccWord.Gen] !== gen) this.#begin(slot, gen);
    const state = this.#words[base + AccWord.State]!;
    const finish = i32[rec.at(StepColumn.Finish, j)]!;
    if (state === SlotState.Running) {
      try {
        this.#accumulate(v, j, slot, base, maskAt, routingRow, topAt, promptAt);
      } catch (err) {
        this.#fail(slot, base, err);
      }
      if (finish !== FinishReason.None) this.#engineFinished(v, j, slot, base, finish);
    } else if (
      finish !== FinishReason.None &&
      (state === SlotState.Finished || state === SlotState.Draining)
    ) {
      this.#setState(slot, state === SlotState.Finished ? SlotState.Done : SlotState.Idle);
      this.released.push(slot, gen);
    }
  }

  /** An engine's kv_transfer_params on output j: kept for the request if it is the slot's current one. */
  #kvParams(v: RegionViews, j: number, at: number, length: number): void {
    const i32 = v.i32;
    const slot = i32[this.#rec.at(StepColumn.Slot, j)]!;
    const gen = i32[this.#rec.at(StepColumn.SlotGen, j)]!;
    if (!(slot >= 0 && slot < this.#acc.slots) || gen === 0) return;
    if (this.#words[slot * WORDS_PER_SLOT + AccWord.Gen] !== gen) return;
    this.kvParams.push(slot, gen, v.bytes, at, length);
  }

  #begin(slot: number, gen: number): void {
    if (this.#acc.state(slot) !== SlotState.Idle) this.#columns.releaseBlocks(slot);
    this.#acc.clear(slot);
    const base = this.#acc.wordIndex(slot, 0);
    this.#words[base + AccWord.Gen] = gen;
    this.#words[base + AccWord.State] = SlotState.Running;
    const k = this.#meta.topLogprobs(slot);
    if (k > 0 && this.#meta.hasFlag(slot, SlotFlag.Logprobs)) this.#words[base + AccWord.TopK] = k;
    this.#metrics.begin(slot, gen);
    if (this.#meta.hasFlag(slot, SlotFlag.HasStopStrings)) this.#stops.begin(slot);
  }

  #accumulate(
    v: RegionViews,
    j: number,
    slot: number,
    base: number,
    maskAt: number,
    routingRow: number,
    topAt: number,
    promptAt: number,
  ): void {
    const rec = this.#rec;
    const i32 = v.i32;
    const words = this.#words;
    const flags = this.#meta.flags(slot);
    const weightVersion = i32[rec.at(StepColumn.WeightVersion, j)]!;
    if (words[base + AccWord.FirstWeightVersion] === -1) {
      words[base + AccWord.FirstWeightVersion] = weightVersion;
    }
    words[base + AccWord.LastWeightVersion] = weightVersion;
    const cached = i32[rec.at(StepColumn.NumCached, j)]!;
    if (cached > words[base + AccWord.NumCached]!) words[base + AccWord.NumCached] = cached;
    const rows = i32[rec.at(StepColumn.RoutingRows, j)]!;
    if (rows > 0 && (flags & SlotFlag.RoutedExperts) !== 0) {
      const firstPos = i32[rec.at(StepColumn.RoutingFirstPos, j)]!;
      const promptStart = this.#meta.routedExpertsPromptStart(slot);
      this.#columns.appendRouting(slot, base, promptStart, firstPos, rows, v, rec, routingRow);
    }
    const positions = i32[rec.at(StepColumn.PromptPositions, j)]!;
    if (positions > 0) {
      // Only a request that asked carries them (the engine computes them for choice 0 alone).
      this.#columns.appendPrompt(
        slot,
        base,
        i32[rec.at(StepColumn.PromptFirstPos, j)]!,
        positions,
        i32[rec.at(StepColumn.PromptWidth, j)]!,
        v,
        rec.promptIdBase + promptAt,
        rec.promptLogprobBase + promptAt,
        rec.promptRankBase + promptAt,
      );
    }
    const token = i32[rec.at(StepColumn.Token, j)]!;
    if (token < 0) return;
    if (words[base + AccWord.TopK]! > 0) {
      this.#columns.appendTop(
        slot,
        base,
        v,
        rec.topIdBase + topAt,
        rec.topLogprobBase + topAt,
        i32[rec.at(StepColumn.TopCount, j)]!,
      );
    }
    this.#columns.appendToken(
      slot,
      base,
      token,
      v,
      rec.at(StepColumn.Logprob, j),
      (flags & SlotFlag.Logprobs) !== 0,
      (flags & SlotFlag.SamplingMask) !== 0,
      i32[rec.at(StepColumn.MaskCount, j)]!,
      maskAt,
    );
    this.#metrics.token(slot);
    if ((flags & SlotFlag.Stream) !== 0 && !this.streamed.has(slot)) {
      this.streamed.push(slot, words[base + AccWord.Gen]!);
    }
    const finish = i32[rec.at(StepColumn.Finish, j)]!;
    const textBefore = words[base + AccWord.TextBytes]!;
    // vLLM's detokenizer leaves out the token the engine stopped on (EOS, a stop id) unless
    // include_stop_str_in_output.
    if (
      (flags & SlotFlag.Text) !== 0 &&
      (finish !== FinishReason.Stop || (flags & SlotFlag.IncludeStopStrInOutput) !== 0)
    ) {
      const skipSpecial = (flags & SlotFlag.KeepSpecialTokens) === 0;
      this.#columns.appendText(slot, base, this.#tokens, token, skipSpecial);
    }
    if ((flags & SlotFlag.HasStopStrings) !== 0) {
      this.#checkStop(slot, base, token, finish, flags, textBefore);
    }
  }

  /**
   * vLLM's rules: stop strings are not checked before min_tokens, nor on the token that the engine
   * itself stopped on (EOS or a stop id, which is never detokenized); a max_tokens finish is checked,
   * and a match there turns it into a stop-string finish.
   */
  #checkStop(
    slot: number,
    base: number,
    token: number,
    finish: number,
    flags: number,
    textBefore: number,
  ): void {
    const words = this.#words;
    const check =
      finish !== FinishReason.Stop &&
      words[base + AccWord.Completion]! > this.#meta.minTokens(slot);
    const matched = this.#stops.push(slot, token, check);
    if (matched < 0) return;
    if ((flags & SlotFlag.Text) !== 0) {
      // The text ends at the stop string's end, or before it unless include_stop_str_in_output.
      const end = textBefore + this.#stops.matchEnd;
      words[base + AccWord.TextEnd] =
        (flags & SlotFlag.IncludeStopStrInOutput) !== 0
          ? end
          : end - this.#meta.stopLength(slot, matched);
    }
    words[base + AccWord.Finish] = FinishReason.Stop;
    words[base + AccWord.StopString] = matched;
    words[base + AccWord.StopTokenId] = -1;
    this.#workerFinished(slot, base);
  }

  /** The worker completed the response itself: the engine still runs it until told to abort. */
  #workerFinished(slot: number, base: number): void {
    const gen = this.#words[base + AccWord.Gen]!;
    this.#setState(slot, SlotState.Finished);
    this.#metrics.finished(
      slot,
      this.#words[base + AccWord.Finish]!,
      this.#words[base + AccWord.Completion]!,
    );
    this.finished.push(slot, gen);
    this.stopped.push(slot, gen);
    if (this.#meta.hasFlag(slot, SlotFlag.Stream)) this.streamed.push(slot, gen);
  }

  #engineFinished(v: RegionViews, j: number, slot: number, base: number, finish: number): void {
    const words = this.#words;
    const gen = words[base + AccWord.Gen]!;
    const state = words[base + AccWord.State]!;
    if (state === SlotState.Finished) {
      // The response completed this very row (a stop string on a max_tokens finish, or an error):
      // the engine is done too, so nothing needs aborting.
      this.stopped.remove(slot);
    } else {
      const stopTokenId = v.i32[this.#rec.at(StepColumn.StopTokenId, j)]!;
      words[base + AccWord.Finish] = finish;
      words[base + AccWord.StopTokenId] = finish === FinishReason.Stop ? stopTokenId : -1;
      if (finish === FinishReason.Error) {
        words[base + AccWord.RejectReason] = v.i32[this.#rec.at(StepColumn.RejectReason, j)]!;
      }
      this.#metrics.finished(slot, finish, words[base + AccWord.Completion]!);
      this.finished.push(slot, gen);
      if (this.#meta.hasFlag(slot, SlotFlag.Stream)) this.streamed.push(slot, gen);
    }
    this.#setState(slot, SlotState.Done);
    this.released.push(slot, gen);
  }

  /** A request-scoped output failure (arena full, a malformed output): finish it with an error. */
  #fail(slot: number, base: number, err: unknown): void {
    const code = (err as { code?: unknown }).code;
    if (code !== 'RS_ERR_OUTPUT_ARENA_FULL' && code !== 'RS_ERR_OUTPUT_BAD_STEP') throw err;
    this.#words[base + AccWord.Error] =
      code === 'RS_ERR_OUTPUT_ARENA_FULL' ? OutputError.ArenaFull : OutputError.BadStep;
    this.#words[base + AccWord.Finish] = FinishReason.Error;
    this.#columns.releaseBlocks(slot);
    this.#workerFinished(slot, base);
  }

  #setState(slot: number, state: number): void {
    this.#words[this.#acc.wordIndex(slot, AccWord.State)] = state;
  }
}
