/**
 * Prompt logprobs from `ringserve engine --vllm-protocol`: the ADD's prompt_logprobs reaches the
 * engine core, and the core's StepOutputs prompt area (per prefill chunk) goes out as vLLM sends
 * it, one LogprobsTensors of every position in the request's first output with tokens, nothing
 * before or after, in the layout of every era; decoded by the independent mirror (its decoder and
 * its frontend, which assembles them as vLLM's LogprobsProcessor does).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { StepOutputs } from '../../../src/engine/step-outputs.js';
import { dialFrontend } from '../../../src/engine/vllm/headless/dial.js';
import { type HeadlessCore, VllmHeadlessEngine } from '../../../src/engine/vllm/headless/engine.js';
import { toEngineRequest } from '../../../src/engine/vllm/headless/engine-request.js';
import { LiveRequests } from '../../../src/engine/vllm/headless/live-requests.js';
import { StepEncoder } from '../../../src/engine/vllm/headless/step-encoder.js';
import { decodeAdd, encodeAdd, getVllmLayout } from '../../../src/engine/vllm/index.js';
import { getModelCard } from '../../../src/wire/model-card.js';
import type { RejectReason } from '../../../src/wire/reject.js';
import { MAX_TOP_LOGPROBS } from '../../../src/wire/sampling-check.js';
import {
  type EngineRequest,
  type EngineStats,
  FinishReason,
  type StepTiming,
} from '../../../src/wire/types.js';
import * as m from './mirror/codec.js';
import { MirrorFrontend } from './mirror/frontend.js';

const CARD = getModelCard('tiny');

/** Prompt position p's entries as the test's core gives them: ids p*10+e, logprob -(p+e)/8. */
function entry(p: number, e: number): { id: number; logprob: number; rank: number } {
  return { id: p * 10 + e, logprob: -(p + e) / 8, rank: e === 0 ? (p % 5) + 1 : e };
}

/** Appends positions [from, from + n) of width w to row i of `out`. */
function putPrompt(out: StepOutputs, i: number, from: number, n: number, w: number): void {
  const at = out.reservePrompt(n * w);
  for (let q = 0; q < n; q++) {
    for (let e = 0; e < w; e++) {
      const x = entry(from + q, e);
      out.promptIds[at + q * w + e] = x.id;
      out.promptLogprobs[at + q * w + e] = x.logprob;
      out.promptRanks[at + q * w + e] = x.rank;
    }
  }
  out.promptStart[i] = at;
  out.promptPositions[i] = n;
  out.promptFirstPos[i] = from;
  out.promptWidth[i] = w;
  out.promptLength = at + n * w;
}

/** The LogprobsTensors the mirror should decode for positions 1 .. n of width w. */
function tensorsOf(n: number, w: number): m.PromptLogprobs {
  const positions = Array.from({ length: n }, (_, q) => q + 1);
  return {
    tokenIds: positions.map((p) => Array.from({ length: w }, (_, e) => entry(p, e).id)),
    logprobs: positions.map((p) => Array.from({ length: w }, (_, e) => entry(p, e).logprob)),
    ranks: positions.map((p) => entry(p, 0).rank),
    idsDtype: 'int32',
    ranksDtype: 'int32',
  };
}

function newOut(): StepOutputs {
  const out = new StepOutputs(8);
  out.shapeRouting(CARD.routingLayers, CARD.expertsPerToken, CARD.numExperts);
  return out;
}

describe.each(m.ERAS)('the headless engine encodes prompt logprobs, layout %s', (era) => {
  it('held per prefill chunk, sent whole with the first token; nil elsewhere', () => {
    const layout = getVllmLayout(era);
    const encoder = new StepEncoder(layout, {
      hiddenLayers: CARD.numHiddenLayers,
      routingLayers: CARD.routingLayers,
      topk: CARD.expertsPerToken,
      wide: false,
    });
    const table = new LiveRequests(8);
    table.add('a', 101, true, false, 2); // slot 0: 100 positions of width 3
    table.add('b', 3, true, false); // slot 1: did not ask
    table.add('c', 1, false, false, 0); // slot 2: a one-token prompt asks: an empty tensor
    const out = newOut();
    const decode = (frames: Buffer[] | null) =>
      m.decodeOutputs(frames ?? [], era).message.outputs.map((o) => [o.request_id, o] as const);

    // Step 1: a's first chunk (positions 1..60, held); c's first token.
    let i = out.addRow(0, 0, 0);
    putPrompt(out, i, 1, 60, 3);
    i = out.addRow(0, 2, 0);
    out.token[i] = 70;
    const first = new Map(decode(encoder.encode(out, table, 0, null, 1)));
    expect([...first.keys()]).toEqual(['c']);
    expect(first.get('c')!.new_prompt_logprobs_tensors).toEqual(tensorsOf(0, 1));

    // Step 2: a's last chunk with its first token (61..100, position 60 again is skipped);
    // b's first token (its prompt area is not asked for).
    out.clear();
    i = out.addRow(0, 0, 0);
    out.token[i] = 50;
    putPrompt(out, i, 60, 41, 3);
    i = out.addRow(0, 1, 0);
    out.token[i] = 60;
    putPrompt(out, i, 1, 2, 1);
    const frames = encoder.encode(out, table, 0, null, 2)!;
    expect(frames.length).toBeGreaterThan(1); // 100 x 3 int32 ids: an aux frame
    const second = new Map(decode(frames));
    expect(second.get('a')!.new_prompt_logprobs_tensors).toEqual(tensorsOf(100, 3));
    expect(second.get('b')!.new_prompt_logprobs_tensors).toBeNull();
    const raw = m.unpack(frames[0]!) as unknown[][][][];
    expect(raw[1]![0]![3]).toHaveLength(4);

    // Step 3: a's next token carries none, even if a row brings prompt entries again.
    out.clear();
    i = out.addRow(0, 0, 0);
    out.token[i] = 51;
    out.finish[i] = FinishReason.Length;
    putPrompt(out, i, 100, 1, 3);
    const third = new Map(decode(encoder.encode(out, table, 0, null, 3)));
    expect(third.get('a')!.new_prompt_logprobs_tensors).toBeNull();
  });
});

describe("the ADD's prompt_logprobs, engine side", () => {
  it('reaches the engine request: k, capped at the most top logprobs; none is -1', () => {
    const layout = getVllmLayout('0.33');
    const engineRequest = (promptLogprobs: number | null) => {
      const payload = encodeAdd(layout, {
        requestId: 'r',
        promptTokenIds: [1, 2, 3],
        params: { maxTokens: 4, promptLogprobs },
        arrivalTime: 1,
        cacheSalt: null,
        priority: 0,
        clientIndex: 0,
      });
      const wide = { routedExperts: false, samplingMasks: false };
      return toEngineRequest(decodeAdd(layout, payload), 0, wide).params.promptLogprobs;
    };
    expect([2, 0, null, -1, 50].map(engineRequest)).toEqual([
      2,
      0,
      -1,
      MAX_TOP_LOGPROBS,
      MAX_TOP_LOGPROBS,
    ]);
  });
});

// ---- the whole engine, over ZMQ, against the mirror's frontend ----------------------------------

/**
 * A core that answers each request with a prefill in two chunks (prompt positions in each when
 * asked), then `maxTokens` tokens; it records the requests it was given.
 */
class ScriptedCore implements HeadlessCore {
  readonly model = CARD;
  readonly paused = false;
  readonly weightVersion = 0;
  readonly broadcaster = null;
  readonly requests: EngineRequest[] = [];
  readonly #live = new Map<number, { req: EngineRequest; step: number }>();
  readonly #timing: StepTiming = {
    ms: 0,
    sampledSeqs: 0,
    decodeSeqs: 0,
    prefillTokens: 0,
    totalContext: 0,
    generatedTokens: 0,
  };

  newStepOutputs(): StepOutputs {
    return newOut();
  }
  add(request: EngineRequest): void {
    this.requests.push(request);
    this.#live.set(request.slot, { req: request, step: 0 });
  }
  reject(_server: number, slot: number, _reason?: RejectReason): void {
    this.#live.delete(slot);
  }
  abort(_server: number, slot: number): void {
    this.#live.delete(slot);
  }
  abortServer(): void {}
  pause(): void {}
  resume(): void {}
  resetPrefixCache(): boolean {
    return true;
  }
  updateWeights(): number {
    return 0;
  }
  initBroadcaster(): void {}
  async loadLora(): Promise<void> {}
  unloadLora(): void {}
  loraLoaded(): boolean {
    return false;
  }
  loraIds(): number[] {
    return [];
  }
  hasWork(): boolean {
    return this.#live.size > 0;
  }
  step(out: StepOutputs): StepTiming {
    for (const [slot, s] of this.#live) {
      const { req } = s;
      const k = req.params.promptLogprobs;
      const positions = req.promptTokenIds.length - 1;
      const half = Math.floor(positions / 2);
      const i = out.addRow(0, slot, 0);
      if (s.step === 0) {
        if (k >= 0) putPrompt(out, i, 1, half, 1 + k);
      } else {
        if (s.step === 1 && k >= 0) putPrompt(out, i, half + 1, positions - half, 1 + k);
        out.token[i] = 100 + s.step;
        if (s.step === req.params.maxTokens) {
          out.finish[i] = FinishReason.Length;
          this.#live.delete(slot);
        }
      }
      s.step++;
    }
    return this.#timing;
  }
  stats(into?: EngineStats): EngineStats {
    const s = into ?? ({} as EngineStats);
    Object.assign(s, {
      running: this.#live.size,
      waiting: 0,
      kvUsage: 0,
      numPreemptions: 0,
      prefixQueries: 0,
      prefixHits: 0,
      promptTokens: 0,
      generationTokens: 0,
      weightVersion: 0,
      numGpuBlocks: 100,
      blockSize: 16,
      steps: 0,
    });
    return s;
  }
}

const running: { engine: VllmHeadlessEngine; done: Promise<unknown>; frontend: MirrorFrontend }[] =
  [];

afterEach(async () => {
  for (const r of running.splice(0)) {
    r.engine.stop();
    await r.done;
    r.frontend.close();
  }
});

async function startEngine(era: m.Era) {
  const layout = getVllmLayout(era);
  const frontend = await MirrorFrontend.open({ era });
  const port = Number(new URL(frontend.handshakeAddress.replace('tcp://', 'http://')).port);
  const core = new ScriptedCore();
  const sockets = dialFrontend('127.0.0.1', port, layout, {
    maxModelLen: 4096,
    numGpuBlocks: 100,
    blockSize: 16,
    dpStatsAddress: null,
    dtype: 'bfloat16',
    vllmVersion: `${layout.release}+ringserve`,
    worldSize: 1,
    dataParallelSize: 1,
    dataParallelRank: 0,
    maxNumSeqs: 8,
    maxNumBatchedTokens: 2048,
    supportsLora: false,
    maxLoras: 0,
    kvCacheSizeTokens: 1600,
    instanceId: 'test',
  });
  const [s] = await Promise.all([sockets, frontend.runHandshake()]);
  const log = { info() {}, warn() {}, error() {}, fatal() {} };
  const wide = { routedExperts: false, samplingMasks: false };
  const engine = new VllmHeadlessEngine({ engine: core, layout, sockets: s, wide, rank: 0, log });
  running.push({ engine, done: engine.run(), frontend });
  return { frontend, core };
}

describe.each(m.ERAS)('`ringserve engine --vllm-protocol` (%s), as the mirror sees it', (era) => {
  it("answers prompt_logprobs as vLLM: every position once, in the first token's output", async () => {
    const { frontend, core } = await startEngine(era);
    const prompt = [5, 6, 7, 8, 9, 10, 11];
    const asked = await frontend.add(era, {
      prompt_token_ids: prompt,
      sampling_params: { max_tokens: 3, logprobs: 0, prompt_logprobs: 2 },
    });
    const plain = await frontend.add(era, {
      prompt_token_ids: prompt,
      sampling_params: { max_tokens: 2 },
    });
    const outputs = await frontend.finished(asked);
    await frontend.finished(plain);
    expect(core.requests.map((r) => r.params.promptLogprobs)).toEqual([2, -1]);
    expect(outputs.map((o) => o.new_prompt_logprobs_tensors === null)).toEqual([false, true, true]);
    expect(outputs[0]!.new_prompt_logprobs_tensors).toEqual(tensorsOf(6, 3));
    const positions = frontend.promptLogprobsOf(asked)!;
    expect(positions).toHaveLength(prompt.length);
    expect(positions[0]).toBeNull();
    expect(positions[4]).toEqual(
      [0, 1, 2].map((e) => ({
        tokenId: entry(4, e).id,
        logprob: entry(4, e).logprob,
        rank: entry(4, e).rank,
      })),
    );
    expect(frontend.outputsOf(plain).every((o) => o.new_prompt_logprobs_tensors === null)).toBe(
      true,
    );
    expect(frontend.errors).toEqual([]);
  });
});
