/**
 * `weight_versions` on a real cluster: every token carries the version it was sampled under, and
 * a request that an /update_weights splits reports exactly where: its tokens before the split are
 * what the old version samples, the rest what the new one samples from there.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate, generateStream } from '../../src/client/index.js';
import { STAT_RUNNING, STAT_WEIGHT_VERSION } from '../../src/shm/layout.js';
import { until } from '../until.js';
import { choice, genBody, post, sleep, weightDir } from './control-helpers.js';
import { type Cluster, startCluster } from './harness.js';

describe('weight_versions (real-time engine)', () => {
  let cluster: Cluster;
  let dirs: string;
  beforeAll(async () => {
    cluster = await startCluster(['--api-server-count', '2']);
    dirs = await mkdtemp(join(tmpdir(), 'ringserve-test-versions-'));
  });
  afterAll(async () => {
    await cluster?.stop();
    if (dirs !== undefined) await rm(dirs, { recursive: true, force: true });
  });

  it('reports the live version for every token, in every answer form', async () => {
    const live = cluster.engineStat(STAT_WEIGHT_VERSION);
    const packed = choice(await generate(cluster.url, genBody(20, 1)));
    expect(packed.weightVersions).toEqual(new Int32Array(20).fill(live));
    const legacy = choice(await generate(cluster.url, { ...genBody(20, 1), packed: false }));
    expect(legacy.weightVersions).toEqual(packed.weightVersions);
    const msgpack = choice(await generate(cluster.url, genBody(20, 1), { accept: 'msgpack' }));
    expect(msgpack.weightVersions).toEqual(packed.weightVersions);
    expect((await post(cluster, '/update_weights', { weight_dir: null })).status).toBe(200);
    const next = choice(await generate(cluster.url, genBody(20, 1)));
    expect(next.weightVersions).toEqual(new Int32Array(20).fill(live + 1));
  });

  it('splits a request updated mid-flight exactly where the new version took over', async () => {
    const old = cluster.engineStat(STAT_WEIGHT_VERSION);
    const oldDir = await weightDir(dirs, 'old', old);
    const newDir = await weightDir(dirs, 'new', 500);
    const prompt = [2, 7, 1, 8, 2, 8];
    // Streamed, so the per-event slices are exercised too; ~10 ms a token, 3 s in all.
    const done = generateStream(cluster.url, genBody(300, 2718, prompt)).collect();
    await until(
      () => cluster.engineStat(STAT_RUNNING),
      (n) => n === 1,
    );
    await sleep(500);
    expect((await post(cluster, '/update_weights', { weight_dir: newDir })).status).toBe(200);
    const c = choice(await done);
    const versions = c.weightVersions!;
    expect(versions.length).toBe(300);
    const k = versions.indexOf(500);
    expect(k).toBeGreaterThan(0);
    expect(k).toBeLessThan(300);
    expect(versions.subarray(0, k)).toEqual(new Int32Array(k).fill(old));
    expect(versions.subarray(k)).toEqual(new Int32Array(300 - k).fill(500));
    // The sampler keys on (seed, absolute position) and the context, so the head replays under the
    // old version and the tail under the new one from the head onwards.
    expect((await post(cluster, '/update_weights', { weight_dir: oldDir })).status).toBe(200);
    const head = choice(await generate(cluster.url, genBody(k, 2718, prompt)));
    expect(head.tokenIds).toEqual(c.tokenIds.subarray(0, k));
    expect((await post(cluster, '/update_weights', { weight_dir: newDir })).status).toBe(200);
    const context = [...prompt, ...c.tokenIds.subarray(0, k)];
    const tail = choice(await generate(cluster.url, genBody(300 - k, 2718, context)));
    expect(tail.tokenIds).toEqual(c.tokenIds.subarray(k));
    expect(tail.weightVersions).toEqual(new Int32Array(300 - k).fill(500));
  });
});
