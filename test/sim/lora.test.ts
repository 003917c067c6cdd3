import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SimEngine } from '../../src/sim/sim-engine.js';
import type { LoraAdapter } from '../../src/wire/admin-args.js';
import { ControlRefusal, ControlResult } from '../../src/wire/control-channel.js';
import { RejectReason } from '../../src/wire/reject.js';
import { FinishReason } from '../../src/wire/types.js';
import { drain, key, observable, request, tinyConfig } from './helpers.js';

/**
 * The simulator's LoRA adapters: a request's outputs are a deterministic function of its adapter's
 * files as loaded, differ from the base model's and another adapter's, change when the adapter is
 * reloaded with other files, and never share the prefix cache with the base model.
 */
const root = mkdtempSync(join(tmpdir(), 'rs-lora-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function adapterDir(name: string, weights: string): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify({ r: 8, lora_alpha: 16 }));
  writeFileSync(join(dir, 'adapter_model.safetensors'), weights);
  return dir;
}

function run(engine: SimEngine, loraId: number, slot = 0) {
  engine.add(request(slot, { maxTokens: 24, ignoreEos: true }, { loraId }));
  return observable(drain(engine).get(key(0, slot)));
}

describe('SimEngine LoRA adapters', () => {
  it('runs an adapter as a model of its own, the same from the same files', async () => {
    const a: LoraAdapter = { id: 1, name: 'a', path: adapterDir('a', 'weights-a') };
    const b: LoraAdapter = { id: 2, name: 'b', path: adapterDir('b', 'weights-b') };
    const engine = new SimEngine(tinyConfig());
    await engine.loadLora(a);
    await engine.loadLora(b);
    const base = run(engine, 0);
    const withA = run(engine, 1);
    const withB = run(engine, 2);
    expect(withA.tokens).toHaveLength(24);
    expect(withA.tokens).not.toEqual(base.tokens);
    expect(withB.tokens).not.toEqual(withA.tokens);
    expect(withA.logprobs).not.toEqual(base.logprobs);
    // Another engine with the same files under another id answers the same.
    const other = new SimEngine(tinyConfig());
    await other.loadLora({ ...a, id: 7 });
    expect(run(other, 7)).toEqual(withA);
    expect(run(engine, 0)).toEqual(base);
  });

  it('answers differently once reloaded in place with new files, and as before with the old', async () => {
    const dir = adapterDir('step', 'step-0');
    const adapter: LoraAdapter = { id: 1, name: 'policy', path: dir };
    const engine = new SimEngine(tinyConfig());
    await engine.loadLora(adapter);
    const first = run(engine, 1);
    writeFileSync(join(dir, 'adapter_model.safetensors'), 'step-1');
    expect(run(engine, 1)).toEqual(first); // files changed, not reloaded yet
    await engine.loadLora(adapter);
    const second = run(engine, 1);
    expect(second.tokens).not.toEqual(first.tokens);
    writeFileSync(join(dir, 'adapter_model.safetensors'), 'step-0');
    await engine.loadLora(adapter);
    expect(run(engine, 1)).toEqual(first);
  });

  it('keeps the prefix cache apart from the base model', async () => {
    const engine = new SimEngine(tinyConfig());
    await engine.loadLora({ id: 1, name: 'a', path: adapterDir('cache', 'w') });
    const prompt = new Int32Array(64).map((_, i) => (i * 7) % 900);
    const go = (slot: number, loraId: number): number => {
      engine.add(request(slot, { maxTokens: 2 }, { loraId, promptTokenIds: prompt }));
      return drain(engine).get(key(0, slot))!.numCachedTokens;
    };
    expect(go(0, 0)).toBe(0);
    expect(go(1, 1)).toBe(0);
    expect(go(2, 1)).toBeGreaterThan(0);
    expect(go(3, 0)).toBeGreaterThan(0);
  });

  it("refuses a path with no adapter in vLLM's words, and a request whose adapter is gone", async () => {
    const engine = new SimEngine(tinyConfig());
    const missing = { id: 1, name: 'x', path: join(root, 'nothing-here') };
    const refusal = await engine.loadLora(missing).catch((e: unknown) => e);
    expect(refusal).toBeInstanceOf(ControlRefusal);
    expect((refusal as ControlRefusal).result).toBe(ControlResult.NotFound);
    expect((refusal as Error).message).toBe(
      `Loading lora x failed: No adapter found for ${missing.path}`,
    );
    const empty = join(root, 'empty');
    mkdirSync(empty, { recursive: true });
    await expect(engine.loadLora({ id: 1, name: 'x', path: empty })).rejects.toBeInstanceOf(
      ControlRefusal,
    );
    const a: LoraAdapter = { id: 3, name: 'a', path: adapterDir('gone', 'w') };
    await engine.loadLora(a);
    engine.unloadLora(a);
    engine.add(request(0, {}, { loraId: 3 }));
    const out = drain(engine).get(key(0, 0))!;
    expect(out.finish).toBe(FinishReason.Error);
    expect(out.rejectReason).toBe(RejectReason.LoraNotLoaded);
    expect(out.tokens).toEqual([]);
  });

  it('records the broadcaster it joined and names it in its note', () => {
    const engine = new SimEngine(tinyConfig());
    expect(engine.note).toBeUndefined();
    const args = {
      host: '10.0.0.2',
      port: 29501,
      rankOffset: 8,
      inferenceWorldSize: 16,
      timeout: 1200,
      quantizeInWeightTransfer: false,
      sessionId: 'default',
    };
    engine.initBroadcaster(args);
    expect(engine.broadcaster).toEqual(args);
    expect(JSON.parse(engine.note!)).toEqual({
      reason: null,
      info: {
        weight_broadcaster: '10.0.0.2:29501',
        weight_broadcaster_ranks: '8+16',
        weight_broadcaster_session: 'default',
      },
    });
    expect(engine.updateWeights()).toBe(1);
    expect(engine.updateWeights()).toBe(2);
  });
});
