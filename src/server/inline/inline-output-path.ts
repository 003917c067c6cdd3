/**
 * `--output-processing inline`: output processing on the main thread, the way a per-token-object
 * frontend does it (vLLM's Python API server: an object per token for its logprob, a list per
 * position for its mask, routed experts in a growing buffer, the legacy response built at the end
 * with one JSON.stringify). It exists as the benchmark's baseline arm and is built as a careful
 * engineer would build that design, never weaker nor heavier: it drains the same output ring,
 * polled from the event loop every millisecond while requests are in flight.
 *
 * Everything but the per-token representation (inline-sequence.ts, inline-routing.ts) and the
 * legacy objects built from it (inline-legacy.ts) is the worker path's: the slot
 * meta row and the stop-string matcher (cross-thread/detokenizer.ts, with the output worker's rules), the
 * SSE framing and `[DONE]` (protocol/sse.ts), response ids and encoders (protocol/), and completion
 * of a request's choices by the coordinator's ChoiceGroup.
 */

import { recorderFromEnvironment } from '../../obs/worker-metrics.js';
import { encodeGenerateResponse } from '../../protocol/generate-response.js';
import { JsonWriter } from '../../protocol/json-writer.js';
import { type ChoiceFinishReason, choiceFinishReason } from '../../protocol/response-columns.js';
import { stringifyGenerateResponse } from '../../protocol/response-object.js';
import {
  SSE_DONE,
  writeStreamChunk,
  writeStreamDone,
  writeStreamEventText,
  writeStreamUsageChunk,
} from '../../protocol/sse.js';
import type { TokenBytes } from '../../protocol/token-bytes.js';
import type { RingConsumer } from '../../shm/ring.js';
import { RecordType, StepColumn, StepRecordView } from '../../wire/messages.js';
import { getModelCard } from '../../wire/model-card.js';
import { FinishReason } from '../../wire/types.js';
import { ByteLevelStandIn, StopStringMatcher } from '../cross-thread/detokenizer.js';
import { rejectError } from '../cross-thread/reject-error.js';
import { SlotMetaTable } from '../cross-thread/slot-meta.js';
import { decodeKvParams } from '../main/engine-kv-params.js';
import type { OutputEvents, OutputPath } from '../main/output-path.js';
import type { RequestRecord } from '../main/request-record.js';
import { slotMetaRow } from '../main/slot-meta-row.js';
import { legacyStreamEvent, stringifyLegacyResponse } from './inline-legacy.js';
import {
  choiceColumns,
  type InlinePrompt,
  type InlineSequence,
  newSequence,
  responseColumns,
  usageOf,
} from './inline-sequence.js';

const POLL_MS = 1;
/** Longest stretch of output processing before the baseline yields to its event loop. */
const POLL_SLICE_MS = 10;

export class InlineOutputPath implements OutputPath {
  readonly #consumer: RingConsumer;
  readonly #events: OutputEvents;
  readonly #view = new StepRecordView();
  readonly #sequences: (InlineSequence | undefined)[] = [];
  /** Each slot's stop strings where the shared matcher reads them. */
  readonly #meta: SlotMetaTable;
  readonly #stops: StopStringMatcher;
  readonly #sse = new JsonWriter(16 * 1024);
  /** vLLM's request metrics, as the output worker records them (src/obs/request-recorder.ts). */
  readonly #metrics = recorderFromEnvironment(
    (slot) => this.#sequences[slot]?.record.request.promptTokenIds.length ?? 0,
  );
  #open = 0;
  #timer: NodeJS.Timeout | null = null;

  /**
   * Drains `consumer` (this server's output ring) for request slots [0, slots); stop strings are
   * matched in `tokens`, the served tokenizer's bytes (without: the byte-level stand-in, with the
   * preset's EOS ids special).
   */
  constructor(
    consumer: RingConsumer,
    events: OutputEvents,
    presetName: string,
    slots: number,
    tokens?: TokenBytes,
  ) {
    this.#consumer = consumer;
    this.#events = events;
    const preset = getModelCard(presetName);
    this.#meta = new SlotMetaTable(slots);
    this.#stops = new StopStringMatcher(
      this.#meta,
      tokens ?? new ByteLevelStandIn(preset.eosTokenIds),
    );
  }

  open(record: RequestRecord, index: number): void {
    const slot = record.group.slots[index]!;
    const sequence = newSequence(record, index);
    this.#meta.write(slot, sequence.gen, slotMetaRow(record, index));
    if (record.request.stop.length > 0) this.#stops.begin(slot);
    this.#sequences[slot] = sequence;
    this.#open++;
    this.#timer ??= setInterval(() => this.poll(), POLL_MS);
  }

  /**
   * The legacy answer: one JSON.stringify over objects made from what the sequences hold. The
   * packed forms pack the per-token objects into columns first, as such a frontend would have to.
   */
  async encode(record: RequestRecord): Promise<Buffer> {
    const sequences = record.group.slots.map((slot) => this.#sequences[slot]!);
    if (record.form === 'legacy') return Buffer.from(stringifyLegacyResponse(sequences));
    const columns = responseColumns(sequences);
    if (record.form === 'msgpack') return encodeGenerateResponse(columns, 'msgpack');
    return Buffer.from(stringifyGenerateResponse(columns, false));
  }

  /**
   * Only [DONE]: streams with several choices are OpenAI answers, which the inline baseline does not
   * serve (the generate route refuses n > 1 with stream).
   */
  streamTail(_record: RequestRecord): Buffer {
    return SSE_DONE;
  }

  free(slot: number, gen: number): void {
    if (this.#sequences[slot]?.gen !== gen) return;
    this.#sequences[slot] = undefined;
    if (--this.#open === 0) this.#stopPolling();
  }

  engineDown(): void {
    this.#sequences.length = 0;
    this.#open = 0;
    this.#stopPolling();
  }

  queueDepth(): number {
    return 0;
  }

  /** The inline path encodes into buffers of its own: no response pool. */
  /** Every answer of this path is built on the main thread; the counter is the worker path's. */
  inlineAnswers(): number {
    return 0;
  }

  poolStats(): null {
    return null;
  }

  async close(): Promise<void> {
    this.#stopPolling();
  }

  /**
   * Drains what the engine wrote, a time slice at a time: with a backlog it yields to the event loop
   * between slices (as vLLM's output handler awaits between engine outputs), so the baseline is not
   * blocked longer than its own per-token work requires. Its timer calls it while requests are open.
   */
  poll(): void {
    const c = this.#consumer;
    const deadline = performance.now() + POLL_SLICE_MS;
    let any = false;
    while (c.next()) {
      any = true;
      if (c.type === RecordType.Step) this.#step(c);
      if (performance.now() >= deadline) {
        c.release();
        setImmediate(() => this.poll());
        return;
      }
    }
    if (any) c.release();
  }

  #stopPolling(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  #step(c: RingConsumer): void {
    const rec = this.#view.attach(c, c.offset);
    this.#metrics?.step(rec.clockMs, rec.stepMs);
    const i32 = c.i32;
    let mask = rec.maskBase;
    let top = 0;
    let prompt = 0;
    let kv = rec.kvByteOffset;
    let routing = rec.routingIdBytes === 1 ? rec.routingByteOffset : rec.routingByteOffset >> 1;
    for (let j = 0; j < rec.count; j++) {
      const slot = i32[rec.at(StepColumn.Slot, j)]!;
      const s = this.#sequences[slot];
      const kvBytes = i32[rec.at(StepColumn.KvParamsBytes, j)]!;
      if (s !== undefined && s.gen === i32[rec.at(StepColumn.SlotGen, j)]) {
        if (s.prompt !== null && !s.done) promptEntries(c, rec, j, prompt, s.prompt);
        if (kvBytes > 0 && !s.done) this.#kvParams(c, rec, j, slot, s, kv, kvBytes);
        this.#row(c, rec, j, slot, s, mask, routing, top);
      }
      kv += kvBytes;
      mask += i32[rec.at(StepColumn.MaskCount, j)]!;
      top += i32[rec.at(StepColumn.TopCount, j)]!;
      prompt +=
        i32[rec.at(StepColumn.PromptPositions, j)]! * i32[rec.at(StepColumn.PromptWidth, j)]!;
      routing += i32[rec.at(StepColumn.RoutingRows, j)]! * rec.layers * rec.topk;
    }
  }

  /** Output j of the step for sequence `s`: its routing rows, its token, and how it goes on. */
  #row(
    c: RingConsumer,
    rec: StepRecordView,
    j: number,
    slot: number,
    s: InlineSequence,
    mask: number,
    routing: number,
    top: number,
  ): void {
    const i32 = c.i32;
    const finish = i32[rec.at(StepColumn.Finish, j)]!;
    if (s.done) {
      // Finished here (a stop string) before the engine knew: its final output releases it.
      if (finish !== FinishReason.None) this.#events.released(slot, s.gen);
      return;
    }
    this.#metrics?.seen(slot, s.gen);
    const rows = i32[rec.at(StepColumn.RoutingRows, j)]!;
    if (s.routing !== null && rows > 0) {
      const ids = rec.routingIdBytes === 1 ? c.bytes : c.u16;
      const firstPos = i32[rec.at(StepColumn.RoutingFirstPos, j)]!;
      const promptStart = s.record.request.params.routedExpertsPromptStart;
      s.routing.append(ids, routing, firstPos, rows, rec.layers, rec.topk, promptStart);
    }
    const token = i32[rec.at(StepColumn.Token, j)]!;
    if (token >= 0) {
      s.tokenIds.push(token);
      s.weightVersions.push(i32[rec.at(StepColumn.WeightVersion, j)]!);
      if (s.logprobs !== null) {
        const logprob = c.f32[rec.at(StepColumn.Logprob, j)]!;
        const entries = [{ token: `token_id:${token}`, logprob, bytes: null }];
        // The legacy answer's list: the sampled token, then the engine's best (see SampledLogprob).
        const limit =
          s.record.form === 'legacy' ? Math.max(s.record.request.params.topLogprobs, 1) : 0;
        const count = i32[rec.at(StepColumn.TopCount, j)]!;
        for (let t = 0; t < count && entries.length < limit; t++) {
          const id = i32[rec.topIdBase + top + t]!;
          if (id < 0 || id === token) continue;
          const lp = Math.max(c.f32[rec.topLogprobBase + top + t]!, -9999);
          entries.push({ token: `token_id:${id}`, logprob: lp, bytes: null });
        }
        s.logprobs.push({ tokenId: token, logprob, top: entries });
      }
      s.masks?.push(keptIds(i32, mask, i32[rec.at(StepColumn.MaskCount, j)]!));
      this.#metrics?.token(slot);
    }
    const stop = token >= 0 ? this.#matchStop(slot, s, token, finish) : -1;
    if (stop >= 0) this.#stopByString(slot, s, stop, finish);
    else if (finish !== FinishReason.None) this.#finish(slot, s, finish, rec, j, i32);
    else if (s.record.stream && s.tokenIds.length > s.streamed)
      this.#streamDelta(slot, s, null, null);
  }

  /**
   * The engine's kv_transfer_params on output j (a prefill leg through a vLLM engine): the answer
   * carries them; bytes that do not decode fail the choice (and stop it in the engine).
   */
  #kvParams(
    c: RingConsumer,
    rec: StepRecordView,
    j: number,
    slot: number,
    s: InlineSequence,
    at: number,
    length: number,
  ): void {
    const request = s.record.request;
    try {
      request.kvTransferParams = decodeKvParams(
        c.bytes.slice(at, at + length),
        s.record.identity.requestId,
      );
    } catch (error) {
      s.done = true;
      this.#events.finished(slot, s.gen, error as Error);
      if (c.i32[rec.at(StepColumn.Finish, j)] === FinishReason.None)
        this.#events.stopped(slot, s.gen);
    }
  }

  /**
   * The stop string the token completes, or -1: the output worker's matcher and rules (scatter.ts),
   * not before min_tokens, nor on a token the engine itself stopped on (EOS or a stop id).
   */
  #matchStop(slot: number, s: InlineSequence, token: number, finish: number): number {
    const { request } = s.record;
    if (request.stop.length === 0) return -1;
    const check = finish !== FinishReason.Stop && s.tokenIds.length > request.params.minTokens;
    return this.#stops.push(slot, token, check);
  }

  /** A stop string matched: answer now, and ask the engine to stop generating (its abort confirms). */
  #stopByString(slot: number, s: InlineSequence, stop: number, finish: number): void {
    s.done = true;
    this.#metrics?.finished(slot, FinishReason.Stop, s.tokenIds.length);
    this.#choiceDone(slot, s, 'stop', this.#meta.stopString(slot, stop));
    // The engine finished this very row (a max_tokens finish): nothing is left to abort.
    if (finish !== FinishReason.None) this.#events.released(slot, s.gen);
    else this.#events.stopped(slot, s.gen);
  }

  #finish(
    slot: number,
    s: InlineSequence,
    finish: number,
    rec: StepRecordView,
    j: number,
    i32: Int32Array,
  ): void {
    s.done = true;
    this.#metrics?.finished(slot, finish, s.tokenIds.length);
    if (finish === FinishReason.Error) {
      const reason = i32[rec.at(StepColumn.RejectReason, j)]!;
      this.#events.finished(slot, s.gen, rejectError(reason, s.record.identity.requestId));
    } else {
      const stopId = i32[rec.at(StepColumn.StopTokenId, j)]!;
      this.#choiceDone(slot, s, choiceFinishReason(finish) ?? 'abort', stopId >= 0 ? stopId : null);
    }
    this.#events.released(slot, s.gen);
  }

  /** The choice is complete: its stream's last event, then its end for the request's group. */
  #choiceDone(
    slot: number,
    s: InlineSequence,
    finishName: ChoiceFinishReason,
    stopReason: number | string | null,
  ): void {
    s.finishName = finishName;
    s.stopReason = stopReason;
    if (s.record.stream) this.#streamDelta(slot, s, finishName, stopReason);
    this.#events.finished(slot, s.gen, null);
  }

  /** One SSE event with the tokens not yet streamed (and the end of the stream when finished). */
  #streamDelta(
    slot: number,
    s: InlineSequence,
    finishReason: ChoiceFinishReason | null,
    stopReason: number | string | null,
  ): void {
    const from = s.streamed;
    const fromRow = s.streamedRows;
    s.streamed = s.tokenIds.length;
    s.streamedRows = s.routing?.rows ?? 0;
    const { identity, request, form } = s.record;
    const { requestId, model, created } = identity;
    const usage = usageOf([s]);
    const w = this.#sse.reset();
    const chunkUsage = request.continuousUsageStats ? usage : null;
    if (form === 'legacy') {
      writeStreamEventText(
        w,
        legacyStreamEvent(s, from, fromRow, finishReason, stopReason, chunkUsage),
      );
    } else {
      const choice = choiceColumns(s, from, fromRow, finishReason, stopReason);
      writeStreamChunk(
        w,
        { requestId, model, created, choices: [choice], usage: chunkUsage },
        false,
      );
    }
    const last = finishReason !== null;
    if (last) {
      if (request.includeUsage) writeStreamUsageChunk(w, requestId, model, created, usage);
      writeStreamDone(w);
    }
    this.#events.stream(slot, s.gen, w.finish(), last);
  }
}

/** The `count` kept token ids at element `at` of the step's mask section, as a list. */
function keptIds(i32: Int32Array, at: number, count: number): number[] {
  const ids: number[] = [];
  for (let k = 0; k < count; k++) ids.push(i32[at + k]!);
  return ids;
}

/**
 * Output j's prompt logprobs, pushed entry by entry as a per-token-object frontend keeps them:
 * positions already held (a recompute sends them again) are skipped, as the worker path does.
 */
function promptEntries(
  c: RingConsumer,
  rec: StepRecordView,
  j: number,
  at: number,
  into: InlinePrompt,
): void {
  const i32 = c.i32;
  const positions = i32[rec.at(StepColumn.PromptPositions, j)]!;
  const width = i32[rec.at(StepColumn.PromptWidth, j)]!;
  if (positions <= 0 || width <= 0) return;
  const held = into.width === 0 ? 0 : into.ids.length / into.width;
  const skip = Math.max(0, held + 1 - i32[rec.at(StepColumn.PromptFirstPos, j)]!);
  into.width = width;
  for (let e = skip * width; e < positions * width; e++) {
    into.ids.push(i32[rec.promptIdBase + at + e]!);
    into.logprobs.push(c.f32[rec.promptLogprobBase + at + e]!);
    into.ranks.push(i32[rec.promptRankBase + at + e]!);
  }
}
