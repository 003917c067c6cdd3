import type { StepOutputs } from '../../src/engine/step-outputs.js';
import type { EngineConfig } from '../../src/sim/engine-config.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import type { EngineRequest, SamplingParams } from '../../src/wire/types.js';

export function params(overrides: Partial<SamplingParams> = {}): SamplingParams {
  return {
    temperature: 1,
    topP: 0.97,
    topK: 50,
    minP: 0,
    seed: 1,
    maxTokens: 64,
    minTokens: 0,
    stopTokenIds: new Int32Array(0),
    ignoreEos: false,
    presencePenalty: 0,
    frequencyPenalty: 0,
    repetitionPenalty: 1,
    logprobs: true,
    topLogprobs: 0,
    promptLogprobs: -1,
    returnSamplingMask: true,
    returnRoutedExperts: true,
    routedExpertsPromptStart: 0,
    ...overrides,
  };
}

/** A prompt of `length` ids in [0, 990) (clear of the tiny preset's EOS ids 998/999). */
export function prompt(length: number, salt = 0): Int32Array {
  const p = new Int32Array(length);
  for (let i = 0; i < length; i++) p[i] = (i * 37 + salt * 101 + 11) % 990;
  return p;
}

export function request(
  slot: number,
  p: Partial<SamplingParams> = {},
  extra: Partial<EngineRequest> = {},
): EngineRequest {
  return {
    server: 0,
    slot,
    promptTokenIds: prompt(24, slot),
    params: params(p),
    priority: 0,
    cacheSalt: null,
    arrivalTimeMs: slot,
    ...extra,
  };
}

/** Everything the engine emitted for one request, concatenated over steps. */
export interface Collected {
  tokens: number[];
  logprobs: number[];
  /** Per token: its rank, and the top area (ids, logprobs; empty when not asked). */
  ranks: number[];
  topIds: number[][];
  topLogprobs: number[][];
  masks: number[][];
  /** Routing rows flattened, and the absolute position of each row. */
  routing: number[];
  routingPositions: number[];
  /** Prompt logprobs: per emitted prompt position, its position and its 1 + k entries. */
  promptPositions: number[];
  promptIds: number[][];
  promptLogprobs: number[][];
  promptRanks: number[][];
  finish: number;
  stopTokenId: number;
  rejectReason: number;
  numCachedTokens: number;
  weightVersions: number[];
  /** Step index of the first row with a token. */
  firstTokenStep: number;
  rows: number;
}

export function emptyCollected(): Collected {
  return {
    tokens: [],
    logprobs: [],
    ranks: [],
    topIds: [],
    topLogprobs: [],
    masks: [],
    routing: [],
    routingPositions: [],
    promptPositions: [],
    promptIds: [],
    promptLogprobs: [],
    promptRanks: [],
    finish: 0,
    stopTokenId: -1,
    rejectReason: 0,
    numCachedTokens: -1,
    weightVersions: [],
    firstTokenStep: -1,
    rows: 0,
  };
}

export const key = (server: number, slot: number): string => `${server}:${slot}`;

/** Everything a client could observe about a request, for exact comparison. */
export function observable(c: Collected | undefined) {
  if (c === undefined) throw new Error('the request has no outputs');
  return {
    tokens: c.tokens,
    logprobs: c.logprobs,
    ranks: c.ranks,
    topIds: c.topIds,
    topLogprobs: c.topLogprobs,
    masks: c.masks,
    routing: c.routing,
    routingPositions: c.routingPositions,
    promptPositions: c.promptPositions,
    promptIds: c.promptIds,
    promptLogprobs: c.promptLogprobs,
    promptRanks: c.promptRanks,
    finish: c.finish,
    stopTokenId: c.stopTokenId,
  };
}

/** Appends one step's rows to the per-request collections. */
export function collect(out: StepOutputs, into: Map<string, Collected>, stepIndex: number): void {
  for (let j = 0; j < out.count; j++) {
    const k = key(out.server[j] as number, out.slot[j] as number);
    let c = into.get(k);
    if (c === undefined) {
      c = emptyCollected();
      into.set(k, c);
    }
    c.rows++;
    const rows = out.routingRows[j] as number;
    const width = out.routingRowWidth;
    const start = (out.routingStart[j] as number) * width;
    for (let r = 0; r < rows; r++) c.routingPositions.push((out.routingFirstPos[j] as number) + r);
    for (let e = 0; e < rows * width; e++) c.routing.push(out.routing[start + e] as number);
    collectPrompt(out, j, c);
    const token = out.token[j] as number;
    if (token >= 0) {
      if (c.firstTokenStep < 0) c.firstTokenStep = stepIndex;
      c.tokens.push(token);
      c.logprobs.push(out.logprob[j] as number);
      c.ranks.push(out.rank[j] as number);
      const t0 = out.topStart[j] as number;
      const t1 = t0 + (out.topCount[j] as number);
      c.topIds.push(Array.from(out.topIds.subarray(t0, t1)));
      c.topLogprobs.push(Array.from(out.topLogprobs.subarray(t0, t1)));
      const m0 = out.maskStart[j] as number;
      c.masks.push(Array.from(out.maskIds.subarray(m0, m0 + (out.maskCount[j] as number))));
      c.weightVersions.push(out.weightVersion[j] as number);
      c.numCachedTokens = out.numCachedTokens[j] as number;
    }
    if ((out.finish[j] as number) !== 0) {
      c.finish = out.finish[j] as number;
      c.stopTokenId = out.stopTokenId[j] as number;
      c.rejectReason = out.rejectReason[j] as number;
    }
  }
}

/** Appends row j's prompt-logprob positions to c. */
function collectPrompt(out: StepOutputs, j: number, c: Collected): void {
  const width = out.promptWidth[j] as number;
  let at = out.promptStart[j] as number;
  for (let q = 0; q < (out.promptPositions[j] as number); q++) {
    c.promptPositions.push((out.promptFirstPos[j] as number) + q);
    c.promptIds.push(Array.from(out.promptIds.subarray(at, at + width)));
    c.promptLogprobs.push(Array.from(out.promptLogprobs.subarray(at, at + width)));
    c.promptRanks.push(Array.from(out.promptRanks.subarray(at, at + width)));
    at += width;
  }
}

/** Steps until the engine has no work (bounded), collecting every row. */
export function drain(
  engine: SimEngine,
  into = new Map<string, Collected>(),
  maxSteps = 100_000,
): Map<string, Collected> {
  const out = engine.newStepOutputs(8);
  let steps = 0;
  while (engine.hasWork()) {
    if (steps++ >= maxSteps) throw new Error(`engine still busy after ${maxSteps} steps`);
    out.clear();
    engine.step(out);
    collect(out, into, steps);
  }
  return into;
}

/** Builds an engine, adds the requests, runs it dry. */
export function runAll(config: EngineConfig, requests: EngineRequest[]): Map<string, Collected> {
  const engine = new SimEngine(config);
  for (const r of requests) engine.add(r);
  return drain(engine);
}

export const tinyConfig = (overrides: Partial<EngineConfig> = {}): EngineConfig => ({
  preset: 'tiny',
  lengthProfile: 'chat',
  maxSpeed: true,
  ...overrides,
});
