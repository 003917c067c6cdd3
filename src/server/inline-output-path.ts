/**
 * `--output-processing inline`: output processing on the main thread, the way a per-token-object
 * frontend does it (vLLM's Python API server: one object per token with its id, logprob and mask,
 * the response built at the end with JSON.stringify). It exists as the benchmark's baseline arm and
 * is built as a careful engineer would build that design, with no artificial slowness: it drains the
 * same output ring, polled from the event loop every millisecond while requests are in flight.
 */

import { TextDecoder } from 'node:util';
import { RS_ERR_ENGINE_REQUEST_FAILED } from '../errors.js';
import { recorderFromEnvironment } from '../obs/worker-metrics.js';
import type { GenerateRequest } from '../protocol/generate-request.js';
import type { ResponseForm } from '../protocol/generate-response.js';
import { encodeGenerateResponse } from '../protocol/generate-response.js';
import {
  type ChoiceColumns,
  type ChoiceFinishReason,
  choiceFinishReason,
  type GenerateResponseColumns,
  narrowRouting,
} from '../protocol/response-columns.js';
import { choiceObject, stringifyGenerateResponse } from '../protocol/response-object.js';
import type { Region } from '../shm/region.js';
import { outputRingConsumer } from '../shm/region.js';
import type { RingConsumer } from '../shm/ring.js';
import { RecordType, StepColumn, StepRecordView } from '../wire/messages.js';
import { getModelCard } from '../wire/model-card.js';
import { rejectReasonMessage } from '../wire/reject.js';
import { FinishReason } from '../wire/types.js';
import { type TokenByteSource, tokenByteSource } from './output/detokenizer.js';
import type { ChoiceGroup, OutputEvents, OutputPath, ResponseIdentity } from './output-path.js';

const POLL_MS = 1;
/** Longest stretch of output processing before the baseline yields to its event loop. */
const POLL_SLICE_MS = 10;

/** One generated token, as a per-token-object frontend keeps it. */
interface TokenOutput {
  id: number;
  logprob: number;
  mask: number[] | null;
  weightVersion: number;
}

interface InlineRequest {
  gen: number;
  group: ChoiceGroup;
  /** This sequence's choice index in its request. */
  index: number;
  /** How it finished (set when it did), for the response built once every choice has. */
  finishName: ChoiceFinishReason | null;
  stopReason: number | string | null;
  /** Decoded text so far, kept only when the request has stop strings. */
  text: string | null;
  decoder: TextDecoder | null;
  form: ResponseForm;
  identity: ResponseIdentity;
  request: GenerateRequest;
  tokens: TokenOutput[];
  /** Routing rows (each a number[] of layers*topk ids) and the position of the first. */
  routing: number[][];
  routingStart: number;
  layers: number;
  topk: number;
  numCached: number;
  /** Tokens already sent as stream events. */
  streamed: number;
  done: boolean;
}

export class InlineOutputPath implements OutputPath {
  readonly #consumer: RingConsumer;
  readonly #events: OutputEvents;
  readonly #view = new StepRecordView();
  readonly #requests: (InlineRequest | undefined)[] = [];
  /** vLLM's request metrics, as the output worker records them (src/obs/request-recorder.ts). */
  readonly #metrics = recorderFromEnvironment(
    (slot) => this.#requests[slot]?.request.promptTokenIds.length ?? 0,
  );
  #open = 0;
  #timer: NodeJS.Timeout | null = null;

  readonly #tokenBytes: TokenByteSource;
  readonly #scratch: Uint8Array;

  constructor(region: Region, server: number, events: OutputEvents, presetName: string) {
    this.#consumer = outputRingConsumer(region, server);
    this.#events = events;
    const preset = getModelCard(presetName);
    this.#tokenBytes = tokenByteSource(preset.name, preset.eosTokenIds);
    this.#scratch = new Uint8Array(this.#tokenBytes.maxTokenBytes);
  }

  open(
    group: ChoiceGroup,
    index: number,
    request: GenerateRequest,
    form: ResponseForm,
    id: ResponseIdentity,
  ): void {
    const slot = group.slots[index]!;
    const stops = request.stop.length > 0;
    this.#requests[slot] = {
      gen: group.gens[index]!,
      group,
      index,
      finishName: null,
      stopReason: null,
      text: stops ? '' : null,
      decoder: stops ? new TextDecoder() : null,
      form,
      identity: id,
      request,
      tokens: [],
      routing: [],
      routingStart: -1,
      layers: 0,
      topk: 0,
      numCached: 0,
      streamed: 0,
      done: false,
    };
    this.#open++;
    this.#timer ??= setInterval(() => this.#poll(), POLL_MS);
  }

  free(slot: number, gen: number): void {
    const r = this.#requests[slot];
    if (r === undefined || r.gen !== gen) return;
    this.#requests[slot] = undefined;
    if (--this.#open === 0 && this.#timer !== null) {
      clearInterval(this.#timer);
      this.#timer = null;
    }
  }

  engineDown(): void {
    this.#requests.length = 0;
    this.#open = 0;
  }

  queueDepth(): number {
    return 0;
  }

  async close(): Promise<void> {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  /**
   * Drains what the engine wrote, a time slice at a time: with a backlog it yields to the event loop
   * between slices (as vLLM's output handler awaits between engine outputs), so the baseline is not
   * blocked longer than its own per-token work requires.
   */
  #poll(): void {
    const c = this.#consumer;
    const deadline = performance.now() + POLL_SLICE_MS;
    let any = false;
    while (c.next()) {
      any = true;
      if (c.type === RecordType.Step) this.#step(c);
      if (performance.now() >= deadline) {
        c.release();
        setImmediate(() => this.#poll());
        return;
      }
    }
    if (any) c.release();
  }

  #step(c: RingConsumer): void {
    const rec = this.#view.attach(c, c.offset);
    this.#metrics?.step(rec.clockMs, rec.stepMs);
    const i32 = c.i32;
    const rowIds = rec.layers * rec.topk;
    const routingIds = rec.routingIdBytes === 1 ? c.bytes : c.u16;
    let mask = rec.maskBase;
    let routing = rec.routingIdBytes === 1 ? rec.routingByteOffset : rec.routingByteOffset >> 1;
    for (let j = 0; j < rec.count; j++) {
      const slot = i32[rec.at(StepColumn.Slot, j)]!;
      const maskCount = i32[rec.at(StepColumn.MaskCount, j)]!;
      const rows = i32[rec.at(StepColumn.RoutingRows, j)]!;
      const r = this.#requests[slot];
      const finish = i32[rec.at(StepColumn.Finish, j)]!;
      const current = r !== undefined && r.gen === i32[rec.at(StepColumn.SlotGen, j)];
      if (current && r.done) {
        // Finished here (a stop string) before the engine knew: its final output releases it.
        if (finish !== FinishReason.None) this.#events.released(slot, r.gen);
      } else if (current) {
        this.#metrics?.seen(slot, r.gen);
        for (let row = 0; row < rows; row++) {
          const start = routing + row * rowIds;
          r.routing.push(Array.from(routingIds.subarray(start, start + rowIds)));
        }
        if (rows > 0 && r.routingStart < 0) {
          r.routingStart = i32[rec.at(StepColumn.RoutingFirstPos, j)]!;
          r.layers = rec.layers;
          r.topk = rec.topk;
        }
        const token = i32[rec.at(StepColumn.Token, j)]!;
        if (token >= 0) {
          r.tokens.push({
            id: token,
            logprob: c.f32[rec.at(StepColumn.Logprob, j)]!,
            mask: r.request.params.returnSamplingMask
              ? Array.from(i32.subarray(mask, mask + maskCount))
              : null,
            weightVersion: i32[rec.at(StepColumn.WeightVersion, j)]!,
          });
          r.numCached = i32[rec.at(StepColumn.NumCached, j)]!;
          this.#metrics?.token(slot);
        }
        const stop = token >= 0 && r.text !== null ? this.#matchStop(r, token) : null;
        if (stop !== null) this.#stopByString(slot, r, stop);
        else if (finish !== FinishReason.None) this.#finish(slot, r, finish, rec, j, i32);
        else if (r.request.stream && r.tokens.length > r.streamed)
          this.#streamDelta(slot, r, null, null);
      }
      mask += maskCount;
      routing += rows * rowIds;
    }
  }

  /** Appends the token's text and returns the stop string it completes, if any (vLLM's check). */
  #matchStop(r: InlineRequest, token: number): string | null {
    const n = this.#tokenBytes.write(token, this.#scratch, 0);
    const piece = r.decoder!.decode(this.#scratch.subarray(0, n), { stream: true });
    r.text += piece;
    if (r.tokens.length <= r.request.params.minTokens) return null;
    for (const stop of r.request.stop) {
      const from = r.text!.length - piece.length - stop.length + 1;
      if (r.text!.indexOf(stop, Math.max(0, from)) >= 0) return stop;
    }
    return null;
  }

  /** A stop string matched: answer now, and ask the engine to stop generating (its abort confirms). */
  #stopByString(slot: number, r: InlineRequest, stop: string): void {
    r.done = true;
    this.#metrics?.finished(slot, FinishReason.Stop, r.tokens.length);
    if (r.request.stream) this.#streamDelta(slot, r, 'stop', stop);
    else this.#choiceDone(r, 'stop', stop);
    this.#events.stopped(slot, r.gen);
  }

  #finish(
    slot: number,
    r: InlineRequest,
    finish: number,
    rec: StepRecordView,
    j: number,
    i32: Int32Array,
  ): void {
    r.done = true;
    this.#metrics?.finished(slot, finish, r.tokens.length);
    if (finish === FinishReason.Error) {
      const reason = rejectReasonMessage(i32[rec.at(StepColumn.RejectReason, j)]!);
      this.#choiceFailed(slot, r, new RS_ERR_ENGINE_REQUEST_FAILED(r.identity.requestId, reason));
    } else {
      const stopId = i32[rec.at(StepColumn.StopTokenId, j)]!;
      const name = choiceFinishReason(finish) ?? 'abort';
      const stopReason = stopId >= 0 ? stopId : null;
      if (r.request.stream) this.#streamDelta(slot, r, name, stopReason);
      else this.#choiceDone(r, name, stopReason);
    }
    this.#events.released(slot, r.gen);
  }

  /** A choice finished; the response is built once every choice of the request has. */
  #choiceDone(
    r: InlineRequest,
    finishName: ChoiceFinishReason,
    stopReason: number | string | null,
  ): void {
    r.finishName = finishName;
    r.stopReason = stopReason;
    const g = r.group;
    if (g.failed || --g.remaining > 0) return;
    this.#events.complete(g.slots[0]!, g.gens[0]!, this.#encode(g));
  }

  /** A choice failed: the request is answered with its error, and its other choices aborted. */
  #choiceFailed(slot: number, r: InlineRequest, error: Error): void {
    const g = r.group;
    if (g.failed) return;
    g.failed = true;
    this.#events.complete(g.slots[0]!, g.gens[0]!, error);
    for (let i = 0; i < g.slots.length; i++) {
      if (g.slots[i] !== slot) this.#events.stopped(g.slots[i]!, g.gens[i]!);
    }
  }

  /** One SSE event with the tokens not yet streamed (and the end of the stream when finished). */
  #streamDelta(
    slot: number,
    r: InlineRequest,
    finishReason: ChoiceFinishReason | null,
    stopReason: number | string | null,
  ): void {
    const tokens = r.tokens.slice(r.streamed);
    const routing = r.routing;
    r.routing = [];
    const routingStart = r.routingStart;
    r.routingStart = -1;
    r.streamed = r.tokens.length;
    const choice = this.#choice(r, tokens, routing, routingStart, finishReason, stopReason);
    let text = `data: ${JSON.stringify({
      request_id: `generate-tokens-${r.identity.requestId}`,
      model: r.identity.model,
      created: r.identity.created,
      choices: [choiceObject(choice, r.form === 'legacy')],
      usage: null,
    })}\n\n`;
    const last = finishReason !== null;
    if (last) {
      if (r.request.includeUsage) {
        const n = r.tokens.length;
        const prompt = r.request.promptTokenIds.length;
        text += `data: ${JSON.stringify({
          request_id: `generate-tokens-${r.identity.requestId}`,
          model: r.identity.model,
          created: r.identity.created,
          choices: [],
          usage: {
            prompt_tokens: prompt,
            completion_tokens: n,
            total_tokens: prompt + n,
            prompt_tokens_details: null,
          },
        })}\n\n`;
      }
      text += 'data: [DONE]\n\n';
    }
    this.#events.stream(slot, r.gen, Buffer.from(text), last);
  }

  #choice(
    r: InlineRequest,
    tokens: TokenOutput[],
    routing: number[][],
    routingStart: number,
    finishReason: ChoiceFinishReason | null,
    stopReason: number | string | null,
  ): ChoiceColumns {
    const p = r.request.params;
    return {
      index: r.index,
      tokenIds: Int32Array.from(tokens, (t) => t.id),
      logprobs: p.logprobs ? Float32Array.from(tokens, (t) => t.logprob) : null,
      maskCounts: p.returnSamplingMask ? Int32Array.from(tokens, (t) => t.mask?.length ?? 0) : null,
      maskIds: p.returnSamplingMask ? Int32Array.from(tokens.flatMap((t) => t.mask ?? [])) : null,
      routing: p.returnRoutedExperts
        ? {
            data: narrowRouting(Uint16Array.from(routing.flat())),
            rows: routing.length,
            layers: r.layers,
            topk: r.topk,
            start: Math.max(0, routingStart),
          }
        : null,
      weightVersions: Int32Array.from(tokens, (t) => t.weightVersion),
      finishReason,
      stopReason,
    };
  }

  /** Builds the response from the per-token objects: columns from objects, then JSON.stringify. */
  #encode(g: ChoiceGroup): Buffer {
    const children = g.slots.map((slot) => this.#requests[slot]!);
    const first = children[0]!;
    const res: GenerateResponseColumns = {
      requestId: first.identity.requestId,
      model: first.identity.model,
      created: first.identity.created,
      choices: children.map((r) =>
        this.#choice(r, r.tokens, r.routing, r.routingStart, r.finishName, r.stopReason),
      ),
      usage: {
        promptTokens: first.request.promptTokenIds.length,
        completionTokens: children.reduce((sum, r) => sum + r.tokens.length, 0),
        cachedTokens: null,
      },
      kvTransferParams: first.request.kvTransferParams,
    };
    if (first.form === 'msgpack') return encodeGenerateResponse(res, 'msgpack');
    return Buffer.from(stringifyGenerateResponse(res, first.form === 'legacy'));
  }
}
