// The output worker's SSE side: after each drain pass, one event per streaming request with new
// positions (everything that arrived in the pass coalesced), written straight from the arena into
// one buffer for all of them, which the worker transfers to the main thread. The main thread only
// slices it per request and writes the slices to the sockets.

import type { WriterScratch } from '../../protocol/byte-writer.js';
import { type ChatDeltaPart, ChatStreamParser } from '../../protocol/chat-parse/chat-output.js';
import { newToolCallId } from '../../protocol/chat-parse/tool-call-id.js';
import { JsonWriter } from '../../protocol/json-writer.js';
import { LogprobsWriter } from '../../protocol/openai-logprobs.js';
import type { OpenAiKind } from '../../protocol/openai-response.js';
import { writeOpenAiChunk, writeOpenAiUsageChunk } from '../../protocol/openai-stream.js';
import {
  writeStreamChunk,
  writeStreamDone,
  writeStreamError,
  writeStreamUsageChunk,
} from '../../protocol/sse.js';
import type { TokenBytes } from '../../protocol/token-bytes.js';
import { FinishReason } from '../../wire/types.js';
import { type AccumulatorTable, AccWord, SlotState } from '../cross-thread/accumulators.js';
import type { StreamBytes, StreamMessage } from '../cross-thread/messages.js';
import { type ResponseView, requestFailure } from '../cross-thread/response-view.js';
import { ResponseFormCode, SlotFlag, type SlotMetaTable } from '../cross-thread/slot-meta.js';
import type { SlotEventList } from './slot-events.js';
import { openAiDelta } from './stream-text.js';

/** What the main thread tells the worker about a streaming request: its StreamMessage, unaddressed. */
export type StreamHeader = Omit<StreamMessage, 'type' | 'slot'>;

const utf8 = new TextDecoder();

export class StreamEncoder {
  readonly #view: ResponseView;
  readonly #meta: SlotMetaTable;
  readonly #acc: AccumulatorTable;
  readonly #headers: (StreamHeader | undefined)[];
  /** Streaming slots with unsent positions whose header has not arrived yet. */
  readonly #waiting: SlotEventList;
  readonly #writer: JsonWriter;
  readonly #ends: Int32Array;
  readonly #done: Uint8Array;
  readonly #slots: Int32Array;
  readonly #generations: Int32Array;
  /** Per slot: 1 once the current request's first OpenAI chunk is written. */
  readonly #started: Uint8Array;
  readonly #logprobs: LogprobsWriter;
  /** Per slot: the chat parser of a stream that has one (state across its chunks), else null. */
  readonly #parsers: (ChatStreamParser | null)[];

  /** `scratch`: memory for the events' writer that release() can give back (else the heap). */
  constructor(
    view: ResponseView,
    waiting: SlotEventList,
    tokens: TokenBytes,
    scratch: WriterScratch | null = null,
  ) {
    this.#writer = new JsonWriter(256 * 1024, scratch);
    this.#view = view;
    this.#meta = view.meta;
    this.#acc = view.acc;
    this.#headers = new Array(view.acc.slots).fill(undefined);
    this.#waiting = waiting;
    const n = view.acc.slots;
    this.#ends = new Int32Array(n);
    this.#done = new Uint8Array(n);
    this.#slots = new Int32Array(n);
    this.#generations = new Int32Array(n);
    this.#started = new Uint8Array(n);
    this.#logprobs = new LogprobsWriter(tokens);
    this.#parsers = new Array(n).fill(null);
  }

  /** While no stream is being written: gives back what the writer holds; returns the bytes. */
  release(): number {
    return this.#writer.release();
  }

  setHeader(slot: number, header: StreamHeader): void {
    if (!(slot >= 0 && slot < this.#headers.length)) return;
    this.#headers[slot] = header;
    this.#started[slot] = 0;
    const parse = header.chatParse ?? null;
    this.#parsers[slot] = parse === null ? null : new ChatStreamParser(parse, newToolCallId);
  }

  /**
   * Encodes the events of `dirty` (and of slots still waiting for their header); `lookupHeaders`
   * reads pending main-thread messages, which hold any header a new request's outputs overtook.
   * Returns null when there is nothing to send.
   */
  encode(dirty: SlotEventList, lookupHeaders: () => void): StreamBytes | null {
    const waiting = this.#waiting;
    for (let i = 0; i < dirty.count; i++) {
      waiting.remove(dirty.slots[i]!);
      waiting.push(dirty.slots[i]!, dirty.generations[i]!);
    }
    const w = this.#writer.reset();
    let count = 0;
    for (let i = waiting.count - 1; i >= 0; i--) {
      const slot = waiting.slots[i]!;
      const gen = waiting.generations[i]!;
      if (this.#headers[slot]?.generation !== gen) lookupHeaders();
      if (!this.#streamable(slot, gen)) {
        waiting.remove(slot);
        continue;
      }
      const header = this.#headers[slot];
      if (header?.generation !== gen) continue;
      waiting.remove(slot);
      const done = this.#encodeSlot(w, slot, header);
      this.#slots[count] = slot;
      this.#generations[count] = gen;
      this.#ends[count] = w.length;
      this.#done[count] = done ? 1 : 0;
      count++;
      if (done) {
        this.#headers[slot] = undefined;
        this.#parsers[slot] = null;
      }
    }
    if (count === 0) return null;
    const bytes = w.finish();
    return {
      slots: this.#slots.slice(0, count),
      generations: this.#generations.slice(0, count),
      ends: this.#ends.slice(0, count),
      done: this.#done.slice(0, count),
      bytes: bytes.buffer as ArrayBuffer,
    };
  }

  /** The slot still holds this request and its blocks (not freed by the main thread meanwhile). */
  #streamable(slot: number, gen: number): boolean {
    const state = this.#acc.state(slot);
    return (
      this.#acc.generation(slot) === gen &&
      (state === SlotState.Running || state === SlotState.Finished || state === SlotState.Done)
    );
  }

  /** Writes the slot's new events; true when the stream (or this choice of it) is complete. */
  #encodeSlot(w: JsonWriter, slot: number, h: StreamHeader): boolean {
    const acc = this.#acc;
    const base = acc.wordIndex(slot, 0);
    const words = acc.words;
    const flags = this.#meta.flags(slot);
    const endsStream = this.#meta.choiceCount(slot) === 1;
    const final = acc.finishReason(slot) !== FinishReason.None;
    const failure = requestFailure(acc, slot, h.requestId);
    if (failure !== null) {
      writeStreamError(w, failure);
      if (endsStream) writeStreamDone(w);
      return true;
    }
    const form = this.#meta.form(slot);
    if (form === ResponseFormCode.Completion || form === ResponseFormCode.Chat) {
      const kind: OpenAiKind = form === ResponseFormCode.Chat ? 'chat' : 'completion';
      return this.#encodeOpenAi(w, slot, h, kind, final, endsStream);
    }
    const from = {
      tokens: words[base + AccWord.StreamedTokens]!,
      maskIds: words[base + AccWord.StreamedMaskIds]!,
      routingRows: words[base + AccWord.StreamedRoutingRows]!,
    };
    const choice = this.#view.choice(slot, this.#meta.choiceIndex(slot), from, final);
    if (choice.tokenIds.length > 0 || final) {
      const usage = (flags & SlotFlag.ContinuousUsageStats) !== 0 ? this.#view.usage([slot]) : null;
      const legacy = this.#meta.form(slot) === ResponseFormCode.Legacy;
      writeStreamChunk(
        w,
        { requestId: h.requestId, model: h.model, created: h.created, choices: [choice], usage },
        legacy,
      );
    }
    words[base + AccWord.StreamedTokens] = acc.completionTokens(slot);
    words[base + AccWord.StreamedMaskIds] = acc.maskIdsCount(slot);
    words[base + AccWord.StreamedRoutingRows] = acc.routingRows(slot);
    if (!final) return false;
    if (endsStream) {
      if ((flags & SlotFlag.IncludeUsage) !== 0) {
        writeStreamUsageChunk(w, h.requestId, h.model, h.created, this.#view.usage([slot]));
      }
      writeStreamDone(w);
    }
    return true;
  }

  /** The OpenAI form of #encodeSlot: text deltas (held back as stream-text.ts says) and logprobs. */
  #encodeOpenAi(
    w: JsonWriter,
    slot: number,
    h: StreamHeader,
    kind: OpenAiKind,
    final: boolean,
    endsStream: boolean,
  ): boolean {
    const flags = this.#meta.flags(slot);
    const delta = openAiDelta(this.#view, slot, final);
    const parser = kind === 'chat' ? (this.#parsers[slot] ?? null) : null;
    // One string per chunk, for streams that asked for parsing only: the parsers work on text.
    let parts: ChatDeltaPart[] | null = null;
    if (parser !== null && (delta.text.length > 0 || final)) {
      parts = parser.push(utf8.decode(delta.text), final);
    }
    if (delta.choice.tokenIds.length > 0 || delta.text.length > 0 || final) {
      const first = this.#started[slot] === 0;
      this.#started[slot] = 1;
      writeOpenAiChunk(
        w,
        {
          kind,
          requestId: h.requestId,
          model: h.model,
          created: h.created,
          choice: {
            columns: delta.choice,
            text: delta.text,
            echo: h.echo ?? null,
            promptTokenIds: h.promptTokenIds ?? null,
          },
          first,
          textOffset: delta.textOffset,
          usage: (flags & SlotFlag.ContinuousUsageStats) !== 0 ? this.#view.usage([slot]) : null,
          topLogprobs: this.#meta.topLogprobs(slot),
          returnTokenIds: (flags & SlotFlag.ReturnTokenIds) !== 0,
          parts: parser === null ? null : (parts ?? []),
          toolCallsFinish: parser?.toolCallsFinish ?? false,
        },
        this.#logprobs,
      );
    }
    delta.commit();
    if (!final) return false;
    if (endsStream) {
      if ((flags & SlotFlag.IncludeUsage) !== 0) {
        const usage = this.#view.usage([slot]);
        writeOpenAiUsageChunk(w, kind, h.requestId, h.model, h.created, usage);
      }
      writeStreamDone(w);
    }
    return true;
  }
}
