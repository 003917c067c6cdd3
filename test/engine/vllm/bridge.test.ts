/**
 * The vLLM bridge's frontend state without sockets (src/engine/vllm/bridge.ts): what an ADD carries,
 * how outputs become the simulator's rows (tokens, logprobs, routing positions, finish reasons),
 * aborts ended here with late outputs dropped, engine death, and rows held for a full ring; with
 * several data-parallel ranks: placement, a rank's death, outputs kept to their rank, utility calls
 * on every rank, and the DP waves of a MoE group.
 */
import { describe, expect, it } from 'vitest';
import { OutputRoom } from '../../../src/engine/output-room.js';
import { VllmBridge, type VllmEngineLink } from '../../../src/engine/vllm/bridge.js';
import type { BridgeAdd } from '../../../src/engine/vllm/bridge-request.js';
import { getVllmLayout } from '../../../src/engine/vllm/layouts.js';
import { VllmFinishReason as VllmFinish } from '../../../src/engine/vllm/outputs.js';
import { OutputView } from '../../../src/engine/vllm/outputs-reader.js';
import { ControlRefusal, ControlResult } from '../../../src/wire/control-channel.js';
import { getModelCard } from '../../../src/wire/model-card.js';
import { RejectReason } from '../../../src/wire/reject.js';
import { type EngineRequest, FinishReason, type SamplingParams } from '../../../src/wire/types.js';

const LAYOUT = getVllmLayout('0.29');
const CARD = getModelCard('tiny'); // 4 hidden layers, 3 routed, top-4 of 16 experts, EOS 999, 998

class FakeLink implements VllmEngineLink {
  adds: BridgeAdd[] = [];
  aborts: string[] = [];
  calls: { method: string; args: unknown[] }[] = [];
  answer: unknown = true;
  waves: [number, number | null][] = [];
  add(request: BridgeAdd): void {
    this.adds.push(request);
  }
  startDpWave(wave: number, exclude: number | null): void {
    this.waves.push([wave, exclude]);
  }
  abort(ids: readonly string[]): void {
    this.aborts.push(...ids);
  }
  async call(method: string, args: unknown[]): Promise<unknown> {
    this.calls.push({ method, args });
    return this.answer;
  }
}

function params(over: Partial<SamplingParams> = {}): SamplingParams {
  return {
    temperature: 1,
    topP: 1,
    topK: 0,
    minP: 0,
    seed: 7,
    maxTokens: 8,
    minTokens: 0,
    stopTokenIds: new Int32Array([5]),
    ignoreEos: false,
    presencePenalty: 0,
    frequencyPenalty: 0,
    repetitionPenalty: 1,
    logprobs: true,
    topLogprobs: 0,
    promptLogprobs: -1,
    returnSamplingMask: false,
    returnRoutedExperts: true,
    routedExpertsPromptStart: 0,
    ...over,
  };
}

function request(
  slot: number,
  prompt: number[],
  over: Partial<SamplingParams> = {},
  extra: Partial<EngineRequest> = {},
): EngineRequest {
  return {
    server: 0,
    slot,
    promptTokenIds: new Int32Array(prompt),
    params: params(over),
    priority: 0,
    cacheSalt: null,
    arrivalTimeMs: 1_000,
    ...extra,
  };
}

function attached(maxModelLen = 4096) {
  const bridge = new VllmBridge({ card: CARD, maxModelLen: 4096, blockSize: 16 });
  const link = new FakeLink();
  bridge.attach(0, link, {
    maxModelLen,
    numGpuBlocks: 100,
    vllmVersion: '0.29.0',
    dataParallelSize: 1,
    layout: LAYOUT,
  });
  return { bridge, link };
}

/**
 * An output of `tokens` for request `id`, as the codec's reader presents it: the id as bytes of a
 * body, routing rows whose expert ids are row * 10 + layer, logprobs -0.5, -1, ...
 */
function facts(
  id: string,
  tokens: number[],
  routingRows: number,
  layers: number,
  finish = -1,
  stop = -1,
): OutputView {
  const o = new OutputView();
  const routing = routingRows * layers * 4;
  o.body = new Uint8Array(3 + id.length + routing);
  o.body.set(Buffer.from(id, 'latin1'), 3);
  o.idOffset = 3;
  o.idLength = id.length;
  o.tokenIds = new Int32Array(tokens);
  o.tokenCount = tokens.length;
  o.hasLogprobs = true;
  o.logprobs = new Float32Array(tokens.map((_, i) => -0.5 * (i + 1)));
  o.finishReason = finish;
  o.stopReason = stop;
  o.hasRoutedExperts = routingRows > 0;
  o.routedRows = routingRows;
  o.routedLayers = layers;
  o.routedTopk = 4;
  o.routedWidth = 1;
  o.routedData = o.body;
  o.routedOffset = 3 + id.length;
  for (let r = 0; r < routingRows; r++)
    for (let l = 0; l < layers; l++)
      for (let k = 0; k < 4; k++) o.body[o.routedOffset + (r * layers + l) * 4 + k] = r * 10 + l;
  return o;
}

describe('VllmBridge', () => {
  it('sends max_tokens, the card EOS as _eos_token_id, the other EOS ids as stop ids, a start below the prompt', () => {
    const { bridge, link } = attached();
    bridge.add(request(3, [1, 2, 3], { routedExpertsPromptStart: 9 }));
    bridge.add(request(4, [1, 2, 3], { ignoreEos: true, logprobs: false }));
    const [a, b] = link.adds;
    expect(a!.params).toMatchObject({
      maxTokens: 8,
      seed: 7,
      eosTokenId: 999,
      stopTokenIds: [5, 998],
      logprobs: 0,
      routedExpertsPromptStart: 2,
    });
    expect(Array.from(a!.params.allStopTokenIds).sort()).toEqual([5, 998, 999]);
    expect(b!.params).toMatchObject({ eosTokenId: null, stopTokenIds: [5], logprobs: null });
    expect(a!.requestId).not.toBe(b!.requestId);
    expect(a!.requestId).toMatch(/^[0-9a-f]{8}-0-3-\d+$/);
  });

  it('turns outputs into rows: prompt routing with the first token, one row per later token, finish and stop id', () => {
    const { bridge, link } = attached();
    bridge.add(request(1, [10, 11, 12, 13]));
    const id = link.adds[0]!.requestId;
    // First output: prompt rows 0..3 (4 rows, all hidden layers: the dense first one is dropped).
    bridge.output(facts(id, [50], 4, 4), 0);
    // Then two tokens at once (speculative): rows for positions 4 and 5.
    bridge.output(facts(id, [51, 52], 2, 3), 0);
    bridge.output(facts(id, [998], 1, 3, VllmFinish.Stop, 998), 0);
    const out = bridge.newStepOutputs();
    bridge.step(out);
    expect(Array.from(out.token.subarray(0, out.count))).toEqual([50, 51, 52, 998]);
    expect(Array.from(out.logprob.subarray(0, out.count))).toEqual([-0.5, -0.5, -1, -0.5]);
    expect(Array.from(out.routingFirstPos.subarray(0, out.count))).toEqual([0, 4, 5, 6]);
    expect(Array.from(out.routingRows.subarray(0, out.count))).toEqual([4, 1, 1, 1]);
    // Layer 0 of the 4-layer rows was dropped: the first routed layer is the engine's layer 1.
    expect(out.routing[0]).toBe(1);
    expect(out.routing[3 * 12]).toBe(31);
    expect(out.finish[3]).toBe(FinishReason.Stop);
    expect(out.stopTokenId[3]).toBe(998);
    expect(bridge.inFlight).toBe(0);
  });

  it('drops routing rows before the client start and all of them when routing was not asked', () => {
    const { bridge, link } = attached();
    bridge.add(request(1, [10, 11, 12], { routedExpertsPromptStart: 4 }));
    bridge.add(request(2, [10, 11, 12], { returnRoutedExperts: false }));
    const [a, b] = link.adds.map((x) => x.requestId);
    bridge.output(facts(a!, [1], 1, 3), 0); // position 2 (start sent: 2)
    bridge.output(facts(a!, [2], 1, 3), 0); // position 3
    bridge.output(facts(a!, [3], 1, 3, VllmFinish.Length), 0); // position 4
    bridge.output(facts(b!, [1], 3, 3, VllmFinish.Length), 0);
    const out = bridge.newStepOutputs();
    bridge.step(out);
    expect(Array.from(out.routingRows.subarray(0, out.count))).toEqual([0, 0, 1, 0]);
    expect(out.routingFirstPos[2]).toBe(4);
    expect(out.finish[2]).toBe(FinishReason.Length);
  });

  it('fails a request whose routing rows the card does not describe (503), aborting it in the engine', () => {
    const { bridge, link } = attached();
    bridge.add(request(1, [10, 11, 12]));
    bridge.add(request(2, [10, 11, 12]));
    const [a, b] = link.adds.map((x) => x.requestId);
    bridge.output(facts(a!, [1], 3, 5), 0); // 5 layers: tiny has 4 (3 routed)
    bridge.output(facts(b!, [1], 3, 4), 0);
    const out = bridge.newStepOutputs();
    bridge.step(out);
    expect(out.finish[0]).toBe(FinishReason.Error);
    expect(out.rejectReason[0]).toBe(RejectReason.RoutingShape);
    expect(out.token[1]).toBe(1);
    expect(link.aborts).toEqual([a]);
  });

  it('with --enable-return-sampling-mask: greedy or top_k-less requests are refused; a mask asked and not sent fails the request', () => {
    const bridge = new VllmBridge({
      card: CARD,
      maxModelLen: 4096,
      blockSize: 16,
      returnSamplingMask: true,
    });
    const link = new FakeLink();
    bridge.attach(0, link, {
      maxModelLen: 4096,
      numGpuBlocks: 100,
      vllmVersion: null,
      dataParallelSize: 1,
      layout: LAYOUT,
    });
    expect(bridge.samplingMasks).toBe(true);
    bridge.add(request(1, [1, 2], { temperature: 0, topK: 5 }));
    bridge.add(request(2, [1, 2], { topK: 0 }));
    bridge.add(request(3, [1, 2], { topK: 5, returnSamplingMask: true }));
    expect(link.adds).toHaveLength(1);
    const out = bridge.newStepOutputs();
    bridge.step(out);
    expect(Array.from(out.rejectReason.subarray(0, 2))).toEqual([
      RejectReason.BadParams,
      RejectReason.BadParams,
    ]);
    bridge.output(facts(link.adds[0]!.requestId, [4], 2, 4), 0); // no new_sampling_mask
    out.clear();
    bridge.step(out);
    expect(out.finish[0]).toBe(FinishReason.Error);
    expect(link.aborts).toEqual([link.adds[0]!.requestId]);
  });

  it('ends an aborted request itself, sends ABORT, and drops the outputs still on the way', () => {
    const { bridge, link } = attached();
    bridge.add(request(1, [1, 2]));
    const id = link.adds[0]!.requestId;
    bridge.abort(0, 1);
    bridge.abort(0, 1);
    expect(link.aborts).toEqual([id]);
    bridge.output(facts(id, [7], 2, 3), 0);
    const out = bridge.newStepOutputs();
    bridge.step(out);
    expect(out.count).toBe(1);
    expect(out.finish[0]).toBe(FinishReason.Abort);
    expect(bridge.lateOutputs).toBe(1);
  });

  it('fails every request in flight when the engine dies, and refuses new ones until one attaches', () => {
    const { bridge, link } = attached();
    bridge.add(request(1, [1, 2]));
    bridge.add(request(2, [1, 2]));
    bridge.detach(0, 'the engine went away');
    expect(bridge.ready).toBe(false);
    bridge.add(request(3, [1, 2]));
    const out = bridge.newStepOutputs();
    bridge.step(out);
    expect(Array.from(out.slot.subarray(0, out.count))).toEqual([1, 2, 3]);
    for (let i = 0; i < 3; i++) {
      expect(out.finish[i]).toBe(FinishReason.Error);
      expect(out.rejectReason[i]).toBe(RejectReason.EngineDead);
    }
    bridge.attach(0, link, {
      maxModelLen: 64,
      numGpuBlocks: 1,
      vllmVersion: null,
      dataParallelSize: 1,
      layout: LAYOUT,
    });
    bridge.add(request(4, new Array(60).fill(1)));
    out.clear();
    bridge.step(out);
    expect(out.rejectReason[0]).toBe(RejectReason.PromptTooLong);
    expect(link.adds).toHaveLength(2);
  });

  it('holds the rows of a server whose ring is full and delivers them, in order, once it has room', () => {
    const { bridge, link } = attached();
    bridge.add(request(1, [1, 2]));
    const id = link.adds[0]!.requestId;
    bridge.output(facts(id, [7], 2, 3), 0);
    bridge.output(facts(id, [8], 1, 3), 0);
    const room = new OutputRoom(1, 12, 1);
    room.open(0, 0, 1 << 20, 1 << 18);
    const out = bridge.newStepOutputs();
    bridge.step(out, room);
    expect(out.count).toBe(0);
    expect(bridge.hasWork()).toBe(true);
    room.open(0, 1 << 20, 1 << 20, 1 << 18);
    bridge.step(out, room);
    expect(Array.from(out.token.subarray(0, out.count))).toEqual([7, 8]);
    expect(bridge.hasWork()).toBe(false);
  });

  it('splits a prompt routing run larger than one output may carry into routing-only rows', () => {
    const { bridge, link } = attached();
    const prompt = new Array(2000).fill(1);
    bridge.add(request(1, prompt, { maxTokens: 4 }));
    bridge.output(facts(link.adds[0]!.requestId, [9], 2000, 3), 0);
    const room = new OutputRoom(1, 12, 1);
    room.open(0, 1 << 20, 16_384, 4096);
    const out = bridge.newStepOutputs();
    let rows = 0;
    for (let turn = 0; turn < 20 && bridge.hasWork(); turn++) {
      out.clear();
      room.open(0, 1 << 20, 16_384, 4096);
      bridge.step(out, room);
      for (let i = 0; i < out.count; i++) {
        expect(out.routingFirstPos[i]).toBe(rows);
        rows += out.routingRows[i]!;
      }
    }
    expect(rows).toBe(2000);
    expect(out.token[out.count - 1]).toBe(9);
  });

  it('maps pause, resume, reset_prefix_cache and update_weights to utility calls', async () => {
    const { bridge, link } = attached();
    await bridge.pause();
    expect(bridge.paused).toBe(true);
    await bridge.resume();
    expect(await bridge.resetPrefixCache()).toBe(true);
    expect(await bridge.updateWeights(undefined, '/w')).toBe(1);
    // No directory (NCCL, NIXL): the engine's workers get null, untouched.
    expect(await bridge.updateWeights()).toBe(2);
    expect(link.calls.map((c) => [c.method, c.args])).toEqual([
      ['pause_scheduler', ['keep', false]],
      ['resume_scheduler', []],
      ['reset_prefix_cache', []],
      ['collective_rpc', ['update_weights_from_path', null, ['/w'], null]],
      ['reset_prefix_cache', []],
      ['collective_rpc', ['update_weights_from_path', null, [null], null]],
      ['reset_prefix_cache', []],
    ]);
  });

  it("forwards init_broadcaster to the workers with prime-rl's positional arguments", async () => {
    const { bridge, link } = attached();
    await bridge.initBroadcaster({
      host: '10.1.2.3',
      port: 29501,
      rankOffset: 4,
      inferenceWorldSize: 8,
      timeout: 1200,
      quantizeInWeightTransfer: false,
      sessionId: 'default',
    });
    expect(link.calls).toEqual([
      {
        method: 'collective_rpc',
        args: ['init_broadcaster', null, ['10.1.2.3', 29501, 4, 8, 1200, false, 'default'], null],
      },
    ]);
  });

  it("loads, reloads and removes LoRA adapters, and sends the adapter's LoRARequest in the ADD", async () => {
    const { bridge, link } = attached();
    const adapter = { id: 3, name: 'r16-a32', path: '/ckpt/step_1' };
    await bridge.loadLora(adapter, false);
    await bridge.loadLora({ ...adapter, path: '/ckpt/step_2' }, true);
    bridge.add(request(1, [1, 2], { maxTokens: 4 }, { loraId: 3 }));
    bridge.add(request(2, [1, 2], { maxTokens: 4 }));
    expect(link.adds.map((a) => a.lora)).toEqual([
      { name: 'r16-a32', id: 3, path: '/ckpt/step_2' },
      null,
    ]);
    await bridge.unloadLora(adapter);
    expect(link.calls.map((c) => [c.method, c.args])).toEqual([
      ['add_lora', [['r16-a32', 3, '/ckpt/step_1']]],
      ['add_lora', [['r16-a32', 3, '/ckpt/step_2', null, null, true]]],
      ['remove_lora', [3]],
    ]);
    // An adapter the bridge does not know (unloaded meanwhile) ends the request, nothing is sent.
    bridge.add(request(3, [1, 2], { maxTokens: 4 }, { loraId: 3 }));
    expect(link.adds).toHaveLength(2);
    const out = bridge.newStepOutputs();
    bridge.step(out);
    expect(Array.from(out.rejectReason.subarray(0, out.count))).toContain(
      RejectReason.LoraNotLoaded,
    );
  });

  it("answers vLLM's LoRAAdapterNotFoundError as NotFound, with vLLM's words", async () => {
    const { bridge, link } = attached();
    link.call = async () => {
      throw new Error(
        'Call to add_lora method failed: Loading lora x failed: No adapter found for /nope',
      );
    };
    const refusal = await bridge
      .loadLora({ id: 1, name: 'x', path: '/nope' }, false)
      .catch((e: unknown) => e);
    expect(refusal).toBeInstanceOf(ControlRefusal);
    expect((refusal as ControlRefusal).result).toBe(ControlResult.NotFound);
    expect((refusal as Error).message).toContain('No adapter found for /nope');
  });

  it('parks the output reader above 1,024 staged rows until the core loop drains under 512', async () => {
    const { bridge, link } = attached();
    bridge.add(request(1, [1, 2], { maxTokens: 4000 }));
    const id = link.adds[0]!.requestId;
    for (let t = 0; t < 1023; t++) bridge.output(facts(id, [7], 1, 3), 0);
    expect(bridge.backlogRoom()).toBeNull();
    bridge.output(facts(id, [7], 1, 3), 0);
    const room = bridge.backlogRoom();
    expect(room).not.toBeNull();
    let released = false;
    void room!.then(() => {
      released = true;
    });
    // A full ring: nothing drains, the reader stays parked.
    const out = bridge.newStepOutputs();
    const rings = new OutputRoom(1, 12, 1);
    rings.open(0, 0, 1 << 20, 1 << 18);
    bridge.step(out, rings);
    await Promise.resolve();
    expect(released).toBe(false);
    // Room for all: the backlog empties and the reader goes on.
    out.clear();
    bridge.step(out);
    await Promise.resolve();
    expect(out.count).toBe(1024);
    expect(released).toBe(true);
  });

  it('keeps reading, or lets a parked reader go, while a server with staged rows has room', async () => {
    const { bridge, link } = attached();
    bridge.add(request(1, [1, 2], { maxTokens: 4000 }));
    bridge.add({ ...request(2, [1, 2], { maxTokens: 4000 }), server: 1 });
    const [stopped, running] = [link.adds[0]!.requestId, link.adds[1]!.requestId];
    for (let t = 0; t < 1024; t++) bridge.output(facts(stopped, [7], 1, 3), 0);
    // Before any drain nothing is known to have room: the reader parks.
    const room = bridge.backlogRoom();
    expect(room).not.toBeNull();
    let released = false;
    void room!.then(() => {
      released = true;
    });
    // Server 0's ring is full (a stopped API server), server 1's has room: its row goes out, and
    // the reader goes on although server 0's 1,024 rows stay.
    bridge.output(facts(running, [8], 1, 3), 0);
    const out = bridge.newStepOutputs();
    const rings = new OutputRoom(2, 12, 1);
    rings.open(0, 0, 1 << 20, 1 << 18);
    rings.open(1, 1 << 20, 1 << 20, 1 << 18);
    bridge.step(out, rings);
    await Promise.resolve();
    expect(out.count).toBe(1);
    expect(out.server[0]).toBe(1);
    expect(released).toBe(true);
    expect(bridge.backlogRoom()).toBeNull();
  });

  it('lets a parked output reader go when the engine is detached', async () => {
    const { bridge, link } = attached();
    bridge.add(request(1, [1, 2], { maxTokens: 4000 }));
    const id = link.adds[0]!.requestId;
    for (let t = 0; t < 1024; t++) bridge.output(facts(id, [7], 1, 3), 0);
    const room = bridge.backlogRoom();
    bridge.detach(0, 'the engine went away');
    await expect(room).resolves.toBeUndefined();
  });
});

describe('VllmBridge with data-parallel ranks', () => {
  function ranks(n: number, dataParallelSize = n) {
    const bridge = new VllmBridge({
      card: CARD,
      maxModelLen: 4096,
      blockSize: 16,
      dataParallelSize: n,
    });
    const links = Array.from({ length: n }, () => new FakeLink());
    links.forEach((link, rank) => {
      bridge.attach(rank, link, {
        maxModelLen: 4096,
        numGpuBlocks: 100,
        vllmVersion: '0.33.0',
        dataParallelSize,
        layout: LAYOUT,
      });
    });
    return { bridge, links };
  }

  function finishOn(bridge: VllmBridge, link: FakeLink, rank: number, at = 0): void {
    bridge.output(facts(link.adds[at]!.requestId, [3], 0, 3, VllmFinish.Length), rank);
  }

  it('places requests on the least-loaded rank, or on the rank a request names', () => {
    const { bridge, links } = ranks(3);
    for (let slot = 0; slot < 6; slot++)
      bridge.add(request(slot, [1, 2], { returnRoutedExperts: false }));
    expect(links.map((l) => l.adds.length)).toEqual([2, 2, 2]);
    bridge.add(request(6, [1, 2], { returnRoutedExperts: false }, { dataParallelRank: 2 }));
    expect(links[2]!.adds).toHaveLength(3);
    expect(links[2]!.adds[2]!.dataParallelRank).toBe(2);
    // Rank 0 ends both of its requests: the next two go there.
    finishOn(bridge, links[0]!, 0, 0);
    finishOn(bridge, links[0]!, 0, 1);
    bridge.add(request(7, [1, 2], { returnRoutedExperts: false }));
    bridge.add(request(8, [1, 2], { returnRoutedExperts: false }));
    expect(links.map((l) => l.adds.length)).toEqual([4, 2, 3]);
  });

  it("a rank's death fails its requests only; a request naming it is refused until it is back", () => {
    const { bridge, links } = ranks(2);
    for (let slot = 0; slot < 4; slot++)
      bridge.add(request(slot, [1, 2], { returnRoutedExperts: false }));
    const onRank1 = links[1]!.adds.map((a) => a.requestId);
    bridge.detach(1, 'rank 1 went away');
    expect(bridge.ready).toBe(true);
    bridge.add(request(9, [1, 2], { returnRoutedExperts: false }, { dataParallelRank: 1 }));
    bridge.add(request(10, [1, 2], { returnRoutedExperts: false }));
    const out = bridge.newStepOutputs();
    bridge.step(out);
    const dead = [];
    for (let i = 0; i < out.count; i++)
      if (out.rejectReason[i] === RejectReason.EngineDead) dead.push(out.slot[i]);
    expect(dead.sort()).toEqual([1, 3, 9]);
    expect(links[0]!.adds).toHaveLength(3);
    expect(bridge.inFlight).toBe(3);
    // What rank 1 still sends of its old requests reaches nobody.
    bridge.output(facts(onRank1[0]!, [4], 0, 3), 1);
    expect(bridge.lateOutputs).toBe(1);
    bridge.attach(1, links[1]!, {
      maxModelLen: 4096,
      numGpuBlocks: 100,
      vllmVersion: '0.33.0',
      dataParallelSize: 2,
      layout: LAYOUT,
    });
    bridge.add(request(11, [1, 2], { returnRoutedExperts: false }, { dataParallelRank: 1 }));
    expect(links[1]!.adds).toHaveLength(3);
  });

  it("never gives a rank's output to another rank's request", () => {
    const { bridge, links } = ranks(2);
    bridge.add(request(0, [1, 2], { returnRoutedExperts: false }, { dataParallelRank: 0 }));
    bridge.add(request(1, [1, 2], { returnRoutedExperts: false }, { dataParallelRank: 1 }));
    bridge.output(facts(links[0]!.adds[0]!.requestId, [4], 0, 3), 1);
    bridge.output(facts(links[1]!.adds[0]!.requestId, [5], 0, 3), 1);
    const out = bridge.newStepOutputs();
    bridge.step(out);
    expect(out.count).toBe(1);
    expect(out.slot[0]).toBe(1);
    expect(out.token[0]).toBe(5);
    expect(bridge.lateOutputs).toBe(1);
  });

  it("calls every rank and answers with rank 0's result; stats add up over the ranks", async () => {
    const { bridge, links } = ranks(2);
    links[1]!.answer = false;
    expect(await bridge.resetPrefixCache()).toBe(true);
    await bridge.pause();
    for (const link of links)
      expect(link.calls.map((c) => c.method)).toEqual(['reset_prefix_cache', 'pause_scheduler']);
    expect(bridge.stats().numGpuBlocks).toBe(200);
    const rows = new Float64Array(256 * 8);
    expect(bridge.rankStats(rows)).toBe(2);
  });

  it('keeps the DP waves of a MoE group: wakes the other ranks when a wave starts, and again when one ends with requests in flight', () => {
    const { bridge, links } = ranks(3);
    expect(bridge.waveState).toEqual({ armed: true, wave: 0, running: false });
    bridge.add(request(0, [1, 2], { returnRoutedExperts: false }, { dataParallelRank: 1 }));
    expect(links[1]!.adds[0]!.currentWave).toBe(0);
    expect(links.map((l) => l.waves)).toEqual([[[0, 1]], [], [[0, 1]]]);
    // Running: a second request wakes nobody.
    bridge.add(request(1, [1, 2], { returnRoutedExperts: false }, { dataParallelRank: 0 }));
    expect(links[1]!.waves).toEqual([]);
    finishOn(bridge, links[1]!, 1);
    finishOn(bridge, links[0]!, 0);
    // Every rank reports the end of wave 0; the first report ends it, the others are stale.
    for (const rank of [0, 1, 2]) bridge.wave(rank, 0, null);
    expect(bridge.waveState).toEqual({ armed: true, wave: 1, running: false });
    bridge.add(request(2, [1, 2], { returnRoutedExperts: false }, { dataParallelRank: 2 }));
    expect(links[2]!.adds[0]!.currentWave).toBe(1);
    expect(links.map((l) => l.waves.at(-1))).toEqual([
      [1, 2],
      [1, 2],
      [0, 1],
    ]);
    // Wave 1 ends while that request is still in flight (it came as the group finished): every
    // rank is woken for wave 2.
    bridge.wave(0, 1, null);
    expect(bridge.waveState).toEqual({ armed: true, wave: 2, running: true });
    for (const link of links) expect(link.waves.at(-1)).toEqual([2, null]);
    // A rank that comes back while a wave runs joins it.
    bridge.detach(1, 'gone');
    bridge.attach(1, links[1]!, {
      maxModelLen: 4096,
      numGpuBlocks: 100,
      vllmVersion: '0.33.0',
      dataParallelSize: 3,
      layout: LAYOUT,
    });
    expect(links[1]!.waves.at(-1)).toEqual([2, null]);
  });

  it('a rank that attaches while a pause is in flight is paused; one attaching during a resume is not', async () => {
    const { bridge, links } = ranks(2);
    const registration = {
      maxModelLen: 4096,
      numGpuBlocks: 100,
      vllmVersion: '0.33.0',
      dataParallelSize: 2,
      layout: LAYOUT,
    };
    bridge.detach(1, 'gone');
    const pausing = bridge.pause();
    bridge.attach(1, links[1]!, registration);
    await pausing;
    expect(bridge.paused).toBe(true);
    expect(links[1]!.calls.map((c) => c.method)).toEqual(['pause_scheduler']);
    bridge.detach(1, 'gone again');
    const resuming = bridge.resume();
    bridge.attach(1, links[1]!, registration);
    await resuming;
    expect(bridge.paused).toBe(false);
    expect(links[1]!.calls.map((c) => c.method)).toEqual(['pause_scheduler']);
  });

  it('a request naming a rank outside the data-parallel size is refused as a bad route', () => {
    const { bridge, links } = ranks(2);
    bridge.add(request(0, [1, 2], { returnRoutedExperts: false }, { dataParallelRank: 2 }));
    const out = bridge.newStepOutputs();
    bridge.step(out);
    expect(out.rejectReason[0]).toBe(RejectReason.BadRoute);
    expect(links.every((l) => l.adds.length === 0)).toBe(true);
  });

  it('with no rank attached, /health says why for every rank', () => {
    const { bridge } = ranks(2);
    bridge.detach(0, 'rank 0 lost');
    bridge.detach(1, 'rank 1 refused');
    const reason = JSON.parse(bridge.note).reason as string;
    expect(reason).toContain('rank 0: rank 0 lost');
    expect(reason).toContain('rank 1: rank 1 refused');
  });

  it('dense ranks (data_parallel_size 1 each) run apart: no waves', () => {
    const { bridge, links } = ranks(2, 1);
    bridge.add(request(0, [1, 2], { returnRoutedExperts: false }));
    expect(bridge.waveState.armed).toBe(false);
    expect(links.every((l) => l.waves.length === 0)).toBe(true);
  });
});
