import { afterEach, describe, expect, it } from 'vitest';
import {
  ENG_HEARTBEAT,
  HDR_CREATOR_PID,
  HDR_LAYOUT_VERSION,
  HDR_MAGIC,
  LAYOUT_MAGIC,
  LAYOUT_VERSION,
  regionBytes,
  requestRingOffset,
} from '../../src/shm/layout.js';
import { shmAddon } from '../../src/shm/native.js';
import {
  createRegion,
  openRegion,
  outputRingConsumer,
  outputRingProducer,
  removeStaleRegions,
  requestRingConsumer,
  requestRingProducer,
  unlinkRegion,
} from '../../src/shm/region.js';
import { type Fixture, startFixture, stopFixture, uniqueRegionName } from './helpers.js';

const SMALL = { apiServerCount: 2, requestRingBytes: 4096, outputRingBytes: 8192 };
const created: string[] = [];
let fixture: Fixture | undefined;

function track(name: string): string {
  created.push(name);
  return name;
}

afterEach(async () => {
  await stopFixture(fixture);
  fixture = undefined;
  for (const name of created.splice(0)) unlinkRegion(name);
});

describe('region', () => {
  it('creates a region with its header and reopens it with the same layout', () => {
    const name = track(uniqueRegionName('region'));
    const region = createRegion(name, SMALL);
    expect(region.sab.byteLength).toBe(regionBytes(region.params));
    expect(region.i32[HDR_MAGIC >> 2]).toBe(LAYOUT_MAGIC);
    expect(region.i32[HDR_LAYOUT_VERSION >> 2]).toBe(LAYOUT_VERSION);
    expect(region.i32[HDR_CREATOR_PID >> 2]).toBe(process.pid);
    const reopened = openRegion(name);
    expect(reopened.params).toEqual(SMALL);
    Atomics.add(region.i32, ENG_HEARTBEAT >> 2, 5);
    expect(Atomics.load(reopened.i32, ENG_HEARTBEAT >> 2)).toBe(5);
  });

  it('refuses to create a region that exists and to open one that does not', () => {
    const name = track(uniqueRegionName('twice'));
    createRegion(name, SMALL);
    expect(() => createRegion(name, SMALL)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_EXISTS' }),
    );
    expect(() => openRegion(uniqueRegionName('missing'))).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_NOT_FOUND' }),
    );
  });

  it('answers a bad magic and a bad layout version with coded errors', () => {
    const name = track(uniqueRegionName('magic'));
    const region = createRegion(name, SMALL);
    Atomics.store(region.i32, HDR_MAGIC >> 2, 0x1234);
    expect(() => openRegion(name)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_BAD_MAGIC' }),
    );
    Atomics.store(region.i32, HDR_MAGIC >> 2, LAYOUT_MAGIC);
    Atomics.store(region.i32, HDR_LAYOUT_VERSION >> 2, LAYOUT_VERSION + 1);
    expect(() => openRegion(name)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_LAYOUT_VERSION' }),
    );
    const raw = track(uniqueRegionName('raw'));
    shmAddon().create(raw, 4096);
    expect(() => openRegion(raw)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_BAD_MAGIC' }),
    );
  });

  it('connects each API server to its own request and output rings', () => {
    const name = track(uniqueRegionName('rings'));
    const region = createRegion(name, SMALL);
    for (let server = 0; server < SMALL.apiServerCount; server++) {
      const toEngine = requestRingProducer(region, server);
      const fromServer = requestRingConsumer(region, server);
      const toServer = outputRingProducer(region, server);
      const fromEngine = outputRingConsumer(region, server);
      toEngine.view.setUint32(toEngine.reserve(1, 4, 100), 1000 + server, true);
      toEngine.commit();
      toServer.view.setUint32(toServer.reserve(2, 4, 100), 2000 + server, true);
      toServer.commit();
      expect(fromServer.next()).toBe(true);
      expect(fromServer.view.getUint32(fromServer.offset, true)).toBe(1000 + server);
      expect(fromEngine.next()).toBe(true);
      expect(fromEngine.view.getUint32(fromEngine.offset, true)).toBe(2000 + server);
      expect(fromServer.next() || fromEngine.next()).toBe(false);
    }
    expect(() => requestRingProducer(region, 2)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_BAD_LAYOUT' }),
    );
    expect(requestRingOffset(region.params, 1)).toBeGreaterThan(
      requestRingOffset(region.params, 0),
    );
  });

  it('removes a crashed run’s region and keeps live ones', async () => {
    const prefix = `${uniqueRegionName('stale')}-`;
    const dead = track(`${prefix}dead`);
    const live = track(`${prefix}live`);
    const fresh = track(`${prefix}headerless`);
    fixture = startFixture('shm-creator.mjs', [dead]);
    await fixture.waitFor('ready', 10_000);
    await stopFixture(fixture); // SIGKILL: the region stays behind, its creator gone
    createRegion(live, SMALL);
    shmAddon().create(fresh, 4096); // mid-creation look-alike: no pid yet, but brand new
    expect(removeStaleRegions(prefix)).toEqual([dead]);
    expect(() => openRegion(dead)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_NOT_FOUND' }),
    );
    expect(openRegion(live).params).toEqual(SMALL);
    expect(shmAddon().open(fresh).byteLength).toBe(4096);
    expect(removeStaleRegions(prefix)).toEqual([]);
  });
});
