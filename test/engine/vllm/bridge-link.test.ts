/**
 * The bridge (VllmBridge + VllmBridgeLink, in process) against the independent mirror engine over
 * real ZMQ on loopback: `auto` detects every layout from the registration and the first output
 * and reads it right; an engine no layout fits is refused with a reason that says what was seen;
 * and what the engine sends that does not decode costs only the requests it names, never the link
 * (an unknown finish reason, a truncated message, another dtype spelling, a 64-bit integer where
 * ringserve skips, a longer utility result).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { StepOutputs } from '../../../src/engine/step-outputs.js';
import { VllmBridge } from '../../../src/engine/vllm/bridge.js';
import { VllmBridgeLink } from '../../../src/engine/vllm/bridge-link.js';
import { parseEngineNote } from '../../../src/wire/engine-note.js';
import { getModelCard } from '../../../src/wire/model-card.js';
import { RejectReason } from '../../../src/wire/reject.js';
import { type EngineRequest, FinishReason } from '../../../src/wire/types.js';
import { until } from '../../until.js';
import { Ext, f64, pack } from './mirror/codec.js';
import {
  logprobAt,
  MirrorEngine,
  type MirrorEngineOptions,
  promptSum,
  tokenAt,
} from './mirror/engine.js';
import { ERAS, type Era } from './mirror/eras.js';

const CARD = getModelCard('tiny');
const PROMPT = [3, 9, 27, 81];
const open: { link: VllmBridgeLink; engine: MirrorEngine }[] = [];

afterEach(async () => {
  for (const { link, engine } of open.splice(0)) {
    await engine.close();
    await link.close();
  }
});

/** The link and the mirror run in this process: polled every 5 ms, for at most 5 s. */
const SOON = { timeoutMs: 5_000, intervalMs: 5 };

/** A bridge whose link a mirror engine of `era` dialled; `ready` waits for its READY. */
async function linked(era: Era, engine: Partial<MirrorEngineOptions> = {}, ready = true) {
  const bridge = new VllmBridge({ card: CARD, maxModelLen: 4096, blockSize: 16 });
  const logs: string[] = [];
  const link = new VllmBridgeLink(bridge, {
    address: '127.0.0.1',
    port: 0,
    version: 'auto',
    pingTimeoutMs: 2_000,
    log: (_level, message) => logs.push(message),
  });
  const endpoint = await link.start();
  const mirror = new MirrorEngine({
    era,
    layers: 4,
    topk: 4,
    numExperts: 16,
    vocab: 1000,
    stepMs: 2,
    returnRoutedExperts: true,
    ...engine,
  });
  open.push({ link, engine: mirror });
  await mirror.connect(endpoint);
  if (ready)
    await until(
      () => bridge.ready,
      (ready) => ready,
      { ...SOON, what: 'the bridge to be ready' },
    );
  return { bridge, mirror, logs, rows: new Rows(bridge) };
}

function request(slot: number, maxTokens: number): EngineRequest {
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
      returnRoutedExperts: true,
      routedExpertsPromptStart: 0,
    },
    priority: 0,
    cacheSalt: null,
    arrivalTimeMs: Date.now(),
  };
}

/** What the bridge's steps emitted, per slot: tokens, logprobs, finish, reject reason. */
class Rows {
  readonly #bridge: VllmBridge;
  readonly #out = new StepOutputs(64);
  readonly bySlot = new Map<
    number,
    { tokens: number[]; logprobs: number[]; finish: number; reject: number }
  >();

  constructor(bridge: VllmBridge) {
    this.#bridge = bridge;
  }

  of(slot: number) {
    let r = this.bySlot.get(slot);
    if (r === undefined) {
      r = { tokens: [], logprobs: [], finish: FinishReason.None, reject: 0 };
      this.bySlot.set(slot, r);
    }
    return r;
  }

  /** Steps the bridge until `slot` has finished. */
  async finished(slot: number, timeoutMs = 5_000): Promise<void> {
    await until(
      () => {
        this.step();
        return this.of(slot).finish;
      },
      (finish) => finish !== FinishReason.None,
      { ...SOON, timeoutMs, what: `slot ${slot} to finish` },
    );
  }

  step(): void {
    const out = this.#out;
    out.clear();
    this.#bridge.step(out);
    for (let i = 0; i < out.count; i++) {
      const r = this.of(out.slot[i]!);
      if (out.token[i]! >= 0) {
        r.tokens.push(out.token[i]!);
        r.logprobs.push(out.logprob[i]!);
      }
      if (out.finish[i] !== FinishReason.None) {
        r.finish = out.finish[i]!;
        r.reject = out.rejectReason[i]!;
      }
    }
  }
}

const tokens = (n: number) =>
  Array.from({ length: n }, (_, i) => tokenAt(promptSum(PROMPT), i, 1000));

describe('VllmBridgeLink against an independent engine', () => {
  it.each(ERAS)('auto: an engine of %s is detected and read right', async (era) => {
    const { bridge, mirror, rows } = await linked(era);
    bridge.add(request(0, 5));
    await rows.finished(0);
    expect(rows.of(0)).toEqual({
      tokens: tokens(5),
      logprobs: [0, 1, 2, 3, 4].map(logprobAt),
      finish: FinishReason.Length,
      reject: 0,
    });
    expect(parseEngineNote(bridge.note)).toEqual({
      reason: null,
      info: { vllm_layout: era, vllm_version: mirror.registration!.vllm_version as string },
      adapters: [],
    });
    expect(mirror.adds[0]!.length).toBe(mirror.era === '0.33' ? 22 : era >= '0.28' ? 21 : 20);
  });

  it('refuses an engine whose registration lacks max_model_len, saying what it saw', async () => {
    const { bridge } = await linked('0.29', { registration: { max_model_len: undefined } }, false);
    await until(
      () => parseEngineNote(bridge.note).reason,
      (r) => r?.includes('max_model_len') === true,
      SOON,
    );
    const reason = parseEngineNote(bridge.note).reason!;
    expect(reason).toMatch(/registration did not decode/);
    expect(reason).toMatch(/keys: num_gpu_blocks/);
    expect(reason).toMatch(/layouts: 0\.33 /);
    expect(bridge.ready).toBe(false);
  });

  it('refuses an engine whose EngineCoreOutput has an element count no layout has', async () => {
    const { bridge, mirror } = await linked('0.29', { stepMs: 60_000 });
    bridge.add(request(0, 50));
    await until(
      () => mirror.adds.length,
      (n) => n === 1,
      SOON,
    );
    const id = mirror.adds[0]!.request.request_id;
    const body = pack([
      0,
      [[id, [5], ...Array(13).fill(null)]],
      null,
      f64(1),
      null,
      null,
      null,
      null,
    ]);
    await mirror.sendRaw([body]);
    await until(
      () => bridge.ready,
      (ready) => !ready,
      { ...SOON, what: 'the bridge to drop the link' },
    );
    expect(parseEngineNote(bridge.note).reason).toMatch(/EngineCoreOutput has 15 fields; layouts:/);
  });

  it('an undecodable output fails its request alone: the engine is told to abort it, the link stays', async () => {
    const { bridge, mirror, rows } = await linked('0.33', { stepMs: 20 });
    bridge.add(request(0, 400));
    bridge.add(request(1, 6));
    await until(
      () => mirror.adds.length,
      (n) => n === 2,
      SOON,
    );
    const [a, b] = mirror.adds.map((x) => x.request.request_id);
    // An output for request 0 with finish reason 9, which no vLLM sends.
    const bad = [a, [7], ...Array(16).fill(null)];
    bad[5] = 9;
    await mirror.sendRaw([pack([0, [bad], null, f64(1), null, null, null, null])]);
    await rows.finished(0);
    expect(rows.of(0)).toMatchObject({
      finish: FinishReason.Error,
      reject: RejectReason.EngineFailed,
    });
    await until(
      () => mirror.aborts,
      (aborts) => aborts.includes(a!),
      SOON,
    );
    await rows.finished(1);
    expect(rows.of(1)).toMatchObject({ tokens: tokens(6), finish: FinishReason.Length });
    expect(bridge.ready).toBe(true);
    expect(bridge.undecodable).toBe(1);
    expect(b).toBeDefined();
  });

  it('a message that breaks off fails the requests it names; others, and the link, go on', async () => {
    const { bridge, mirror, rows } = await linked('0.33', { stepMs: 20 });
    for (const slot of [0, 1, 2]) bridge.add(request(slot, slot === 2 ? 6 : 400));
    await until(
      () => mirror.adds.length,
      (n) => n === 3,
      SOON,
    );
    const [a, b] = mirror.adds.map((x) => x.request.request_id);
    const whole = pack([
      0,
      [
        [a, [7], ...Array(16).fill(null)],
        [b, [8], ...Array(16).fill(null)],
      ],
      null,
      f64(1),
      null,
      null,
      null,
      null,
    ]);
    // Cut inside b's output: a's decodes (and is taken), b's id is in what is left.
    const cut = whole.subarray(0, whole.indexOf(Buffer.from(b!)) + b!.length + 2);
    await mirror.sendRaw([cut]);
    await rows.finished(1);
    expect(rows.of(1)).toMatchObject({ finish: FinishReason.Error });
    expect(rows.of(0).finish).toBe(FinishReason.None);
    await rows.finished(2);
    expect(rows.of(2)).toMatchObject({ tokens: tokens(6), finish: FinishReason.Length });
    expect(bridge.ready).toBe(true);
  });

  it('costs nothing: uint8 and =u1 dtype spellings, a 64-bit integer in a skipped field, a longer utility result', async () => {
    const { bridge, mirror, rows } = await linked('0.33', { stepMs: 50_000 });
    bridge.add(request(0, 2));
    await until(
      () => mirror.adds.length,
      (n) => n === 1,
      SOON,
    );
    const id = mirror.adds[0]!.request.request_id;
    const out = [id, [5], ...Array(16).fill(null)];
    out[7] = [{ type: 1, timestamp: f64(1), extra: 2n ** 64n - 1n }]; // events: skipped
    out[12] = ['uint8', [PROMPT.length, 4, 4], new Ext(3, Buffer.alloc(PROMPT.length * 16, 1))];
    out[13] = 0;
    const last = [id, [6], ...Array(16).fill(null)];
    last[5] = 1;
    last[12] = ['=u1', [1, 4, 4], new Ext(3, Buffer.alloc(16, 2))];
    last[13] = 0;
    await mirror.sendRaw([pack([0, [out], null, f64(1), null, null, null, null])]);
    await mirror.sendRaw([pack([0, [last], null, f64(2), null, null, null, null])]);
    await rows.finished(0);
    expect(rows.of(0)).toMatchObject({ tokens: [5, 6], finish: FinishReason.Length, reject: 0 });
    const reply = pack([
      0,
      [],
      null,
      f64(3),
      [2n ** 63n, null, [null, true, 'more'], 'extra'],
      null,
      null,
      null,
    ]);
    await mirror.sendRaw([reply]);
    expect(bridge.undecodable).toBe(0);
    expect(bridge.ready).toBe(true);
  });
});
