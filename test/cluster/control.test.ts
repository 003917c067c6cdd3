/**
 * The RL control plane on real clusters: pause holds every in-flight request exactly where it is
 * (no token generated for a second, aborts still confirmed, new requests queue) and resume finishes
 * them; update_weights changes what a seed samples and a manifest brings a version back; an abort
 * landing on another API server than the request ends it with finish_reason "abort";
 * reset_prefix_cache; /liveness reports a stopped engine. Keys: control-keys.test.ts.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate } from '../../src/client/index.js';
import {
  STAT_GENERATION_TOKENS,
  STAT_PAUSED,
  STAT_RUNNING,
  STAT_STEP_COUNT,
  STAT_WAITING,
  STAT_WEIGHT_VERSION,
} from '../../src/shm/layout.js';
import { until } from '../until.js';
import { call, choice, genBody, post, sleep, weightDir } from './control-helpers.js';
import { type Cluster, startCluster } from './harness.js';

describe('control plane (2 API servers, real-time engine)', () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster(['--api-server-count', '2']);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('pause stops generation at once, keeps requests, confirms aborts, queues new ones; resume finishes them', async () => {
    // qwen3 steps take ~10 ms: 400 tokens take ~4 s, so all six are mid-flight when paused.
    const ids = ['p0', 'p1', 'p2', 'p3', 'p4', 'p5'];
    const inflight = ids.map((id, i) => generate(cluster.url, genBody(400, i), { requestId: id }));
    await until(
      () => cluster.engineStat(STAT_GENERATION_TOKENS),
      (n) => n >= 6 * 20,
    );
    expect(cluster.engineStat(STAT_RUNNING)).toBe(6);
    expect(await post(cluster, '/pause')).toEqual({ status: 200, body: { status: 'paused' } });
    // Answered once the engine is paused: from here on no step runs.
    const tokens = cluster.engineStat(STAT_GENERATION_TOKENS);
    const steps = cluster.engineStat(STAT_STEP_COUNT);
    expect(cluster.engineStat(STAT_PAUSED)).toBe(1);
    const late = generate(cluster.url, genBody(30, 99), { requestId: 'late' });
    const aborted = await post(cluster, '/abort_requests', { request_ids: ['generate-tokens-p5'] });
    expect(aborted.status).toBe(200);
    // The abort is confirmed while paused: the client gets its partial output.
    const p5 = choice(await inflight[5]!);
    expect(p5.finishReason).toBe('abort');
    expect(p5.tokenIds.length).toBeGreaterThan(0);
    expect(p5.tokenIds.length).toBeLessThan(400);
    await sleep(1_000);
    expect(cluster.engineStat(STAT_GENERATION_TOKENS)).toBe(tokens);
    expect(cluster.engineStat(STAT_STEP_COUNT)).toBe(steps);
    expect(cluster.engineStat(STAT_WAITING)).toBe(1); // 'late' is queued, not refused
    expect(cluster.engineStat(STAT_RUNNING)).toBe(5);
    expect((await call(cluster.url, 'GET', '/health')).status).toBe(200);
    expect(await call(cluster.url, 'GET', '/liveness')).toEqual({
      status: 200,
      body: { status: 'ok' },
    });
    expect(await post(cluster, '/resume')).toEqual({ status: 200, body: { status: 'resumed' } });
    for (const pending of inflight.slice(0, 5)) {
      const c = choice(await pending);
      expect(c.finishReason).toBe('length');
      expect(c.tokenIds.length).toBe(400);
    }
    expect(choice(await late).tokenIds.length).toBe(30);
    expect(cluster.engineStat(STAT_PAUSED)).toBe(0);
  });

  it('a paused request resumes with exactly the tokens it would have had without the pause', async () => {
    const straight = await generate(cluster.url, genBody(150, 4242));
    const pending = generate(cluster.url, genBody(150, 4242));
    await until(
      () => cluster.engineStat(STAT_RUNNING),
      (n) => n === 1,
    );
    await sleep(300);
    expect((await post(cluster, '/pause')).status).toBe(200);
    await sleep(200);
    expect((await post(cluster, '/resume')).status).toBe(200);
    expect(choice(await pending).tokenIds).toEqual(choice(straight).tokenIds);
  });

  it('update_weights changes what a seed samples; the first manifest brings the tokens back', async () => {
    const dirs = await mkdtemp(join(tmpdir(), 'ringserve-test-weights-'));
    try {
      const first = cluster.engineStat(STAT_WEIGHT_VERSION);
      const v0 = await weightDir(dirs, 'v0', first);
      const v1 = await weightDir(dirs, 'v1', 77);
      const noManifest = await weightDir(dirs, 'plain', null);
      const before = choice(await generate(cluster.url, genBody(40, 31337))).tokenIds;
      // Not paused: the server pauses, swaps and resumes by itself.
      expect(await post(cluster, '/update_weights', { weight_dir: v1 })).toEqual({
        status: 200,
        body: { status: 'ok', weight_version: 77 },
      });
      expect(cluster.engineStat(STAT_WEIGHT_VERSION)).toBe(77);
      const after = choice(await generate(cluster.url, genBody(40, 31337))).tokenIds;
      expect(after).not.toEqual(before);
      // No manifest, or no directory at all: the version is incremented.
      expect((await post(cluster, '/update_weights', { weight_dir: noManifest })).body).toEqual({
        status: 'ok',
        weight_version: 78,
      });
      // Paused: accepted too, and live when answered.
      expect((await post(cluster, '/pause')).status).toBe(200);
      expect((await post(cluster, '/update_weights', { weight_dir: null })).body).toEqual({
        status: 'ok',
        weight_version: 79,
      });
      expect((await post(cluster, '/update_weights', { weight_dir: v0 })).body).toEqual({
        status: 'ok',
        weight_version: first,
      });
      expect((await post(cluster, '/resume')).status).toBe(200);
      const back = choice(await generate(cluster.url, genBody(40, 31337))).tokenIds;
      expect(back).toEqual(before);
    } finally {
      await rm(dirs, { recursive: true, force: true });
    }
  });

  it('update_weights refuses a weight_dir that is not a directory, or a bad manifest, naming it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ringserve-test-badmanifest-'));
    try {
      const version = cluster.engineStat(STAT_WEIGHT_VERSION);
      const file = join(dir, 'ringserve-weights.json');
      await writeFile(file, '{"version": -3}');
      for (const body of [
        { weight_dir: join(dir, 'missing') },
        { weight_dir: file },
        { weight_dir: dir },
        { weight_dir: 12 },
        { weight_dir: '' },
      ]) {
        const answer = await post(cluster, '/update_weights', body);
        expect(answer.status).toBe(400);
        expect(answer.body).toMatchObject({
          error: { param: 'weight_dir', code: 400, type: 'BadRequestError' },
        });
      }
      const notObject = await post(cluster, '/update_weights', [1, 2]);
      expect(notObject.status).toBe(400);
      expect(cluster.engineStat(STAT_WEIGHT_VERSION)).toBe(version);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('abort_requests received by another API server ends the request with finish_reason "abort"', async () => {
    const holder = new Client(cluster.url, { pipelining: 1 });
    const others: Client[] = [];
    try {
      const pending = generate(cluster.url, genBody(3000, 5), {
        dispatcher: holder,
        requestId: 'far-away',
      });
      await until(
        () => cluster.engineStat(STAT_RUNNING),
        (n) => n === 1,
      );
      // node:cluster hands each new connection to the next API server: find a connection whose
      // server does not hold the request (its /load is 0; the holder's is 1).
      let elsewhere: Client | null = null;
      for (let i = 0; i < 8 && elsewhere === null; i++) {
        const c = new Client(cluster.url, { pipelining: 1 });
        others.push(c);
        const load = await call(cluster.url, 'GET', '/load', { via: c });
        if ((load.body as { server_load: number }).server_load === 0) elsewhere = c;
      }
      expect(elsewhere).not.toBeNull();
      const answer = await call(cluster.url, 'POST', '/abort_requests', {
        body: { request_ids: ['generate-tokens-far-away'] },
        via: elsewhere!,
      });
      expect(answer).toEqual({ status: 200, body: { status: 'ok' } });
      const c = choice(await pending);
      expect(c.finishReason).toBe('abort');
      expect(c.tokenIds.length).toBeGreaterThan(0);
      expect(c.tokenIds.length).toBeLessThan(3000);
      expect(
        await until(
          () => cluster.engineStat(STAT_RUNNING),
          (n) => n === 0,
        ),
      ).toBe(0);
    } finally {
      await holder.close();
      for (const c of others) await c.close();
    }
  });

  it('abort_requests answers 400 without a request_ids array, 200 for ids nobody holds', async () => {
    expect((await post(cluster, '/abort_requests', { request_ids: 'x' })).status).toBe(400);
    expect((await post(cluster, '/abort_requests', { request_ids: [1] })).status).toBe(400);
    expect(await post(cluster, '/abort_requests', { request_ids: ['nobody'] })).toEqual({
      status: 200,
      body: { status: 'ok' },
    });
  });

  it('reset_prefix_cache answers ok when idle, 409 while requests hold blocks', async () => {
    await until(
      () => cluster.engineStat(STAT_RUNNING),
      (n) => n === 0,
    );
    expect(await post(cluster, '/reset_prefix_cache')).toEqual({
      status: 200,
      body: { status: 'ok' },
    });
    // ~30 s of steps, ended by the abort below: it still holds its blocks however late the
    // reset arrives.
    const pending = generate(cluster.url, genBody(3000, 8), { requestId: 'holds-blocks' });
    await until(
      () => cluster.engineStat(STAT_RUNNING),
      (n) => n === 1,
    );
    const busy = await post(cluster, '/reset_prefix_cache');
    expect(busy.status).toBe(409);
    expect(busy.body).toMatchObject({ error: { code: 409, type: 'ConflictError' } });
    const ids = { request_ids: ['generate-tokens-holds-blocks'] };
    expect((await post(cluster, '/abort_requests', ids)).status).toBe(200);
    expect(choice(await pending).finishReason).toBe('abort');
  });

  it('/liveness answers 503 engine_unresponsive while the engine is stopped, 200 once it runs', async () => {
    const engine = (await cluster.pids()).get('ringserve-engine');
    expect(engine).toBeGreaterThan(0);
    process.kill(engine!, 'SIGSTOP');
    try {
      const stale = await until(
        () => call(cluster.url, 'GET', '/liveness'),
        (a) => a.status === 503,
        { timeoutMs: 10_000 },
      );
      expect(stale).toEqual({ status: 503, body: { status: 'engine_unresponsive' } });
      expect((await call(cluster.url, 'GET', '/health')).status).toBe(503);
      // A control call does not wait out its timeout on an engine known to be stalled.
      const paused = await post(cluster, '/pause');
      expect(paused.status).toBe(503);
    } finally {
      process.kill(engine!, 'SIGCONT');
    }
    const live = await until(
      () => call(cluster.url, 'GET', '/liveness'),
      (a) => a.status === 200,
      { timeoutMs: 10_000 },
    );
    expect(live).toEqual({ status: 200, body: { status: 'ok' } });
    expect(cluster.engineStat(STAT_PAUSED)).toBe(0);
    expect(choice(await generate(cluster.url, genBody(10, 1))).tokenIds.length).toBe(10);
  });
});
