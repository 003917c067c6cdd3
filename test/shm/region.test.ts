import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ENG_HEARTBEAT,
  HDR_CREATOR_PID,
  HDR_LAYOUT_VERSION,
  HDR_MAGIC,
  LAYOUT_MAGIC,
  LAYOUT_VERSION,
  outputRingOffset,
  regionBytes,
  requestRingOffset,
  SERVERS_START,
  serverStride,
} from '../../src/shm/layout.js';
import { shmAddon } from '../../src/shm/native.js';
import {
  createRegion,
  openRegion,
  outputRingConsumer,
  outputRingProducer,
  populateRegion,
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
    // Outside the default `ringserve-` prefix: every supervisor a parallel test file starts sweeps
    // that prefix at start-up and could take the dead region before this test's own sweep looks.
    // track() unlinks these names after the test, failed or not.
    const prefix = `rstest-${uniqueRegionName('stale')}-`;
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

/** This process's resident shared-memory pages (the region's, as far as this test file goes). */
function rssShmemBytes(): number {
  const status = readFileSync('/proc/self/status', 'utf8');
  return 1024 * Number(/RssShmem:\s+(\d+)/.exec(status)?.[1]);
}

describe('populateRegion', () => {
  const MIB = 1024 * 1024;
  const params = { apiServerCount: 2, requestRingBytes: MIB, outputRingBytes: 16 * MIB };

  it("maps an API server's area and the header at once, none of another server's, data intact", () => {
    const name = track(uniqueRegionName('populate'));
    const created = createRegion(name, params);
    Atomics.store(created.i32, (outputRingOffset(params, 1) >> 2) + 1000, 77);
    const region = openRegion(name);
    const before = rssShmemBytes();
    const mapped = populateRegion(region, 1);
    const grew = rssShmemBytes() - before;
    expect(mapped).toBeGreaterThanOrEqual(serverStride(params) + SERVERS_START - 4096);
    expect(grew).toBeGreaterThanOrEqual(serverStride(params) - 64 * 1024);
    expect(grew).toBeLessThan(serverStride(params) + MIB); // server 0's 17 MiB stay unmapped
    expect(Atomics.load(region.i32, (outputRingOffset(params, 1) >> 2) + 1000)).toBe(77);
    expect(region.i32[HDR_MAGIC >> 2]).toBe(LAYOUT_MAGIC);
    expect(populateRegion(region, 'all')).toBeGreaterThanOrEqual(regionBytes(params) - 4096);
  });

  it('refuses a range outside the buffer or a wrong argument, with a coded error', () => {
    const sab = new SharedArrayBuffer(4 * 4096);
    const addon = shmAddon();
    // Whole pages inside the range only (a plain SharedArrayBuffer need not start on a page).
    expect(addon.populate(sab, 0, 4 * 4096)).toBeGreaterThanOrEqual(3 * 4096);
    expect(addon.populate(sab, 0, 100)).toBe(0);
    for (const [offset, length] of [
      [-1, 10],
      [0, 4 * 4096 + 1],
      [0.5, 10],
      [Number.NaN, 1],
    ]) {
      expect(() => addon.populate(sab, offset!, length!)).toThrow(
        expect.objectContaining({ code: 'RS_ERR_SHM_BAD_ARGUMENT' }),
      );
    }
    expect(() => addon.populate(new ArrayBuffer(8) as unknown as SharedArrayBuffer, 0, 8)).toThrow(
      expect.objectContaining({ code: 'RS_ERR_SHM_BAD_ARGUMENT' }),
    );
  });
});
