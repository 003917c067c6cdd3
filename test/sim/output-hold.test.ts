/**
 * The simulator under an output budget (src/engine/output-room.ts): an API server whose output ring
 * has no room is held, its requests produce no rows and keep their state while the others run,
 * and once released everything it gets is what it would have got unheld (outputs are reproducible
 * from the seed, whatever the batch).
 */
import { describe, expect, it } from 'vitest';
import { OutputRoom } from '../../src/engine/output-room.js';
import type { StepOutputs } from '../../src/engine/step-outputs.js';
import { maxKeptIds } from '../../src/sim/sampler.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import { type EngineRequest, FinishReason } from '../../src/wire/types.js';
import {
  type Collected,
  collect,
  drain,
  key,
  observable,
  prompt,
  request,
  tinyConfig,
} from './helpers.js';

const SERVERS = 2;

function roomFor(engine: SimEngine): OutputRoom {
  const p = engine.preset;
  return new OutputRoom(SERVERS, p.routingLayers * p.expertsPerToken, 1);
}

/** Four requests on each of two API servers, all long enough to be in flight for a while. */
function requests(): EngineRequest[] {
  const out: EngineRequest[] = [];
  for (let server = 0; server < SERVERS; server++) {
    for (let slot = 0; slot < 4; slot++) {
      out.push(
        request(
          slot,
          { seed: 10 * server + slot, maxTokens: 60 + slot * 5, ignoreEos: true },
          { server, promptTokenIds: prompt(24 + slot * 9, server * 4 + slot) },
        ),
      );
    }
  }
  return out;
}

function unheld(config = tinyConfig()): Map<string, Collected> {
  const engine = new SimEngine(config);
  for (const r of requests()) engine.add(r);
  return drain(engine);
}

/** Runs `n` steps, opening the room before each with `open`; returns the step's rows. */
function steps(
  engine: SimEngine,
  room: OutputRoom,
  n: number,
  open: (room: OutputRoom) => void,
  into: Map<string, Collected>,
  each?: (out: StepOutputs) => void,
): void {
  const out = engine.newStepOutputs(8);
  for (let i = 0; i < n; i++) {
    open(room);
    out.clear();
    engine.step(out, room);
    collect(out, into, i);
    each?.(out);
  }
}

const holdServer0 = (room: OutputRoom): void => {
  room.open(0, 0, 1 << 20, 1 << 18);
  room.unlimit(1);
};
const unlimited = (room: OutputRoom): void => {
  for (let k = 0; k < SERVERS; k++) room.unlimit(k);
};

function rowsOf(out: StepOutputs, server: number): number[] {
  const slots: number[] = [];
  for (let j = 0; j < out.count; j++) if (out.server[j] === server) slots.push(out.slot[j]!);
  return slots;
}

/** An engine with requests() added and `n` steps run without limit (every request in decode). */
function started(config = tinyConfig(), n = 5) {
  const engine = new SimEngine(config);
  for (const r of requests()) engine.add(r);
  const room = roomFor(engine);
  const got = new Map<string, Collected>();
  steps(engine, room, n, unlimited, got);
  return { engine, room, got };
}

function expectSame(got: Map<string, Collected>, expected: Map<string, Collected>): void {
  for (const k of expected.keys())
    expect(observable(got.get(k)), k).toEqual(observable(expected.get(k)));
}

describe('a held API server', () => {
  it('gets no rows and keeps its requests while the other runs; released, it resumes unchanged', () => {
    const expected = unheld();
    const { engine, room, got } = started(); // both servers running, KV blocks allocated
    const tokensBefore = got.get(key(0, 0))?.tokens.length ?? 0;
    const freeBefore = engine.numFreeBlocks;
    steps(engine, room, 30, holdServer0, got, (out) => {
      expect(rowsOf(out, 0)).toEqual([]);
      expect(rowsOf(out, 1).length).toBeGreaterThan(0);
    });
    expect(got.get(key(0, 0))?.tokens.length).toBe(tokensBefore);
    expect(got.get(key(1, 0))?.tokens.length).toBeGreaterThan(30);
    const stats = engine.stats();
    expect(stats.running).toBe(8); // nobody was preempted or dropped
    expect(stats.numPreemptions).toBe(0);
    // Server 1's requests grew; server 0's kept every block they had.
    expect(engine.numFreeBlocks).toBeLessThanOrEqual(freeBefore);
    steps(engine, room, 400, unlimited, got);
    expect(engine.hasWork()).toBe(false);
    expectSame(got, expected);
    expect(engine.numFreeBlocks).toBe(engine.config.numGpuBlocks);
  });

  it('with room for some outputs, gets those of its earliest requests; the rest wait their turn', () => {
    const expected = unheld();
    const { engine, room, got } = started(); // all in decode
    // A decode's output: at most top_k (50) mask ids and one routing row. Two of them, plus the
    // padding a wrap may cost (here: what was charged), fit; a third does not.
    const decode = room.outputBytes(50, 1);
    const two = (r: OutputRoom): void => {
      r.open(0, 4 * decode, 1 << 20, 1 << 18);
      r.unlimit(1);
    };
    steps(engine, room, 10, two, got, (out) => expect(rowsOf(out, 0)).toEqual([0, 1]));
    steps(engine, room, 400, unlimited, got);
    expectSame(got, expected);
  });

  it('keeps its abort and reject rows pending, in order, and sends them when released', () => {
    const { engine, room, got } = started(tinyConfig(), 3);
    engine.abort(0, 2);
    engine.reject(0, 9);
    engine.abort(1, 3);
    const pendingRows: string[] = [];
    const record = (out: StepOutputs): void => {
      for (let j = 0; j < out.count; j++)
        if (out.finish[j] !== FinishReason.None)
          pendingRows.push(key(out.server[j]!, out.slot[j]!));
    };
    steps(engine, room, 3, holdServer0, got, record);
    expect(pendingRows).toEqual(['1:3']); // the other server's abort is not held up
    expect(engine.hasWork()).toBe(true);
    steps(engine, room, 1, unlimited, got, record);
    expect(pendingRows.slice(0, 3)).toEqual(['1:3', '0:2', '0:9']);
    expect(got.get(key(0, 2))?.finish).toBe(FinishReason.Abort);
    expect(got.get(key(0, 9))?.finish).toBe(FinishReason.Error);
  });

  it('does not block the admission of other servers: its waiting requests are skipped in place', () => {
    const engine = new SimEngine(tinyConfig());
    // Server 0's requests are first in the queue.
    for (const r of requests()) engine.add(r);
    const room = roomFor(engine);
    const got = new Map<string, Collected>();
    steps(engine, room, 3, holdServer0, got);
    for (let slot = 0; slot < 4; slot++) {
      expect(got.has(key(0, slot))).toBe(false);
      expect(got.get(key(1, slot))?.tokens.length).toBeGreaterThan(0);
    }
    expect(engine.stats().waiting).toBe(4);
    expect(engine.stats().running).toBe(4);
  });

  it('is preempted first under KV pressure while held; its outputs stay the same', () => {
    // Server 1's requests grow to 28 blocks while server 0's hold 12: 32 exist. Server 1's are
    // the newest, the ones vLLM would preempt; the held ones go instead.
    const config = tinyConfig({ numGpuBlocks: 32 });
    const expected = unheld(tinyConfig());
    const { engine, room, got } = started(config, 4);
    const finished = new Set<number>();
    steps(engine, room, 150, holdServer0, got, (out) => {
      expect(rowsOf(out, 0)).toEqual([]);
      // Every unfinished request of server 1 runs at every step: none of them was preempted.
      const ran = rowsOf(out, 1);
      for (let slot = 0; slot < 4; slot++) if (!finished.has(slot)) expect(ran).toContain(slot);
      for (let j = 0; j < out.count; j++)
        if (out.server[j] === 1 && out.finish[j] !== FinishReason.None) finished.add(out.slot[j]!);
    });
    expect(finished.size).toBe(4);
    steps(engine, room, 2000, unlimited, got);
    expect(engine.hasWork()).toBe(false);
    expect(engine.stats().numPreemptions).toBeGreaterThan(0);
    expectSame(got, expected);
    expect(engine.numFreeBlocks).toBe(32);
  });

  for (const [what, config] of [
    ['KV blocks', tinyConfig({ numGpuBlocks: 16 })],
    ['seats (max_num_seqs)', tinyConfig({ maxNumSeqs: 4 })],
  ] as const) {
    it(`yields its ${what} to a request of another server that cannot be admitted`, () => {
      const mine = requests().filter((r) => r.server === 0);
      const theirs = request(
        7,
        { seed: 70, maxTokens: 40, ignoreEos: true },
        { server: 1, promptTokenIds: prompt(60, 7) },
      );
      const expected = new SimEngine(tinyConfig());
      for (const r of [...mine, theirs]) expected.add(r);
      const reference = drain(expected);
      const engine = new SimEngine(config);
      for (const r of mine) engine.add(r);
      const room = roomFor(engine);
      const got = new Map<string, Collected>();
      steps(engine, room, 8, unlimited, got);
      engine.add(theirs);
      steps(engine, room, 3, holdServer0, got);
      expect(got.get(key(1, 7))?.tokens.length).toBeGreaterThan(0);
      expect(engine.stats().numPreemptions).toBeGreaterThan(0);
      steps(engine, room, 1000, unlimited, got);
      expect(engine.hasWork()).toBe(false);
      expectSame(got, reference);
    });
  }
});

describe('output charges', () => {
  it('are never less than what a step emits, per server, whatever the parameters', () => {
    const charged = new Float64Array(SERVERS);
    class Recording extends OutputRoom {
      override tryCharge(server: number, maskIds: number, routingRows: number): boolean {
        const ok = super.tryCharge(server, maskIds, routingRows);
        if (ok) charged[server]! += this.outputBytes(maskIds, routingRows);
        return ok;
      }
    }
    const engine = new SimEngine(tinyConfig({ maxNumBatchedTokens: 40, blockSize: 8 }));
    const p = engine.preset;
    const room = new Recording(SERVERS, p.routingLayers * p.expertsPerToken, 1);
    const variants = [
      { topK: 0, topP: 0.9 },
      { topK: 0, topP: 1, minP: 0.01 },
      { topK: 5, topP: 1 },
      { topK: 0, topP: 1 },
      { temperature: 0 },
      { topK: 700, presencePenalty: 0.5, repetitionPenalty: 1.3 },
      { returnRoutedExperts: false },
      { returnSamplingMask: false, routedExpertsPromptStart: 30 },
    ];
    for (let i = 0; i < 24; i++) {
      const v = variants[i % variants.length]!;
      engine.add(
        request(
          i,
          { seed: i, maxTokens: 30 + i, ...v },
          { server: i % SERVERS, promptTokenIds: prompt(20 + i * 7, i % 3) },
        ),
      );
    }
    const out = engine.newStepOutputs(8);
    let steps = 0;
    while (engine.hasWork() && steps++ < 5000) {
      charged.fill(0);
      // A roomy ring for server 0, a tight one for server 1 (it is held often): room for two
      // outputs with a vocabulary-sized mask.
      room.open(0, 1 << 20, 1 << 20, 1 << 18);
      room.open(1, 12_000, 1 << 16, 1 << 14);
      out.clear();
      engine.step(out, room);
      const emitted = new Float64Array(SERVERS);
      for (let j = 0; j < out.count; j++) {
        emitted[out.server[j]!]! += room.outputBytes(out.maskCount[j]!, out.routingRows[j]!);
      }
      for (let k = 0; k < SERVERS; k++) expect(emitted[k]).toBeLessThanOrEqual(charged[k]!);
    }
    expect(engine.hasWork()).toBe(false);
  });

  it('bound the mask: no sampled position keeps more ids than maxKeptIds says', () => {
    const engine = new SimEngine(tinyConfig());
    const reqs = [
      request(0, { topK: 0, topP: 0.99, seed: 3, maxTokens: 200, ignoreEos: true }),
      request(1, { topK: 0, topP: 1, minP: 0.001, seed: 4, maxTokens: 200, ignoreEos: true }),
      request(2, { topK: 300, topP: 1, seed: 5, maxTokens: 200, ignoreEos: true }),
      request(3, { temperature: 0, maxTokens: 50 }),
    ];
    for (const r of reqs) engine.add(r);
    const got = drain(engine);
    for (const r of reqs) {
      const bound = maxKeptIds(r.params, engine.preset.vocabSize);
      const masks = got.get(key(0, r.slot))!.masks;
      expect(masks.length).toBeGreaterThan(0);
      for (const m of masks) expect(m.length).toBeLessThanOrEqual(bound);
    }
  });

  it('cut a long cached prefix into outputs under the per-output limit, with the same rows', () => {
    const long = prompt(1200, 5);
    const first = request(0, { seed: 1, maxTokens: 5, ignoreEos: true }, { promptTokenIds: long });
    const second = request(1, { seed: 2, maxTokens: 5, ignoreEos: true }, { promptTokenIds: long });
    const reference = new SimEngine(tinyConfig());
    reference.add(first);
    drain(reference);
    reference.add(second);
    const expected = drain(reference).get(key(0, 1));
    expect(expected?.routingPositions.length).toBe(1200 + 4);

    const engine = new SimEngine(tinyConfig());
    engine.add(first);
    drain(engine);
    engine.add(second);
    const room = roomFor(engine);
    // A 16 KiB ring: one output may take 6 KiB, ~470 routing rows of 12 bytes with the mask.
    const small = (r: OutputRoom): void => {
      r.open(0, 1 << 20, 1 << 14, 1 << 12);
      r.unlimit(1);
    };
    small(room);
    const limit = room.routingRowsWithin(0, 50);
    expect(limit).toBeLessThan(600);
    const got = new Map<string, Collected>();
    let most = 0;
    steps(engine, room, 50, small, got, (out) => {
      for (let j = 0; j < out.count; j++) most = Math.max(most, out.routingRows[j]!);
    });
    expect(most).toBeLessThanOrEqual(limit);
    expect(observable(got.get(key(0, 1)))).toEqual(observable(expected));
  });
});
