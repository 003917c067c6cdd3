/**
 * Mutated vLLM engine messages fed to the bridge's frontend, in-process (src/engine/vllm/): a
 * bridge with a few requests in flight reads a valid EngineCoreOutputs of a random layout (which
 * confirms the layout), then the same step of outputs mutated one way (truncated, a byte flipped,
 * bytes inserted, an integer made 64-bit, outputs of another layout's length, a utility reply or
 * scheduler_stats of the wrong shape, outputs in another order), then a valid message again.
 * Properties: reading never throws (every fault is a coded RS_ERR_VLLM_DECODE the reader isolates),
 * no request is given a token of another request (each request's tokens are one value whose four
 * uint32 bytes are equal, so one corrupted byte cannot turn it into another's), the bridge stays
 * attached, and the requests the mutation did not touch go on: the valid message after it is read
 * in full. The bridge has two data-parallel ranks, and the messages come from rank 0 while they
 * also name a request that runs on rank 1: that request is never given a token, nor failed, by
 * what rank 0 sent.
 */
import fc from 'fast-check';
import { StepOutputs } from '../../src/engine/step-outputs.js';
import { VllmBridge, type VllmEngineLink } from '../../src/engine/vllm/bridge.js';
import type { BridgeAdd } from '../../src/engine/vllm/bridge-request.js';
import { VLLM_LAYOUTS, type VllmLayout } from '../../src/engine/vllm/layouts.js';
import { OutputRecord, OutputsEncoder } from '../../src/engine/vllm/outputs.js';
import { OutputsReader, type OutputsSink } from '../../src/engine/vllm/outputs-reader.js';
import { isRingserveError } from '../../src/errors.js';
import { getModelCard } from '../../src/wire/model-card.js';
import { type EngineRequest, FinishReason } from '../../src/wire/types.js';

const CARD = getModelCard('tiny');
/**
 * Request k's token, every step: four equal bytes, so no single corrupted byte of one request's
 * token makes another's (the bridge does not check output tokens against the vocabulary).
 */
const tokenOf = (k: number): number => (k + 1) * 0x01010101;

export type Mutation =
  | { kind: 'truncate'; at: number }
  | { kind: 'flip'; at: number; value: number }
  | { kind: 'insert'; at: number; bytes: number[] }
  | { kind: 'int64'; at: number }
  | { kind: 'layout'; other: number }
  | { kind: 'utility'; elements: number }
  | { kind: 'stats'; value: number }
  | { kind: 'reorder' };

export interface VllmCase {
  layout: number;
  requests: number;
  mutation: Mutation;
}

const position = fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true });

export const vllmCase: fc.Arbitrary<VllmCase> = fc.record({
  layout: fc.nat({ max: VLLM_LAYOUTS.length - 1 }),
  requests: fc.integer({ min: 2, max: 4 }),
  mutation: fc.oneof(
    position.map((at) => ({ kind: 'truncate' as const, at })),
    fc
      .tuple(position, fc.nat({ max: 255 }))
      .map(([at, value]) => ({ kind: 'flip' as const, at, value })),
    fc
      .tuple(position, fc.array(fc.nat({ max: 255 }), { minLength: 1, maxLength: 9 }))
      .map(([at, bytes]) => ({ kind: 'insert' as const, at, bytes })),
    position.map((at) => ({ kind: 'int64' as const, at })),
    fc.nat({ max: VLLM_LAYOUTS.length - 1 }).map((other) => ({ kind: 'layout' as const, other })),
    fc.nat({ max: 6 }).map((elements) => ({ kind: 'utility' as const, elements })),
    fc.nat({ max: 255 }).map((value) => ({ kind: 'stats' as const, value })),
    fc.constant({ kind: 'reorder' as const }),
  ),
});

class RecordingLink implements VllmEngineLink {
  readonly adds: BridgeAdd[] = [];
  add(request: BridgeAdd): void {
    this.adds.push(request);
  }
  abort(): void {}
  startDpWave(): void {}
  async call(): Promise<unknown> {
    return null;
  }
}

function request(slot: number): EngineRequest {
  return {
    server: 0,
    slot,
    promptTokenIds: Int32Array.from([1, 2, 3]),
    params: {
      temperature: 1,
      topP: 1,
      topK: 0,
      minP: 0,
      seed: slot,
      maxTokens: 100,
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
      returnRoutedExperts: true,
      routedExpertsPromptStart: 0,
    },
    priority: 0,
    cacheSalt: null,
    arrivalTimeMs: 0,
  };
}

/** One step: an output of one token for each request (in `order`), as a vLLM engine of `layout` writes it. */
function step(
  layout: VllmLayout,
  ids: readonly string[],
  order: readonly number[],
  first: boolean,
): Buffer[] {
  const e = new OutputsEncoder(layout);
  const o = new OutputRecord();
  const rows = first ? 3 : 1;
  const routing = new Uint8Array(rows * 4 * 4).fill(1);
  e.begin(0, order.length);
  for (const k of order) {
    o.requestId = ids[k]!;
    o.tokenIds = Int32Array.of(tokenOf(k));
    o.tokenCount = 1;
    o.logprobs = Float32Array.of(-0.5);
    o.ranks = Int32Array.of(1);
    o.routedBytes = routing;
    o.routedRows = rows;
    o.routedLayers = 4;
    o.routedTopk = 4;
    e.output(o);
  }
  const stats = {
    numRunningReqs: ids.length,
    numWaitingReqs: 0,
    kvCacheUsage: 0.1,
    prefixRequests: 0,
    prefixQueries: 0,
    prefixHits: 0,
    stepCounter: 1,
  };
  return e.end(stats, 1, null);
}

function mutate(frames: Buffer[], c: VllmCase, ids: readonly string[]): Buffer[] {
  const m = c.mutation;
  const body = frames[0]!;
  const at = (p: number): number => Math.floor(p * body.length);
  switch (m.kind) {
    case 'truncate':
      return [body.subarray(0, at(m.at)), ...frames.slice(1)];
    case 'flip': {
      const b = Buffer.from(body);
      b[at(m.at)] = m.value;
      return [b, ...frames.slice(1)];
    }
    case 'insert': {
      const i = at(m.at);
      return [
        Buffer.concat([body.subarray(0, i), Buffer.from(m.bytes), body.subarray(i)]),
        ...frames.slice(1),
      ];
    }
    case 'int64': {
      // A positive fixint (0x00-0x7f) at or after the position becomes a uint64 beyond 2^53.
      const i = body.findIndex((v, j) => j >= at(m.at) && v < 0x80);
      if (i < 0) return frames;
      const big = Buffer.alloc(9);
      big[0] = 0xcf;
      big.writeBigUInt64BE(2n ** 64n - 1n - BigInt(body[i]!), 1);
      return [Buffer.concat([body.subarray(0, i), big, body.subarray(i + 1)]), ...frames.slice(1)];
    }
    case 'layout':
      return step(
        VLLM_LAYOUTS[m.other]!,
        ids,
        ids.map((_, k) => k),
        false,
      );
    case 'utility': {
      // utility_output of 0 .. 6 elements (vLLM sends 3), a 64-bit call id.
      const items = Array.from({ length: m.elements }, (_, i) =>
        i === 0 ? 'cf8000000000000001' : 'c0',
      );
      const header = (0x90 | m.elements).toString(16);
      return [
        Buffer.from(
          `98 00 90 c0 cb3ff0000000000000 ${header} ${items.join(' ')} c0 c0 c0`.replace(/ /g, ''),
          'hex',
        ),
      ];
    }
    case 'stats':
      // scheduler_stats as a map whose one key's value is a byte of any type.
      return [
        Buffer.from(
          `98 00 90 81 a${'num_running_reqs'.length.toString(16)} ${Buffer.from('num_running_reqs').toString('hex')} ${m.value.toString(16).padStart(2, '0')} cb3ff0000000000000 c0 c0 c0 c0`.replace(
            / /g,
            '',
          ),
          'hex',
        ),
      ];
    case 'reorder':
      return step(
        VLLM_LAYOUTS[c.layout]!,
        ids,
        ids.map((_, k) => ids.length - 1 - k),
        false,
      );
  }
}

/** What the bridge emitted, by slot: its tokens, and whether it ended in an error. */
interface Emitted {
  tokens: number[];
  failed: boolean;
}

function drain(bridge: VllmBridge, out: StepOutputs, bySlot: Emitted[]): void {
  out.clear();
  bridge.step(out);
  for (let i = 0; i < out.count; i++) {
    const e = bySlot[out.slot[i]!];
    if (e === undefined) continue;
    if (out.token[i]! >= 0) e.tokens.push(out.token[i]!);
    if (out.finish[i] === FinishReason.Error) e.failed = true;
  }
}

/** null when the case holds; else what went wrong. */
export function vllmProblem(c: VllmCase): string | null {
  const layout = VLLM_LAYOUTS[c.layout]!;
  const bridge = new VllmBridge({
    card: CARD,
    maxModelLen: 4096,
    blockSize: 16,
    dataParallelSize: 2,
  });
  const links = [new RecordingLink(), new RecordingLink()];
  links.forEach((link, rank) => {
    bridge.attach(rank, link, {
      maxModelLen: 4096,
      numGpuBlocks: 100,
      vllmVersion: null,
      dataParallelSize: 1,
      layout,
    });
  });
  for (let k = 0; k < c.requests; k++) bridge.add({ ...request(k), dataParallelRank: 0 });
  // The last request runs on rank 1; rank 0's messages name it too.
  const other = c.requests;
  bridge.add({ ...request(other), dataParallelRank: 1 });
  const ids = [...links[0]!.adds, ...links[1]!.adds].map((a) => a.requestId);
  const reader = new OutputsReader(VLLM_LAYOUTS[(c.layout + 1) % VLLM_LAYOUTS.length]!, 'auto');
  const sink: OutputsSink = {
    output: (o) => bridge.output(o, 0),
    outputFailed: (o) => bridge.outputFailed(o, 0),
    messageFailed: (body, at) => bridge.messageFailed(body, at, 0),
    partFailed: () => bridge.partFailed(),
    schedulerStats: (s) => bridge.schedulerStats(s, 0),
  };
  const all = ids.map((_, k) => k);
  const messages = [
    step(layout, ids, all, true),
    mutate(step(layout, ids, all, false), c, ids),
    step(layout, ids, all, false),
  ];
  const bySlot: Emitted[] = all.map(() => ({ tokens: [], failed: false }));
  const out = new StepOutputs(64);
  for (const frames of messages) {
    try {
      reader.read(frames, sink);
    } catch (error) {
      return `reading threw ${isRingserveError(error) ? (error as Error).message : String(error)}`;
    }
    drain(bridge, out, bySlot);
  }
  if (reader.layout !== layout)
    return `the layout read is ${reader.layout.name}, not ${layout.name}`;
  if (!bridge.ready) return 'the bridge detached';
  const onRank1 = bySlot[other]!;
  if (onRank1.tokens.length > 0 || onRank1.failed)
    return `rank 0's messages reached the request on rank 1 (${onRank1.tokens.length} tokens, failed ${onRank1.failed})`;
  for (const k of all) {
    if (k === other) continue;
    const { tokens, failed } = bySlot[k]!;
    const wrong = tokens.find((t) => t !== tokenOf(k) && all.some((j) => tokenOf(j) === t));
    if (wrong !== undefined)
      return `request ${k} was given request ${wrong / 0x01010101 - 1}'s token`;
    // A request the mutation did not fail read the valid message after it: its token came.
    if (!failed && (tokens.length < 2 || tokens.at(-1) !== tokenOf(k))) {
      return `request ${k} lost the valid message after the mutation (tokens ${tokens.length})`;
    }
  }
  return null;
}

export interface VllmFuzzReport {
  cases: number;
  failures: string[];
}

export function runVllmFuzz(cases: number, seed: number): VllmFuzzReport {
  const result = fc.check(
    fc.property(vllmCase, (c) => {
      const problem = vllmProblem(c);
      if (problem !== null) throw new Error(problem);
    }),
    { numRuns: cases, seed, endOnFailure: true },
  );
  const failures = result.failed
    ? [
        `vLLM messages: ${result.errorInstance instanceof Error ? result.errorInstance.message : String(result.errorInstance)} (counterexample ${fc.stringify(result.counterexample).slice(0, 400)})`,
      ]
    : [];
  return { cases, failures };
}
