// The cluster's shared-memory region: create (primary), open (every other process), unlink, and the
// start-up sweep that removes regions left behind by a crashed run. Offsets come from layout.ts.
import { closeSync, openSync, readdirSync, readSync, statSync } from 'node:fs';
import { join } from 'node:path';
import {
  RS_ERR_SHM_BAD_LAYOUT,
  RS_ERR_SHM_BAD_MAGIC,
  RS_ERR_SHM_LAYOUT_VERSION,
} from '../errors.js';
import { Doorbell } from './doorbell.js';
import {
  ENGINE_DOORBELL,
  HDR_API_SERVER_COUNT,
  HDR_CREATED_AT_MS,
  HDR_CREATOR_PID,
  HDR_LAYOUT_VERSION,
  HDR_MAGIC,
  HDR_OUTPUT_RING_BYTES,
  HDR_REQUEST_RING_BYTES,
  HDR_TOTAL_BYTES,
  HEADER_BYTES,
  LAYOUT_MAGIC,
  LAYOUT_VERSION,
  type LayoutParams,
  outputRingOffset,
  regionBytes,
  requestRingOffset,
  resolveLayoutParams,
  SERVERS_START,
  serverBlockOffset,
  serverStride,
} from './layout.js';
import { isProcessAlive } from './liveness.js';
import { shmAddon } from './native.js';
import { RingConsumer, RingProducer } from './ring.js';

export const DEFAULT_REGION_PREFIX = 'ringserve-';
const SHM_DIR = '/dev/shm';
/** A region whose creator died before writing its pid is only removed once this old (it may be mid-creation). */
const HEADERLESS_GRACE_MS = 60_000;
const PAGE_BYTES = 4096;

export interface Region {
  readonly name: string;
  readonly sab: SharedArrayBuffer;
  readonly params: Readonly<LayoutParams>;
  /** The whole region as 32-bit words and as float64 slots (index = byte offset >> 2, >> 3). */
  readonly i32: Int32Array;
  readonly f64: Float64Array;
}

function wrap(name: string, sab: SharedArrayBuffer, params: LayoutParams): Region {
  return {
    name,
    sab,
    params: Object.freeze(params),
    i32: new Int32Array(sab, 0, sab.byteLength >> 2),
    f64: new Float64Array(sab, 0, sab.byteLength >> 3),
  };
}

/**
 * Creates the region `name` (fails with RS_ERR_SHM_EXISTS if it exists) sized for `params`, and
 * writes its header: creator pid first, magic last, so readers never see a half-written header.
 */
export function createRegion(name: string, params: Partial<LayoutParams> = {}): Region {
  const resolved = resolveLayoutParams(params);
  const totalBytes = regionBytes(resolved);
  const region = wrap(name, shmAddon().create(name, totalBytes), resolved);
  const { i32, f64 } = region;
  Atomics.store(i32, HDR_CREATOR_PID >> 2, process.pid);
  Atomics.store(i32, HDR_LAYOUT_VERSION >> 2, LAYOUT_VERSION);
  Atomics.store(i32, HDR_API_SERVER_COUNT >> 2, resolved.apiServerCount);
  Atomics.store(i32, HDR_REQUEST_RING_BYTES >> 2, resolved.requestRingBytes);
  Atomics.store(i32, HDR_OUTPUT_RING_BYTES >> 2, resolved.outputRingBytes);
  f64[HDR_TOTAL_BYTES >> 3] = totalBytes;
  f64[HDR_CREATED_AT_MS >> 3] = Date.now();
  Atomics.store(i32, HDR_MAGIC >> 2, LAYOUT_MAGIC);
  return region;
}

/** Maps an existing region and checks its header (RS_ERR_SHM_BAD_MAGIC, RS_ERR_SHM_LAYOUT_VERSION). */
export function openRegion(name: string): Region {
  const sab = shmAddon().open(name);
  if (sab.byteLength < HEADER_BYTES) {
    throw new RS_ERR_SHM_BAD_MAGIC(name, 'none: region smaller than a header');
  }
  const i32 = new Int32Array(sab, 0, HEADER_BYTES >> 2);
  const magic = Atomics.load(i32, HDR_MAGIC >> 2);
  if (magic !== LAYOUT_MAGIC) {
    throw new RS_ERR_SHM_BAD_MAGIC(name, (magic >>> 0).toString(16));
  }
  const version = Atomics.load(i32, HDR_LAYOUT_VERSION >> 2);
  if (version !== LAYOUT_VERSION) {
    throw new RS_ERR_SHM_LAYOUT_VERSION(name, version, LAYOUT_VERSION);
  }
  const params = resolveLayoutParams({
    apiServerCount: Atomics.load(i32, HDR_API_SERVER_COUNT >> 2),
    requestRingBytes: Atomics.load(i32, HDR_REQUEST_RING_BYTES >> 2),
    outputRingBytes: Atomics.load(i32, HDR_OUTPUT_RING_BYTES >> 2),
  });
  const recorded = new Float64Array(sab, 0, HEADER_BYTES >> 3)[HDR_TOTAL_BYTES >> 3];
  if (recorded !== sab.byteLength || regionBytes(params) !== sab.byteLength) {
    throw new RS_ERR_SHM_BAD_LAYOUT(
      `region ${name} is ${sab.byteLength} bytes; its header says ${recorded}, its sizes ${regionBytes(params)}`,
    );
  }
  return wrap(name, sab, params);
}

/**
 * Maps into this process now the part of the region it works on: API server k's its area (block,
 * request ring, output ring) and the header before the servers; the engine (`'all'`) the whole
 * region. The pages exist from the region's creation (posix_fallocate), so this allocates nothing:
 * it keeps first-touch page faults out of the rings' hot paths and makes the process's RSS show
 * from the start the shared memory it uses, instead of creeping up for hours as a 64 MiB output
 * ring's write position first reaches each page (a soak would read that as a leak). Returns the
 * bytes mapped.
 */
export function populateRegion(region: Region, part: number | 'all'): number {
  const { sab } = region;
  // The region's mapping starts on a page, so the pages around a part are the region's too.
  const pages = (from: number, to: number) => {
    const start = Math.floor(from / PAGE_BYTES) * PAGE_BYTES;
    const end = Math.min(sab.byteLength, Math.ceil(to / PAGE_BYTES) * PAGE_BYTES);
    return shmAddon().populate(sab, start, end - start);
  };
  if (part === 'all') return pages(0, sab.byteLength);
  const area = serverBlockOffset(region.params, part);
  return pages(0, SERVERS_START) + pages(area, area + serverStride(region.params));
}

/** Removes the region's name; true if it existed. Processes that mapped it keep their mapping. */
export function unlinkRegion(name: string): boolean {
  return shmAddon().unlink(name);
}

function readCreatorPid(path: string): number | undefined {
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    const header = Buffer.alloc(HEADER_BYTES);
    if (readSync(fd, header, 0, HEADER_BYTES, 0) < HEADER_BYTES) return 0;
    return header.readInt32LE(HDR_CREATOR_PID);
  } catch {
    return undefined;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

function isStale(path: string): boolean {
  const pid = readCreatorPid(path);
  if (pid === undefined) return false; // unreadable (another user's): not ours to judge
  if (pid > 0) return !isProcessAlive(pid);
  try {
    return Date.now() - statSync(path).mtimeMs > HEADERLESS_GRACE_MS;
  } catch {
    return false;
  }
}

/**
 * Removes regions named `<prefix>*` whose creator process is gone (a crashed run). A live process's
 * region is never touched, so parallel runs with their own regions are safe. Returns the names removed.
 */
export function removeStaleRegions(prefix: string = DEFAULT_REGION_PREFIX): string[] {
  let names: string[];
  try {
    names = readdirSync(SHM_DIR);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const name of names) {
    if (!name.startsWith(prefix) || !isStale(join(SHM_DIR, name))) continue;
    try {
      if (shmAddon().unlink(name)) removed.push(name);
    } catch {
      // A name the addon refuses (odd characters) or may not unlink is not ours to remove.
    }
  }
  return removed;
}

/** The doorbell the engine sleeps on; every request ring's producer rings it. */
export function engineDoorbell(region: Region): Doorbell {
  return new Doorbell(region.sab, ENGINE_DOORBELL);
}

/** API server k's end of its request ring. */
export function requestRingProducer(region: Region, server: number): RingProducer {
  const { sab, params } = region;
  const offset = requestRingOffset(params, server);
  return new RingProducer(sab, offset, params.requestRingBytes, engineDoorbell(region));
}

/** The engine's end of API server k's request ring (shares the engine doorbell). */
export function requestRingConsumer(region: Region, server: number): RingConsumer {
  const { sab, params } = region;
  const offset = requestRingOffset(params, server);
  return new RingConsumer(sab, offset, params.requestRingBytes, engineDoorbell(region));
}

/** The engine's end of API server k's output ring. */
export function outputRingProducer(region: Region, server: number): RingProducer {
  const { sab, params } = region;
  return new RingProducer(sab, outputRingOffset(params, server), params.outputRingBytes);
}

/** API server k's end of its output ring (sleeps on the ring's own doorbell). */
export function outputRingConsumer(region: Region, server: number): RingConsumer {
  const { sab, params } = region;
  return new RingConsumer(sab, outputRingOffset(params, server), params.outputRingBytes);
}
