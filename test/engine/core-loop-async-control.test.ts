/**
 * The core loop with an engine whose control methods answer later (the vLLM bridge's utility calls)
 * and that can be not ready: a command is acknowledged only once its promise settles, the loop
 * keeps stepping meanwhile and takes no second command, a rejected promise is answered Failed, and
 * a not-ready engine publishes ENGINE_STATE_STARTING, which the API servers read as "engine down".
 */
import { afterEach, describe, expect, it } from 'vitest';
import { CoreLoop } from '../../src/engine/core-loop.js';
import { EngineClient } from '../../src/server/main/engine-client.js';
import { SimEngine } from '../../src/sim/sim-engine.js';
import { ControlClient, ControlCommand, ControlResult } from '../../src/wire/control-channel.js';
import { tinyConfig } from '../sim/helpers.js';
import { testRegion, unlinkTestRegions } from './helpers.js';

/** The simulator, with a pause that waits for the test and a switch for readiness. */
class SlowControlEngine extends SimEngine {
  release: ((ok: boolean) => void) | null = null;
  notReady = false;
  steps = 0;

  override pause(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.release = (ok) => {
        if (!ok) {
          reject(new Error('the engine refused'));
          return;
        }
        super.pause();
        resolve();
      };
    });
  }

  get ready(): boolean {
    return !this.notReady;
  }

  override hasWork(): boolean {
    this.steps++;
    return super.hasWork();
  }
}

let stop: (() => Promise<void>) | null = null;

afterEach(async () => {
  await stop?.();
  stop = null;
  unlinkTestRegions();
});

function start() {
  const region = testRegion({
    apiServerCount: 1,
    requestRingBytes: 1 << 16,
    outputRingBytes: 1 << 16,
  });
  const engine = new SlowControlEngine(tinyConfig());
  const loop = new CoreLoop(region, engine);
  const done = loop.run();
  stop = async () => {
    loop.stop();
    await done;
  };
  return {
    region,
    engine,
    control: new ControlClient(region, 0),
    client: new EngineClient(region, 0),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('CoreLoop with asynchronous control', () => {
  it('acknowledges a command when its promise settles and keeps turning meanwhile', async () => {
    const { engine, control } = start();
    const answer = control.call(ControlCommand.Pause, [], null, 5_000);
    let settled = false;
    void answer.then(() => {
      settled = true;
    });
    await sleep(150);
    expect(engine.release).not.toBeNull();
    expect(settled).toBe(false);
    const turns = engine.steps;
    await sleep(150);
    expect(engine.steps).toBeGreaterThan(turns);
    engine.release!(true);
    expect((await answer).code).toBe(ControlResult.Ok);
    expect(engine.paused).toBe(true);

    const failed = control.call(ControlCommand.Pause, [], null, 5_000);
    await sleep(100);
    engine.release!(false);
    expect((await failed).code).toBe(ControlResult.Failed);
  });

  it('publishes a not-ready engine as STARTING: the API servers see it down', async () => {
    const { engine, client } = start();
    await sleep(120);
    expect(client.alive()).toBe(true);
    engine.notReady = true;
    await sleep(120);
    expect(client.alive()).toBe(false);
    engine.notReady = false;
    await sleep(120);
    expect(client.alive()).toBe(true);
  });
});
