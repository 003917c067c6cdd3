/**
 * The inline baseline's answers, from canned step records with logprobs, sampling masks and routed
 * experts: the legacy body it builds from its per-token objects is byte for byte the straightforward
 * object form of the same arrays (protocol/response-object.ts, the byte writers' oracle), the packed
 * forms are the encoders' bytes, and its streams fold into the same arrays.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { decodeGenerateBody } from '../../src/client/decode.js';
import { SseParser, StreamAccumulator } from '../../src/client/stream.js';
import { parseGenerateRequest } from '../../src/protocol/generate-request.js';
import { encodeGenerateResponse, type ResponseForm } from '../../src/protocol/generate-response.js';
import type {
  ChoiceColumns,
  GenerateResponseColumns,
} from '../../src/protocol/response-columns.js';
import { stringifyGenerateResponse } from '../../src/protocol/response-object.js';
import { FinishReason } from '../../src/wire/types.js';
import { type CoordinatorRig, FakeReply, startCoordinatorRig } from './coordinator-rig.js';
import { TINY_GEOMETRY } from './output/step-records.js';

const PROMPT = [5, 17, 300];
const WIDTH = TINY_GEOMETRY.layers * TINY_GEOMETRY.topk;
const OPTIONS = {
  vocabSize: 1000,
  maxModelLen: 4096,
  defaultReturnSamplingMask: false,
  defaultReturnRoutedExperts: false,
};

/** What the engine emits for one sequence: per token its id, logprob, kept ids and weight version. */
interface Canned {
  tokens: number[];
  logprobs: number[];
  masks: number[][];
  versions: number[];
  finish: number;
  stopTokenId: number;
}

function canned(seed: number, count: number, finish: number = FinishReason.Length): Canned {
  const c: Canned = { tokens: [], logprobs: [], masks: [], versions: [], finish, stopTokenId: -1 };
  for (let k = 0; k < count; k++) {
    const token = 10 + ((seed * 31 + k * 17) % 900);
    c.tokens.push(token);
    c.logprobs.push(Math.fround(-((seed + k) % 13) / 7 - 0.013));
    // A count of 0 ("no mask at this position") every fourth position.
    c.masks.push(k % 4 === 2 ? [] : Array.from({ length: 1 + (k % 3) }, (_, m) => token + m));
    c.versions.push(k < count / 2 ? 1 : 2);
  }
  if (finish === FinishReason.Stop) c.stopTokenId = c.tokens.at(-1)!;
  return c;
}

/** The routing row of sequence position `pos` for the sequence seeded `seed`. */
function routingRow(seed: number, pos: number): number[] {
  return Array.from({ length: WIDTH }, (_, k) => (seed * 13 + pos * 7 + k * 3) % 256);
}

/** Output k of the sequence: its token, and the rows forwarded for it (the prompt's at prefill). */
function emit(rig: CoordinatorRig, slot: number, seed: number, c: Canned, k: number): void {
  const from = k === 0 ? 0 : PROMPT.length + k - 1;
  const to = PROMPT.length + k;
  const routing: number[] = [];
  for (let pos = from; pos < to; pos++) routing.push(...routingRow(seed, pos));
  const last = k === c.tokens.length - 1;
  rig.emit(slot, {
    token: c.tokens[k]!,
    logprob: c.logprobs[k]!,
    maskIds: c.masks[k]!,
    weightVersion: c.versions[k]!,
    routingFirstPos: from,
    routing,
    finish: last ? c.finish : FinishReason.None,
    stopTokenId: last ? c.stopTokenId : -1,
  });
}

/** The columns the answer must hold for `c`, with rows from `promptStart` on. */
function columnsOf(index: number, seed: number, c: Canned, promptStart: number): ChoiceColumns {
  const rows: number[] = [];
  const end = PROMPT.length + c.tokens.length - 1;
  for (let pos = promptStart; pos < end; pos++) rows.push(...routingRow(seed, pos));
  return {
    index,
    tokenIds: Int32Array.from(c.tokens),
    logprobs: Float32Array.from(c.logprobs),
    maskCounts: Int32Array.from(c.masks, (m) => m.length),
    maskIds: Int32Array.from(c.masks.flat()),
    routing: {
      data: Uint8Array.from(rows),
      rows: end - promptStart,
      layers: TINY_GEOMETRY.layers,
      topk: TINY_GEOMETRY.topk,
      start: promptStart,
    },
    weightVersions: Int32Array.from(c.versions),
    finishReason: c.finish === FinishReason.Stop ? 'stop' : 'length',
    stopReason: c.stopTokenId >= 0 ? c.stopTokenId : null,
  };
}

function submit(
  rig: CoordinatorRig,
  id: string,
  form: ResponseForm,
  params: Record<string, unknown>,
  stream = false,
): FakeReply {
  const body = {
    token_ids: PROMPT,
    request_id: id,
    stream,
    sampling_params: {
      max_tokens: 64,
      seed: 7,
      logprobs: 0,
      return_sampling_mask: true,
      return_routed_experts: true,
      ...params,
    },
  };
  const reply = new FakeReply();
  rig.coordinator.submit(parseGenerateRequest(body, OPTIONS), reply, form);
  return reply;
}

let rig: CoordinatorRig;

afterEach(async () => {
  await rig?.close();
});

describe('inline output path', () => {
  const forms: ResponseForm[] = ['legacy', 'packed', 'msgpack'];
  for (const form of forms) {
    it(`answers n = 2 with masks and routing, in the ${form} form, as the oracle does`, async () => {
      rig = startCoordinatorRig();
      const promptStart = 1;
      const reply = submit(rig, `n-${form}`, form, {
        n: 2,
        routed_experts_prompt_start: promptStart,
      });
      const slots = rig.slotsOf(`n-${form}`);
      const seqs = [canned(7, 9), canned(8, 6, FinishReason.Stop)];
      // The two sequences' outputs interleave, as they do in one engine step after another.
      for (let k = 0; k < 9; k++) {
        seqs.forEach((c, i) => {
          if (k < c.tokens.length) emit(rig, slots[i]!, 7 + i, c, k);
        });
      }
      await rig.settle();
      expect(reply.body).not.toBeNull();
      const type = form === 'msgpack' ? 'application/msgpack' : 'application/json';
      const expected: GenerateResponseColumns = {
        requestId: `n-${form}`,
        model: rig.config.servedModelName,
        created: decodeGenerateBody(reply.body!, type).created,
        choices: seqs.map((c, i) => columnsOf(i, 7 + i, c, promptStart)),
        usage: { promptTokens: PROMPT.length, completionTokens: 15, cachedTokens: null },
        kvTransferParams: null,
      };
      if (form === 'msgpack') {
        expect(reply.body!.equals(encodeGenerateResponse(expected, 'msgpack'))).toBe(true);
      } else {
        expect(reply.body!.toString()).toBe(stringifyGenerateResponse(expected, form === 'legacy'));
      }
    });
  }

  for (const form of ['legacy', 'packed'] as const) {
    it(`streams the ${form} form: the events fold into the answer's arrays`, () => {
      rig = startCoordinatorRig();
      const reply = submit(rig, `s-${form}`, form, {}, true);
      const [slot] = rig.slotsOf(`s-${form}`);
      const c = canned(9, 7);
      for (let k = 0; k < c.tokens.length; k++) emit(rig, slot!, 9, c, k);
      expect(reply.ended).toBe(true);
      const acc = new StreamAccumulator();
      const events = new SseParser().push(Buffer.concat(reply.chunks));
      expect(events.at(-1)).toEqual({ kind: 'done' });
      for (const e of events.slice(0, -1)) {
        if (e.kind !== 'data') continue;
        const choice = (e.json as { choices: Record<string, unknown>[] }).choices[0]!;
        if (form === 'legacy') {
          // k = 0: vLLM lists the sampled token alone under top_logprobs.
          const [entry] = (choice.logprobs as { content: Record<string, unknown>[] }).content;
          expect(entry!.top_logprobs).toEqual([
            { token: entry!.token, logprob: entry!.logprob, bytes: null },
          ]);
          expect(entry!.bytes).toBeNull();
          expect(Array.isArray(choice.sampling_mask)).toBe(true);
        } else expect(choice.completion_logprobs).toMatchObject({ dtype: 'float32' });
        acc.push(e.json);
      }
      const got = acc.result().choices[0]!;
      const want = columnsOf(0, 9, c, 0);
      expect(Array.from(got.tokenIds)).toEqual(Array.from(want.tokenIds));
      expect(Array.from(got.logprobs!)).toEqual(Array.from(want.logprobs!));
      expect(Array.from(got.mask!.counts)).toEqual(Array.from(want.maskCounts!));
      expect(Array.from(got.mask!.ids)).toEqual(Array.from(want.maskIds!));
      expect(Array.from(got.routedExperts!.data)).toEqual(Array.from(want.routing!.data));
      expect(got.routedExperts!.start).toBe(0);
      expect(Array.from(got.weightVersions!)).toEqual(Array.from(want.weightVersions!));
      expect(got.finishReason).toBe('length');
    });
  }
});
