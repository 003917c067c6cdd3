import { RS_ERR_CLIENT_DECODE } from '../errors.js';
import {
  type DecodedChoice,
  type DecodedUsage,
  decodeChoice,
  decodeUsage,
  type GenerateResult,
} from './decode.js';

/**
 * The client side of a streamed generate: an SSE parser (bytes in any chunking → `data:` payloads)
 * and an accumulator that concatenates the chunks' new positions into the same typed arrays a
 * non-streamed answer decodes to, checking that routing rows arrive contiguous.
 */

export type SseEvent = { kind: 'data'; json: unknown } | { kind: 'done' };

/** Splits an SSE byte stream into events; multi-line `data:` fields are joined with `\n`. */
export class SseParser {
  readonly #decoder = new TextDecoder();
  #pending = '';

  /** Feed bytes; returns the events completed by them. */
  push(bytes: Uint8Array): SseEvent[] {
    this.#pending += this.#decoder.decode(bytes, { stream: true });
    const events: SseEvent[] = [];
    for (;;) {
      const end = this.#pending.search(/\r?\n\r?\n/);
      if (end === -1) break;
      const block = this.#pending.slice(0, end);
      this.#pending = this.#pending.slice(end).replace(/^\r?\n\r?\n/, '');
      const event = parseBlock(block);
      if (event !== null) events.push(event);
    }
    return events;
  }

  /** Bytes left over that never formed a complete event (a cut stream). */
  get leftover(): string {
    return this.#pending;
  }
}

function parseBlock(block: string): SseEvent | null {
  const data: string[] = [];
  for (const line of block.split(/\r?\n/)) {
    if (line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
    // Comments (`:`), `event:`, `id:` and `retry:` lines carry nothing ringserve uses.
  }
  if (data.length === 0) return null;
  const text = data.join('\n');
  if (text === '[DONE]') return { kind: 'done' };
  try {
    return { kind: 'data', json: JSON.parse(text) };
  } catch {
    throw new RS_ERR_CLIENT_DECODE(`stream event is not JSON: ${text.slice(0, 80)}`);
  }
}

/** One decoded stream event: the new positions of some choices, and usage when sent. */
export interface StreamDelta {
  requestId: string;
  choices: DecodedChoice[];
  usage: DecodedUsage | null;
}

interface ChoiceParts {
  index: number;
  finishReason: string | null;
  stopReason: number | string | null;
  tokens: Int32Array[];
  logprobs: Float32Array[] | null;
  counts: Int32Array[] | null;
  ids: Int32Array[] | null;
  routing: {
    parts: (Uint8Array | Uint16Array)[];
    start: number;
    rows: number;
    layers: number;
    topk: number;
  } | null;
  versions: Int32Array[] | null;
}

/** Concatenates stream deltas into one GenerateResult. */
export class StreamAccumulator {
  #requestId = '';
  #model = '';
  #created = 0;
  #usage: DecodedUsage | null = null;
  readonly #choices = new Map<number, ChoiceParts>();

  /** Decode one `data:` payload, fold it in, and return it decoded. */
  push(json: unknown): StreamDelta {
    const e = json as Record<string, unknown>;
    if (typeof e !== 'object' || e === null || !Array.isArray(e.choices)) {
      throw new RS_ERR_CLIENT_DECODE('stream event without a choices array');
    }
    if (this.#requestId === '') {
      this.#requestId = String(e.request_id ?? '');
      this.#model = String(e.model ?? '');
      this.#created = typeof e.created === 'number' ? e.created : 0;
    }
    const choices = e.choices.map((c, i) => decodeChoice(c, `event.choices[${i}]`));
    for (const c of choices) this.#fold(c);
    const usage = decodeUsage(e.usage, 'event.usage');
    if (usage !== null) this.#usage = usage;
    return { requestId: this.#requestId, choices, usage };
  }

  #fold(c: DecodedChoice): void {
    let p = this.#choices.get(c.index);
    if (p === undefined) {
      p = {
        index: c.index,
        finishReason: null,
        stopReason: null,
        tokens: [],
        logprobs: null,
        counts: null,
        ids: null,
        routing: null,
        versions: null,
      };
      this.#choices.set(c.index, p);
    }
    p.tokens.push(c.tokenIds);
    if (c.finishReason !== null) p.finishReason = c.finishReason;
    if (c.stopReason !== null) p.stopReason = c.stopReason;
    if (c.logprobs !== null) (p.logprobs ??= []).push(c.logprobs);
    if (c.mask !== null) {
      (p.counts ??= []).push(c.mask.counts);
      (p.ids ??= []).push(c.mask.ids);
    }
    if (c.weightVersions !== null) (p.versions ??= []).push(c.weightVersions);
    const r = c.routedExperts;
    if (r === null) return;
    const [rows, layers, topk] = r.shape;
    if (p.routing === null) {
      p.routing = { parts: [r.data], start: r.start, rows, layers, topk };
      return;
    }
    const expected = p.routing.start + p.routing.rows;
    if (r.start !== expected || layers !== p.routing.layers || topk !== p.routing.topk) {
      throw new RS_ERR_CLIENT_DECODE(
        `choice ${c.index}: routing rows start at ${r.start} [${r.shape}], expected ${expected} [*, ${p.routing.layers}, ${p.routing.topk}]`,
      );
    }
    p.routing.parts.push(r.data);
    p.routing.rows += rows;
  }

  /** Everything received so far, as one result (the same arrays a non-streamed answer gives). */
  result(): GenerateResult {
    const choices = [...this.#choices.values()]
      .sort((a, b) => a.index - b.index)
      .map(
        (p): DecodedChoice => ({
          index: p.index,
          finishReason: p.finishReason,
          stopReason: p.stopReason,
          tokenIds: concat(Int32Array, p.tokens),
          logprobs: p.logprobs === null ? null : concat(Float32Array, p.logprobs),
          mask:
            p.counts === null || p.ids === null
              ? null
              : { counts: concat(Int32Array, p.counts), ids: concat(Int32Array, p.ids) },
          routedExperts:
            p.routing === null
              ? null
              : {
                  data: concatRouting(p.routing.parts),
                  shape: [p.routing.rows, p.routing.layers, p.routing.topk],
                  start: p.routing.start,
                },
          weightVersions: p.versions === null ? null : concat(Int32Array, p.versions),
        }),
      );
    return {
      requestId: this.#requestId,
      model: this.#model,
      created: this.#created,
      choices,
      usage: this.#usage,
      promptLogprobs: null,
      kvTransferParams: null,
    };
  }
}

function concat<T extends Int32Array | Float32Array>(ctor: new (n: number) => T, parts: T[]): T {
  let n = 0;
  for (const part of parts) n += part.length;
  const out = new ctor(n);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** Chunks may differ in dtype (uint8 where a chunk's ids all fit); widen to uint16 if any is. */
function concatRouting(parts: (Uint8Array | Uint16Array)[]): Uint8Array | Uint16Array {
  let n = 0;
  let wide = false;
  for (const part of parts) {
    n += part.length;
    wide ||= part instanceof Uint16Array;
  }
  const out = wide ? new Uint16Array(n) : new Uint8Array(n);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}
