/**
 * The control channel through a real region, both ends in this process: the test plays the engine
 * (pending / complete) while ControlClient calls wait on their event loop.
 */
import { spawnSync } from 'node:child_process';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CTL_LOCK, CTL_REPLY_CAPACITY } from '../../src/shm/layout.js';
import { createRegion, type Region, unlinkRegion } from '../../src/shm/region.js';
import {
  ControlClient,
  ControlCommand,
  ControlResult,
  ControlServer,
} from '../../src/wire/control-channel.js';
import { uniqueRegionName } from '../shm/helpers.js';
import { until } from '../until.js';

/** A command reaches the engine within microseconds; polled often, as a caller may time out at 100 ms. */
const SOON = { timeoutMs: 2_000, intervalMs: 5 };

describe('control channel', () => {
  let region: Region;
  beforeEach(() => {
    region = createRegion(uniqueRegionName('control'));
  });
  afterEach(() => {
    unlinkRegion(region.name);
  });

  it('hands the engine the command and its arguments, and the caller the result', async () => {
    const engine = new ControlServer(region);
    expect(engine.hasPending()).toBe(false);
    const reply = new ControlClient(region, 3).call(
      ControlCommand.UpdateWeights,
      [41],
      null,
      5_000,
    );
    await until(
      () => engine.hasPending(),
      (held) => held,
      { ...SOON, what: 'the command' },
    );
    const command = engine.pending()!;
    expect(command.code).toBe(ControlCommand.UpdateWeights);
    expect(command.server).toBe(3);
    expect(command.args[0]).toBe(41);
    engine.complete(ControlResult.Ok, 41);
    expect(await reply).toEqual({ code: ControlResult.Ok, value: 41, text: '' });
    expect(engine.hasPending()).toBe(false);
    expect(Atomics.load(region.i32, CTL_LOCK >> 2)).toBe(0);
  });

  it('a command whose caller gave up is never run, and the next caller gets its own answer', async () => {
    const engine = new ControlServer(region);
    const client = new ControlClient(region, 0);
    await expect(client.call(ControlCommand.Pause, [], null, 30)).rejects.toMatchObject({
      code: 'RS_ERR_CONTROL_TIMEOUT',
      statusCode: 503,
    });
    // The engine comes back late: the expired pause is answered without being handed out.
    expect(engine.hasPending()).toBe(true);
    expect(engine.pending()).toBeNull();
    expect(engine.hasPending()).toBe(false);
    const reply = client.call(ControlCommand.Resume, [], null, 5_000);
    await until(
      () => engine.hasPending(),
      (held) => held,
      { ...SOON, what: 'the resume' },
    );
    expect(engine.pending()!.code).toBe(ControlCommand.Resume);
    engine.complete(ControlResult.Ok, 7);
    expect(await reply).toEqual({ code: ControlResult.Ok, value: 7, text: '' });
  });

  it('a late answer to a command the engine had taken is not taken for the next one', async () => {
    const engine = new ControlServer(region);
    const first = new ControlClient(region, 0).call(ControlCommand.Pause, [], null, 100);
    await until(
      () => engine.hasPending(),
      (held) => held,
      { ...SOON, what: 'the pause' },
    );
    expect(engine.pending()!.code).toBe(ControlCommand.Pause);
    // The engine stalls with the pause in hand; its caller gives up, another one calls.
    await expect(first).rejects.toMatchObject({ code: 'RS_ERR_CONTROL_TIMEOUT' });
    const second = new ControlClient(region, 1).call(
      ControlCommand.UpdateWeights,
      [9],
      null,
      5_000,
    );
    await new Promise((r) => setTimeout(r, 20));
    engine.complete(ControlResult.Ok, 111); // the pause's answer
    await until(
      () => engine.hasPending(),
      (held) => held,
      { ...SOON, what: 'the update' },
    );
    const command = engine.pending()!;
    expect(command.code).toBe(ControlCommand.UpdateWeights);
    expect(command.args[0]).toBe(9);
    engine.complete(ControlResult.Ok, 9);
    expect(await second).toEqual({ code: ControlResult.Ok, value: 9, text: '' });
  });

  it('a restarted engine answers the command its predecessor left as failed', async () => {
    const dead = new ControlServer(region);
    const reply = new ControlClient(region, 0).call(ControlCommand.Pause, [], null, 5_000);
    await until(
      () => dead.hasPending(),
      (held) => held,
      { ...SOON, what: 'the pause' },
    );
    dead.pending();
    const restarted = new ControlServer(region);
    expect(await reply).toEqual({ code: ControlResult.Failed, value: 0, text: '' });
    expect(restarted.hasPending()).toBe(false);
  });

  it("carries the engine's reply text back (a failure's reason), cut at the block's capacity", async () => {
    const engine = new ControlServer(region);
    const client = new ControlClient(region, 0);
    const reply = client.call(ControlCommand.LoadLora, [], 'x', 5_000);
    await until(
      () => engine.hasPending(),
      (held) => held,
      { ...SOON, what: 'the load' },
    );
    engine.pending();
    engine.complete(ControlResult.NotFound, 0, "no adapter at '/w/é' (adapter_config.json)");
    expect(await reply).toEqual({
      code: ControlResult.NotFound,
      value: 0,
      text: "no adapter at '/w/é' (adapter_config.json)",
    });
    const long = client.call(ControlCommand.LoadLora, [], 'x', 5_000);
    await until(
      () => engine.hasPending(),
      (held) => held,
      { ...SOON, what: 'the second load' },
    );
    engine.pending();
    engine.complete(ControlResult.Failed, 0, 'é'.repeat(CTL_REPLY_CAPACITY));
    const text = (await long).text;
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(CTL_REPLY_CAPACITY);
    expect(text).toBe('é'.repeat(CTL_REPLY_CAPACITY / 2));
  });

  it('takes over the lock of a caller that died holding it', async () => {
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']);
    Atomics.store(region.i32, CTL_LOCK >> 2, Number(gone.stdout.toString()));
    const engine = new ControlServer(region);
    const reply = new ControlClient(region, 0).call(ControlCommand.Resume, [], null, 5_000);
    await until(
      () => engine.hasPending(),
      (held) => held,
      { ...SOON, what: 'the resume' },
    );
    engine.pending();
    engine.complete(ControlResult.Ok, 0);
    expect((await reply).code).toBe(ControlResult.Ok);
  });

  it('a live holder makes the next caller wait, bounded, with a coded error', async () => {
    Atomics.store(region.i32, CTL_LOCK >> 2, process.ppid);
    await expect(
      new ControlClient(region, 0).call(ControlCommand.Pause, [], null, 40),
    ).rejects.toMatchObject({ code: 'RS_ERR_CONTROL_TIMEOUT', message: /lock/ });
  });
});
