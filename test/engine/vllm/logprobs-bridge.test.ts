/**
 * Logprobs through the bridge: the ADD asks vLLM for the request's top_logprobs and
 * prompt_logprobs, and what the engine sends back becomes step rows exactly (the top area: the
 * request's own k columns of a wider LogprobsLists; the prompt area: positions from 1 on, chunk
 * after chunk, ids, logprobs and ranks). Against the independent mirror engine over real ZMQ,
 * every layout; a malformed tensor fails only its request; and a prompt whose logprobs exceed
 * one output goes out in pieces (with its routing rows), the token last.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { OutputRoom } from '../../../src/engine/output-room.js';
import { StepOutputs } from '../../../src/engine/step-outputs.js';
import { VllmBridge, type VllmEngineLink } from '../../../src/engine/vllm/bridge.js';
import { VllmBridgeLink } from '../../../src/engine/vllm/bridge-link.js';
import type { BridgeAdd } from '../../../src/engine/vllm/bridge-request.js';
import { getVllmLayout } from '../../../src/engine/vllm/layouts.js';
import { OutputView } from '../../../src/engine/vllm/outputs-reader.js';
import { getModelCard } from '../../../src/wire/model-card.js';
import { RejectReason } from '../../../src/wire/reject.js';
import { type EngineRequest, FinishReason, type SamplingParams } from '../../../src/wire/types.js';
import { until } from '../../until.js';
import * as m from './mirror/codec.js';
import {
  logprobRow,
  MirrorEngine,
  type MirrorEngineOptions,
  promptLogprobRow,
  promptRankAt,
  promptSum,
  rankAt,
  tokenAt,
} from './mirror/engine.js';

const CARD = getModelCard('tiny');
const VOCAB = 1000;
const open: { link: VllmBridgeLink; engine: MirrorEngine }[] = [];

afterEach(async () => {
  for (const { link, engine } of open.splice(0)) {
    engine.close();
    await link.close();
  }
});

/** The link and the mirror run in this process: polled every 5 ms, for at most 5 s. */
const SOON = { timeoutMs: 5_000, intervalMs: 5 };

function params(over: Partial<SamplingParams> = {}): SamplingParams {
  return {
    temperature: 1,
    topP: 1,
    topK: 0,
    minP: 0,
    seed: 1,
    maxTokens: 4,
    minTokens: 0,
    stopTokenIds: new Int32Array(0),
    ignoreEos: true,
    presencePenalty: 0,
    frequencyPenalty: 0,
    repetitionPenalty: 1,
    logprobs: true,
    topLogprobs: 0,
    promptLogprobs: -1,
    returnSamplingMask: false,
    returnRoutedExperts: false,
    routedExpertsPromptStart: 0,
    ...over,
  };
}

function request(slot: number, prompt: number[], over: Partial<SamplingParams>): EngineRequest {
  return {
    server: 0,
    slot,
    promptTokenIds: Int32Array.from(prompt),
    params: params(over),
    priority: 0,
    cacheSalt: null,
    arrivalTimeMs: Date.now(),
  };
}

/** One prompt position as the rows carry it. */
interface Position {
  pos: number;
  ids: number[];
  logprobs: number[];
  ranks: number[];
}

/** Everything a slot's rows carried, in order. */
interface SlotRows {
  tokens: number[];
  ranks: number[];
  top: number[][];
  topLogprobs: number[][];
  prompt: Position[];
  /** Rows that carried prompt positions and no token. */
  promptOnly: number;
  finish: number;
  reject: number;
}

/** Collects what the bridge's steps emit, per slot. */
class Rows {
  readonly bySlot = new Map<number, SlotRows>();

  of(slot: number): SlotRows {
    let r = this.bySlot.get(slot);
    if (r === undefined) {
      r = {
        tokens: [],
        ranks: [],
        top: [],
        topLogprobs: [],
        prompt: [],
        promptOnly: 0,
        finish: FinishReason.None,
        reject: 0,
      };
      this.bySlot.set(slot, r);
    }
    return r;
  }

  take(out: StepOutputs): void {
    for (let i = 0; i < out.count; i++) {
      const r = this.of(out.slot[i]!);
      const width = out.promptWidth[i]!;
      for (let q = 0; q < out.promptPositions[i]!; q++) {
        const at = out.promptStart[i]! + q * width;
        r.prompt.push({
          pos: out.promptFirstPos[i]! + q,
          ids: Array.from(out.promptIds.subarray(at, at + width)),
          logprobs: Array.from(out.promptLogprobs.subarray(at, at + width)),
          ranks: Array.from(out.promptRanks.subarray(at, at + width)),
        });
      }
      if (out.token[i]! >= 0) {
        r.tokens.push(out.token[i]!);
        r.ranks.push(out.rank[i]!);
        const from = out.topStart[i]!;
        const to = from + out.topCount[i]!;
        r.top.push(Array.from(out.topIds.subarray(from, to)));
        r.topLogprobs.push(Array.from(out.topLogprobs.subarray(from, to)));
      } else if (out.promptPositions[i]! > 0) r.promptOnly++;
      if (out.finish[i] !== FinishReason.None) {
        r.finish = out.finish[i]!;
        r.reject = out.rejectReason[i]!;
      }
    }
  }
}

/** A bridge whose link a mirror engine of `era` dialled, and a collector stepping it. */
async function linked(era: m.Era, engine: Partial<MirrorEngineOptions> = {}) {
  const bridge = new VllmBridge({ card: CARD, maxModelLen: 4096, blockSize: 16 });
  const errors: Error[] = [];
  const link = new VllmBridgeLink(bridge, {
    address: '127.0.0.1',
    port: 0,
    version: 'auto',
    pingTimeoutMs: 2_000,
    log: (_level, _message, fields) => {
      const err = (fields as { err?: Error } | undefined)?.err;
      if (err !== undefined) errors.push(err);
    },
  });
  const endpoint = await link.start();
  const mirror = new MirrorEngine({ era, vocab: VOCAB, stepMs: 2, ...engine });
  open.push({ link, engine: mirror });
  await mirror.connect(endpoint);
  await until(
    () => bridge.ready,
    (ready) => ready,
    { ...SOON, what: 'the bridge to be ready' },
  );
  const rows = new Rows();
  const out = new StepOutputs(64);
  const finished = (slot: number) =>
    until(
      () => {
        out.clear();
        bridge.step(out);
        rows.take(out);
        return rows.of(slot).finish;
      },
      (finish) => finish !== FinishReason.None,
      { ...SOON, what: `slot ${slot} to finish` },
    );
  return { bridge, mirror, rows, finished, errors };
}

/** The mirror's prompt rows of positions 1 .. P-1 with k candidates, as the rows carry them. */
function expectedPrompt(prompt: number[], k: number): Position[] {
  return prompt.slice(1).map((token, i) => {
    const pos = i + 1;
    const row = promptLogprobRow(token, pos, k, VOCAB);
    const ranks = [promptRankAt(pos), ...Array.from({ length: k }, (_, j) => j + 1)];
    return { pos, ids: row.ids, logprobs: row.logprobs, ranks };
  });
}

const PROMPT = [3, 9, 27, 81, 243, 5];
const OTHER = [4, 16, 64];

describe.each(m.ERAS)('the bridge against a mirror engine of %s', (era) => {
  it("returns the request's own top-k columns and its prompt logprobs, exactly", async () => {
    // The other request asks 5 candidates: vLLM's LogprobsLists is that wide for both.
    const { bridge, mirror, rows, finished } = await linked(era, { stepWideLogprobs: true });
    bridge.add(request(0, PROMPT, { topLogprobs: 3, promptLogprobs: 2 }));
    bridge.add(request(1, OTHER, { topLogprobs: 5, maxTokens: 6 }));
    await finished(0);
    await finished(1);
    const [a, b] = mirror.adds.map((x) => x.request.sampling_params);
    expect([a?.logprobs, a?.prompt_logprobs]).toEqual([3, 2]);
    expect([b?.logprobs, b?.prompt_logprobs]).toEqual([5, undefined]);
    const tokens = [0, 1, 2, 3].map((i) => tokenAt(promptSum(PROMPT), i, VOCAB));
    const top = tokens.map((t, i) => logprobRow(t, i, 3, VOCAB));
    expect(rows.of(0)).toEqual({
      tokens,
      ranks: [0, 1, 2, 3].map(rankAt),
      top: top.map((r) => r.ids.slice(1)),
      topLogprobs: top.map((r) => r.logprobs.slice(1)),
      prompt: expectedPrompt(PROMPT, 2),
      promptOnly: 0,
      finish: FinishReason.Length,
      reject: 0,
    });
    const other = rows.of(1);
    expect(other.prompt).toEqual([]);
    expect(other.top.map((t) => t.length)).toEqual([5, 5, 5, 5, 5, 5]);
  });
});

describe('the bridge against a mirror engine: prompt logprobs in several outputs', () => {
  it('chunks before the first token continue the positions, on rows without a token', async () => {
    const { bridge, rows, finished } = await linked('0.33', { promptLogprobsChunk: 2 });
    const prompt = [7, 11, 13, 17, 19, 23, 29, 31, 37];
    bridge.add(request(0, prompt, { promptLogprobs: 1, maxTokens: 2 }));
    await finished(0);
    const r = rows.of(0);
    expect(r.prompt).toEqual(expectedPrompt(prompt, 1));
    expect(r.promptOnly).toBe(3);
    expect(r.tokens).toHaveLength(2);
  });

  it("keeps the engine's narrower width (Model Runner V2 scores the prompt token alone)", async () => {
    const { bridge, rows, finished } = await linked('0.29', {
      promptLogprobsTopK: 0,
      promptLogprobsDtype: 'int64',
    });
    bridge.add(request(0, PROMPT, { promptLogprobs: 3, logprobs: false }));
    await finished(0);
    expect(rows.of(0).prompt).toEqual(expectedPrompt(PROMPT, 0));
    expect(rows.of(0).top).toEqual([[], [], [], []]);
  });
});

describe('the bridge against a mirror engine: prompt logprobs it cannot take', () => {
  it('a malformed tensor fails its request alone, naming the field; the link goes on', async () => {
    const era = '0.33';
    const { bridge, mirror, rows, finished, errors } = await linked(era, { stepMs: 20 });
    bridge.add(request(0, PROMPT, { promptLogprobs: 1, maxTokens: 400 }));
    bridge.add(request(1, OTHER, { promptLogprobs: 1, maxTokens: 3 }));
    await until(
      () => mirror.adds.length,
      (n) => n === 2,
      SOON,
    );
    const [a] = mirror.adds.map((x) => x.request.request_id);
    const frames: m.Frames = { aux: [] };
    const bad: unknown[] = m.OUTPUT_FIELDS[era].map((f) => (f === 'num_nans_in_logits' ? 0 : null));
    bad[0] = a;
    bad[1] = [7];
    // float32 token ids: no vLLM sends them.
    bad[3] = [
      m.encodeTensor({ dtype: 'float32', shape: [5, 2], values: Array(10).fill(1) }, frames),
      m.encodeTensor({ dtype: 'float32', shape: [5, 2], values: Array(10).fill(-1) }, frames),
      m.encodeTensor({ dtype: 'int32', shape: [5], values: [1, 1, 1, 1, 1] }, frames),
      null,
    ];
    await mirror.sendRaw([m.pack([0, [bad], null, m.f64(1), null, null, null, null])]);
    await finished(0);
    expect(rows.of(0)).toMatchObject({
      finish: FinishReason.Error,
      reject: RejectReason.EngineFailed,
    });
    expect(errors.map((e) => (e as { param?: string }).param)).toContain(
      'new_prompt_logprobs_tensors.logprob_token_ids',
    );
    await until(
      () => mirror.aborts,
      (aborts) => aborts.includes(a!),
      SOON,
    );
    await finished(1);
    expect(rows.of(1)).toMatchObject({
      finish: FinishReason.Length,
      tokens: [expect.any(Number), expect.any(Number), expect.any(Number)],
    });
    expect(rows.of(1).prompt).toEqual(expectedPrompt(OTHER, 1));
    expect(bridge.ready).toBe(true);
    expect(bridge.undecodable).toBe(1);
  });

  it('more positions than the prompt has fail the request', async () => {
    const era = '0.26';
    const { bridge, mirror, rows, finished } = await linked(era, { stepMs: 60_000 });
    bridge.add(request(0, OTHER, { promptLogprobs: 0 }));
    await until(
      () => mirror.adds.length,
      (n) => n === 1,
      SOON,
    );
    const frames = m.encodeOutputs(era, {
      outputs: [
        {
          request_id: mirror.adds[0]!.request.request_id,
          new_token_ids: [7],
          new_prompt_logprobs_tensors: {
            tokenIds: [[1], [2], [3]],
            logprobs: [[-1], [-1], [-1]],
            ranks: [1, 1, 1],
          },
        },
      ],
    });
    await mirror.sendRaw(frames);
    await finished(0);
    expect(rows.of(0)).toMatchObject({ finish: FinishReason.Error, tokens: [], prompt: [] });
    expect(bridge.undecodable).toBe(1);
  });
});

// ---- the backlog: prompt logprobs past what one output may carry ------------------------------

class FakeLink implements VllmEngineLink {
  adds: BridgeAdd[] = [];
  aborts: string[] = [];
  add(request: BridgeAdd): void {
    this.adds.push(request);
  }
  startDpWave(): void {}
  abort(ids: readonly string[]): void {
    this.aborts.push(...ids);
  }
  async call(): Promise<unknown> {
    return true;
  }
}

/**
 * The first output of a `promptLength`-token prompt as the reader presents it: one token (9) with
 * k = 2 top candidates, all its routing rows (expert ids row % 16), and prompt logprobs of every
 * position, `width` entries each (id p * 10 + e, logprob -(p + e) / 8, rank p % 7 + 1).
 */
function firstOutput(id: string, promptLength: number, width: number): OutputView {
  const o = new OutputView();
  const routing = promptLength * 4 * 4;
  o.body = new Uint8Array(id.length + routing);
  o.body.set(Buffer.from(id, 'latin1'), 0);
  o.idOffset = 0;
  o.idLength = id.length;
  o.tokenIds = Int32Array.from([9]);
  o.tokenCount = 1;
  o.hasLogprobs = true;
  o.logprobWidth = 3;
  o.logprobs = Float32Array.from([-0.5]);
  o.ranks = Int32Array.from([2]);
  o.topIds = Int32Array.from([8, 9]);
  o.topLogprobs = Float32Array.from([-0.25, Number.NEGATIVE_INFINITY]);
  o.hasRoutedExperts = true;
  o.routedRows = promptLength;
  o.routedLayers = 4;
  o.routedTopk = 4;
  o.routedWidth = 1;
  o.routedData = o.body;
  o.routedOffset = id.length;
  for (let r = 0; r < promptLength; r++)
    o.body.fill(r % 16, id.length + r * 16, id.length + (r + 1) * 16);
  const n = promptLength - 1;
  o.hasPromptLogprobs = true;
  o.promptPositions = n;
  o.promptWidth = width;
  o.promptIds = Int32Array.from(
    { length: n * width },
    (_, i) => (Math.floor(i / width) + 1) * 10 + (i % width),
  );
  o.promptLogprobs = Float32Array.from(
    { length: n * width },
    (_, i) => -(Math.floor(i / width) + 1 + (i % width)) / 8,
  );
  o.promptRanks = Int32Array.from({ length: n }, (_, r) => ((r + 1) % 7) + 1);
  return o;
}

describe('the backlog: prompt logprobs larger than one output', () => {
  it('go out in pieces without a token, with the routing rows, positions in order; the token last', () => {
    const bridge = new VllmBridge({ card: CARD, maxModelLen: 4096, blockSize: 16 });
    const link = new FakeLink();
    bridge.attach(0, link, {
      maxModelLen: 4096,
      numGpuBlocks: 100,
      vllmVersion: null,
      dataParallelSize: 1,
      layout: getVllmLayout('0.33'),
    });
    const P = 2000;
    bridge.add(
      request(0, Array(P).fill(1), {
        topLogprobs: 2,
        promptLogprobs: 3,
        returnRoutedExperts: true,
      }),
    );
    // The engine computed 5 candidates (a wider request's); the request keeps its 3.
    bridge.output(firstOutput(link.adds[0]!.requestId, P, 6), 0);
    const room = new OutputRoom(1, 12, 1);
    const out = bridge.newStepOutputs();
    let positions = 0;
    let routing = 0;
    let steps = 0;
    const tokens: number[] = [];
    // A ring that takes ~20 KB a step: the server is held part way, the pieces go on next step.
    for (; steps < 50 && bridge.hasWork(); steps++) {
      out.clear();
      room.open(0, 20_000, 16_384, 4096);
      bridge.step(out, room);
      for (let i = 0; i < out.count; i++) {
        const bytes = room.outputBytes(
          out.maskCount[i]!,
          out.routingRows[i]!,
          out.topCount[i]!,
          out.promptPositions[i]! * out.promptWidth[i]!,
        );
        expect(bytes).toBeLessThanOrEqual(room.outputLimit(0));
        if (out.promptPositions[i]! > 0) {
          expect(out.promptFirstPos[i]).toBe(positions + 1);
          expect(out.promptWidth[i]).toBe(4);
          const at = out.promptStart[i]!;
          const p = out.promptFirstPos[i]!;
          expect(Array.from(out.promptIds.subarray(at, at + 4))).toEqual([
            p * 10,
            p * 10 + 1,
            p * 10 + 2,
            p * 10 + 3,
          ]);
          expect(Array.from(out.promptRanks.subarray(at, at + 4))).toEqual([(p % 7) + 1, 1, 2, 3]);
          expect(out.promptLogprobs[at + 3]).toBe(-(p + 3) / 8);
          positions += out.promptPositions[i]!;
        }
        if (out.routingRows[i]! > 0) {
          expect(out.routingFirstPos[i]).toBe(routing);
          expect(out.routing[out.routingStart[i]! * 12]).toBe(routing % 16);
          routing += out.routingRows[i]!;
        }
        if (out.token[i]! >= 0) {
          tokens.push(out.token[i]!);
          const at = out.topStart[i]!;
          expect(Array.from(out.topIds.subarray(at, at + out.topCount[i]!))).toEqual([8, 9]);
          expect(out.topLogprobs[at + 1]).toBe(-9999);
          expect(out.rank[i]).toBe(2);
        } else {
          expect(out.topCount[i]).toBe(0);
        }
      }
    }
    expect(steps).toBeGreaterThan(2);
    expect(positions).toBe(P - 1);
    expect(routing).toBe(P);
    expect(tokens).toEqual([9]);
    expect(out.token[out.count - 1]).toBe(9);
  });
});
