/**
 * The streamed P/D answer: the prefill call is not streamed (one token), the decode call is, and
 * each decode event is re-written for the client with protocol/'s SSE writers. A choice's first
 * event with routing rows gets the prefill rows in front and loses the decode rows before the
 * prefill's end, so the events' rows run from the request's routed_experts_prompt_start on,
 * contiguous, as a colocated stream's do; later events pass with their own rows. Events are
 * parsed one at a time into typed arrays (client/), never held.
 */
import {
  type DecodedChoice,
  type DecodedRouting,
  decodeChoice,
  decodeUsage,
} from '../client/decode.js';
import { SseParser } from '../client/stream.js';
import { RS_ERR_ROUTER_SHORT_ROWS } from '../errors.js';
import { JsonWriter } from '../protocol/json-writer.js';
import type {
  ChoiceColumns,
  ChoiceFinishReason,
  UsageFigures,
} from '../protocol/response-columns.js';
import {
  writeStreamChunk,
  writeStreamDone,
  writeStreamError,
  writeStreamUsageChunk,
} from '../protocol/sse.js';
import { mergeRouting } from './merge.js';

type Obj = Record<string, unknown>;

interface ChoiceState {
  /** Routing rows still to splice: the prefill's, until the choice's first rows. */
  prefillRows: DecodedRouting | null;
  /** Tokens so far; rows must reach P + tokens - 1 when the choice finishes. */
  tokens: number;
  /** Next position a row is due for. */
  nextRow: number;
}

export class StreamMerger {
  readonly #parser = new SseParser();
  readonly #w = new JsonWriter();
  readonly #requestId: string;
  readonly #legacy: boolean;
  readonly #prefill: DecodedRouting | null;
  readonly #promptTokens: number;
  readonly #cachedTokens: number | null;
  readonly #choices = new Map<number, ChoiceState>();
  done = false;

  constructor(
    requestId: string,
    legacy: boolean,
    prefillRows: DecodedRouting | null,
    promptTokens: number,
    cachedTokens: number | null,
  ) {
    this.#requestId = requestId;
    this.#legacy = legacy;
    this.#prefill = prefillRows;
    this.#promptTokens = promptTokens;
    this.#cachedTokens = cachedTokens;
  }

  /** Decode stream bytes in; the client's SSE bytes out (empty when no event completed). */
  push(bytes: Uint8Array): Buffer {
    const w = this.#w.reset();
    try {
      for (const event of this.#parser.push(bytes)) {
        if (event.kind === 'done') {
          writeStreamDone(w);
          this.done = true;
        } else {
          this.#event(w, event.json as Obj);
        }
      }
    } catch (error) {
      writeStreamError(w, error);
      writeStreamDone(w);
      this.done = true;
    }
    return w.finish();
  }

  /** An error event and the terminator, for a stream that cannot go on. */
  fail(error: unknown): Buffer {
    const w = this.#w.reset();
    writeStreamError(w, error);
    writeStreamDone(w);
    this.done = true;
    return w.finish();
  }

  #event(w: JsonWriter, json: Obj): void {
    if (json.error !== undefined) {
      w.raw('data: ')
        .bytes(Buffer.from(JSON.stringify(json)))
        .raw('\n\n');
      return;
    }
    const created = typeof json.created === 'number' ? json.created : 0;
    const model = typeof json.model === 'string' ? json.model : '';
    const usage = this.#usage(json.usage);
    const raw = Array.isArray(json.choices) ? json.choices : [];
    if (raw.length === 0) {
      if (usage !== null) writeStreamUsageChunk(w, this.#requestId, model, created, usage);
      return;
    }
    const choices = raw.map((c, i) => this.#choice(decodeChoice(c, `choices[${i}]`)));
    writeStreamChunk(
      w,
      { requestId: this.#requestId, model, created, choices, usage },
      this.#legacy,
    );
  }

  #choice(d: DecodedChoice): ChoiceColumns {
    let s = this.#choices.get(d.index);
    if (s === undefined) {
      s = { prefillRows: this.#prefill, tokens: 0, nextRow: this.#prefill?.start ?? 0 };
      this.#choices.set(d.index, s);
    }
    s.tokens += d.tokenIds.length;
    let routing = null;
    const r = d.routedExperts;
    if (s.prefillRows !== null && r !== null) {
      // The first rows: splice by position; merge checks that nothing in between is missing.
      const end = r.start + r.shape[0];
      routing = mergeRouting(s.prefillRows, r, d.index, end);
      s.prefillRows = null;
      s.nextRow = end;
    } else if (r !== null) {
      routing = {
        data: r.data,
        rows: r.shape[0],
        layers: r.shape[1],
        topk: r.shape[2],
        start: r.start,
      };
      s.nextRow = r.start + r.shape[0];
    }
    if (d.finishReason !== null && this.#prefill !== null) {
      const due = this.#promptTokens + s.tokens - 1;
      if (s.nextRow < due) {
        throw new RS_ERR_ROUTER_SHORT_ROWS(d.index, `they end at ${s.nextRow - 1}, not ${due - 1}`);
      }
    }
    return {
      index: d.index,
      tokenIds: d.tokenIds,
      logprobs: d.logprobs,
      maskCounts: d.mask?.counts ?? null,
      maskIds: d.mask?.ids ?? null,
      routing,
      weightVersions: d.weightVersions,
      finishReason: d.finishReason as ChoiceFinishReason | null,
      stopReason: d.stopReason,
    };
  }

  #usage(v: unknown): UsageFigures | null {
    const u = decodeUsage(v);
    if (u === null) return null;
    return {
      promptTokens: u.promptTokens,
      completionTokens: u.completionTokens,
      cachedTokens: this.#cachedTokens,
    };
  }
}
