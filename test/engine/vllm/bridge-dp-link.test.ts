/**
 * The bridge with two data-parallel ranks (VllmBridge + VllmBridgeLink, in process) against the
 * independent mirror's DP ranks over real ZMQ on loopback. The mirror's ranks form a MoE group that
 * steps only when every rank steps and refuse an init without the group's master address, so the
 * requests here finish only if the bridge sends the DP master keys and wakes the idle rank with
 * START_DP_WAVE, and they run on the rank they were placed on. (A rank's death is tested with
 * ringserve's own engines in test/cluster/vllm-dp.test.ts: the mirror's group blocks when a rank
 * leaves, as a real collective would, and then the other rank stops answering too.)
 */
import { afterEach, describe, expect, it } from 'vitest';
import { StepOutputs } from '../../../src/engine/step-outputs.js';
import { VllmBridge } from '../../../src/engine/vllm/bridge.js';
import { VllmBridgeLink } from '../../../src/engine/vllm/bridge-link.js';
import { getModelCard } from '../../../src/wire/model-card.js';
import { type EngineRequest, FinishReason } from '../../../src/wire/types.js';
import { until } from '../../until.js';
import { type MirrorDpGroup, startMirrorDpRanks } from './mirror/dp-engine.js';
import { promptSum, tokenAt } from './mirror/formula.js';

const CARD = getModelCard('tiny');
const PROMPT = [3, 9, 27, 81];
const SOON = { timeoutMs: 10_000, intervalMs: 5 };
const open: { close(): unknown }[] = [];

afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});

function request(slot: number, maxTokens: number, rank: number | null): EngineRequest {
  return {
    server: 0,
    slot,
    promptTokenIds: Int32Array.from(PROMPT),
    params: {
      temperature: 1,
      topP: 1,
      topK: 0,
      minP: 0,
      seed: 1,
      maxTokens,
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
    },
    priority: 0,
    cacheSalt: null,
    arrivalTimeMs: Date.now(),
    dataParallelRank: rank,
  };
}

/** The bridge's emitted rows per slot, stepping it as the core loop would. */
class Rows {
  readonly #out = new StepOutputs(64);
  readonly bySlot = new Map<number, { tokens: number[]; finish: number; reject: number }>();
  constructor(readonly bridge: VllmBridge) {}

  of(slot: number) {
    let r = this.bySlot.get(slot);
    if (r === undefined) {
      r = { tokens: [], finish: FinishReason.None, reject: 0 };
      this.bySlot.set(slot, r);
    }
    return r;
  }

  async finished(slots: number[], timeoutMs = SOON.timeoutMs): Promise<void> {
    await until(
      () => {
        this.step();
        return slots.every((s) => this.of(s).finish !== FinishReason.None);
      },
      (done) => done,
      { ...SOON, timeoutMs, what: `slots ${slots.join(', ')} to finish` },
    );
  }

  step(): void {
    const out = this.#out;
    out.clear();
    this.bridge.step(out);
    for (let i = 0; i < out.count; i++) {
      const r = this.of(out.slot[i]!);
      if (out.token[i]! >= 0) r.tokens.push(out.token[i]!);
      if (out.finish[i] !== FinishReason.None) {
        r.finish = out.finish[i]!;
        r.reject = out.rejectReason[i]!;
      }
    }
  }
}

async function dp(): Promise<{ bridge: VllmBridge; group: MirrorDpGroup; rows: Rows }> {
  const bridge = new VllmBridge({
    card: CARD,
    maxModelLen: 4096,
    blockSize: 16,
    dataParallelSize: 2,
  });
  const link = new VllmBridgeLink(bridge, {
    address: '127.0.0.1',
    port: 0,
    version: 'auto',
    pingTimeoutMs: 5_000,
    dataParallelSize: 2,
    log: () => {},
  });
  open.push(link);
  const endpoint = await link.start();
  const group = await startMirrorDpRanks(endpoint, 2, {
    era: '0.33',
    layers: 4,
    topk: 4,
    numExperts: 16,
    vocab: 1000,
    stepMs: 2,
  });
  open.push(group);
  const ranks = new Float64Array(256 * 8);
  await until(
    () => bridge.rankStats(ranks) === 2 && ranks[0] === 1 && ranks[8] === 1,
    (up) => up,
    { ...SOON, what: 'both ranks to attach' },
  );
  return { bridge, group, rows: new Rows(bridge) };
}

const tokens = (n: number) =>
  Array.from({ length: n }, (_, i) => tokenAt(promptSum(PROMPT), i, 1000));

describe('the bridge against two independent DP ranks', () => {
  it('sends the group its master address, wakes the idle rank, and keeps each request on its rank', async () => {
    const { bridge, group, rows } = await dp();
    for (const r of group.ranks) {
      expect(r.parallelConfig).toMatchObject({
        data_parallel_master_ip: '127.0.0.1',
        data_parallel_size: 2,
      });
    }
    // A request on rank 1 alone: it finishes only because rank 0 was woken for the wave.
    bridge.add(request(0, 6, 1));
    await rows.finished([0]);
    expect(rows.of(0)).toEqual({ tokens: tokens(6), finish: FinishReason.Length, reject: 0 });
    const [r0, r1] = group.counters();
    expect(r1!.requestsSeen).toBe(1);
    expect(r0!.requestsSeen).toBe(0);
    expect(r0!.startWavesSeen).toBeGreaterThan(0);
    // The group reports the end of the wave; the next request starts the next one.
    await until(
      () => bridge.waveState,
      (w) => w.wave >= 1 && !w.running,
      { ...SOON, what: 'the wave to end' },
    );
    for (let slot = 1; slot <= 4; slot++) bridge.add(request(slot, 5, null));
    bridge.add(request(5, 5, 0));
    await rows.finished([1, 2, 3, 4, 5]);
    for (let slot = 1; slot <= 5; slot++) expect(rows.of(slot).tokens).toEqual(tokens(5));
    const [a, b] = group.counters();
    expect(a!.requestsSeen).toBeGreaterThanOrEqual(2);
    expect(b!.requestsSeen).toBeGreaterThanOrEqual(3);
    for (const r of group.ranks) expect(r.misrouted).toEqual([]);
  });
});
