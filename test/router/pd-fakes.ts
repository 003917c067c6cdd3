/**
 * Canned prefill and decode instances for the router's in-process tests: answers written from
 * columns by protocol/'s writers in the form the router asks (msgpack, packed or legacy JSON, an
 * SSE stream), an optional gate that holds the decode answer until the test opens it, and the
 * main-thread merge as the router did it before issue 32 (the reference the merge threads must
 * match byte for byte).
 */
import Fastify from 'fastify';
import { unpack } from 'msgpackr';
import { decodeGenerateBody } from '../../src/client/decode.js';
import { decodePromptLogprobs } from '../../src/client/prompt-logprobs.js';
import {
  GenerateResponseEncoder,
  type ResponseForm,
} from '../../src/protocol/generate-response.js';
import { JsonWriter } from '../../src/protocol/json-writer.js';
import type {
  ChoiceColumns,
  GenerateResponseColumns,
  PromptLogprobColumns,
} from '../../src/protocol/response-columns.js';
import { writeStreamChunk, writeStreamDone } from '../../src/protocol/sse.js';
import { mergeAnswers } from '../../src/router/merge.js';
import { StreamMerger } from '../../src/router/stream-merge.js';

export const PROMPT = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20];
const P = PROMPT.length;
const LAYERS = 2;
const TOPK = 3;

/** Routing rows [start, start + rows): row p holds p + 7 (+ 300 when wide), a row per position. */
function rows(start: number, count: number, wide: boolean) {
  const data = wide
    ? new Uint16Array(count * LAYERS * TOPK)
    : new Uint8Array(count * LAYERS * TOPK);
  for (let r = 0; r < count; r++)
    data.fill(
      ((start + r + 7) % 250) + (wide ? 300 : 0),
      r * LAYERS * TOPK,
      (r + 1) * LAYERS * TOPK,
    );
  return { data, rows: count, layers: LAYERS, topk: TOPK, start };
}

/** Completion tokens [from, from + n) of a choice with every column (logprobs, mask, rows). */
export function choice(from: number, n: number, wide = false, finished = true): ChoiceColumns {
  const counts = new Int32Array(n).map((_, i) => 1 + ((from + i) % 3));
  const ids: number[] = [];
  counts.forEach((c, i) => {
    for (let j = 0; j < c; j++) ids.push(100 + from + i + j);
  });
  return {
    index: 0,
    tokenIds: Int32Array.from({ length: n }, (_, i) => 500 + from + i),
    logprobs: Float32Array.from({ length: n }, (_, i) => -0.25 * ((from + i) % 7)),
    maskCounts: counts,
    maskIds: Int32Array.from(ids),
    // The decode instance's first forward is position P - 1 (after an import).
    routing: rows(P - 1 + from, n, wide),
    weightVersions: new Int32Array(n).fill(3),
    finishReason: finished ? 'length' : null,
    stopReason: null,
  };
}

/** vLLM's prompt logprobs for PROMPT: the prompt token, then k candidates ranked 1..k. */
function promptLogprobs(k: number): PromptLogprobColumns {
  const width = 1 + k;
  const positions = P - 1;
  const ids = new Int32Array(positions * width);
  const logprobs = new Float32Array(positions * width);
  const ranks = new Int32Array(positions * width);
  for (let p = 0; p < positions; p++) {
    ids[p * width] = PROMPT[p + 1] as number;
    logprobs[p * width] = -1.5 - p / 8;
    ranks[p * width] = 2 + (p % 4);
    for (let j = 1; j <= k; j++) {
      ids[p * width + j] = 900 + p + j;
      logprobs[p * width + j] = -0.125 * j;
      ranks[p * width + j] = j;
    }
  }
  return { promptLength: P, positions, width, ids, logprobs, ranks };
}

export interface Canned {
  /** Completion tokens of the decode answer. */
  tokens: number;
  wide?: boolean;
  /** prompt_logprobs k the prefill answer carries, or -1. */
  promptK?: number;
}

export function prefillColumns(c: Canned): GenerateResponseColumns {
  return {
    requestId: 'p',
    model: 'sim-tiny',
    created: 7,
    choices: [{ ...choice(0, 1, c.wide), routing: rows(0, P, c.wide === true) }],
    usage: { promptTokens: P, completionTokens: 1, cachedTokens: 4 },
    kvTransferParams: { do_remote_prefill: true, remote_num_tokens: P, digest: 'abc' },
    promptLogprobs: (c.promptK ?? -1) >= 0 ? promptLogprobs(c.promptK as number) : null,
  };
}

export function decodeColumns(c: Canned): GenerateResponseColumns {
  return {
    requestId: 'd',
    model: 'sim-tiny',
    created: 8,
    choices: [choice(0, c.tokens, c.wide)],
    usage: { promptTokens: P, completionTokens: c.tokens, cachedTokens: 9 },
    kvTransferParams: null,
  };
}

/** The decode stream: events of `per` tokens, the last with its finish reason, then [DONE]. */
export function decodeEvents(c: Canned, per: number): Buffer[] {
  const out: Buffer[] = [];
  for (let from = 0; from < c.tokens; from += per) {
    const n = Math.min(per, c.tokens - from);
    const w = new JsonWriter();
    const last = from + n >= c.tokens;
    writeStreamChunk(
      w,
      {
        requestId: 'd',
        model: 'sim-tiny',
        created: 8,
        choices: [choice(from, n, c.wide, last)],
        usage: null,
      },
      false,
    );
    out.push(w.finish());
  }
  const w = new JsonWriter();
  writeStreamDone(w);
  out.push(w.finish());
  return out;
}

const encoder = new GenerateResponseEncoder();

/** The form an instance answers: msgpack when accepted, legacy when `"packed": false`. */
function formOf(accept: string | undefined, body: Record<string, unknown>): ResponseForm {
  if (accept?.includes('msgpack')) return 'msgpack';
  return body.packed === false ? 'legacy' : 'packed';
}

export interface FakeInstance {
  url: string;
  /** Bodies of the generate calls it received (unpacked). */
  bodies: Record<string, unknown>[];
  /** While set, answers wait for it (one promise for all). */
  hold: Promise<void> | null;
  /** Streamed answers: after each event, wait for this (null: no wait). */
  between: (() => Promise<void>) | null;
  close(): Promise<void>;
}

/** An instance answering `columns` (or `events` when asked for a stream). */
export async function fakeInstance(
  columns: GenerateResponseColumns,
  events: Buffer[] = [],
): Promise<FakeInstance> {
  const app = Fastify();
  app.addContentTypeParser('application/msgpack', { parseAs: 'buffer' }, (_r, b, done) =>
    done(null, unpack(b as Buffer)),
  );
  const fake: FakeInstance = {
    url: '',
    bodies: [],
    hold: null,
    between: null,
    close: async () => {
      await app.close();
    },
  };
  app.post('/inference/v1/generate', async (req, reply) => {
    const body = req.body as Record<string, unknown>;
    fake.bodies.push(body);
    if (fake.hold !== null) await fake.hold;
    if (body.stream === true) {
      reply.hijack();
      reply.raw.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const e of events) {
        reply.raw.write(e);
        if (fake.between !== null) await fake.between();
      }
      reply.raw.end();
      return reply;
    }
    const form = formOf(req.headers.accept, body);
    const type = form === 'msgpack' ? 'application/msgpack' : 'application/json';
    return reply.type(type).send(encoder.encode(columns, form));
  });
  app.get('/health', async () => '');
  fake.url = await app.listen({ host: '127.0.0.1', port: 0 });
  return fake;
}

/**
 * The non-streamed answer as pd-proxy.ts merged it on the main thread before issue 32, from the
 * bytes both instances answer: the reference for the merge threads.
 */
export function mainThreadAnswer(
  c: Canned,
  form: ResponseForm,
  requestId: string,
  body: Record<string, unknown>,
): Buffer {
  const k = ((body.sampling_params ?? {}) as { prompt_logprobs?: number }).prompt_logprobs ?? -1;
  const prefillForm: ResponseForm = form === 'legacy' && k >= 0 ? 'legacy' : 'msgpack';
  const p = decodeGenerateBody(
    encoder.encode(prefillColumns(c), prefillForm),
    prefillForm === 'msgpack' ? 'application/msgpack' : 'application/json',
  );
  const d = decodeGenerateBody(encoder.encode(decodeColumns(c), 'msgpack'), 'application/msgpack');
  const merged = mergeAnswers(p, d, requestId, body.kv_transfer_params ?? null);
  if (k >= 0) merged.promptLogprobs = decodePromptLogprobs(p.promptLogprobs, PROMPT, k);
  return encoder.encode(merged, form);
}

/** The streamed answer as router-app.ts re-wrote it on the main thread before issue 32. */
export function mainThreadStream(c: Canned, per: number, requestId: string, legacy: boolean) {
  const p = decodeGenerateBody(encoder.encode(prefillColumns(c), 'msgpack'), 'application/msgpack');
  const merger = new StreamMerger(
    requestId,
    legacy,
    p.choices[0]?.routedExperts ?? null,
    p.usage?.promptTokens ?? 0,
    p.usage?.cachedTokens ?? null,
  );
  return Buffer.concat(decodeEvents(c, per).map((e) => merger.push(e)));
}
