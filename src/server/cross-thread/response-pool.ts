// Answers without a buffer per answer: packers write each encoded answer into a run of chunks of
// one SharedArrayBuffer shared with the main thread, which sends a Buffer view of the run and gives
// the run back once the socket has taken the bytes (sent-answers.ts). A transferred ArrayBuffer per
// answer counts as V8 external memory on the main thread until a GC sweeps it, and those bytes set
// off major GCs: 51 in 40 s in the packed-mask arm (2.7 MB answers). A SharedArrayBuffer is
// counted once, when it is made.
//
//   0        64                                                    dataStart (page aligned)
//   +--------+---------------------------+--------------------------+-----------------------------+
//   | header | owner word per chunk      | touched word per chunk   | chunk 0 | chunk 1 | ...     |
//   +--------+---------------------------+--------------------------+-----------------------------+
//
// An answer takes whole consecutive chunks. A packer claims a run with compareExchange(0 -> id) on
// each owner word (first fit; if another packer wins a word, it rolls its claims back and scans on),
// the main thread frees the run with Atomics.store(0) after checking the id: no lock, no waiting.
// An answer larger than a quarter of the pool, or one that finds no free run, is a one-off buffer,
// as before, and counted. The memory comes from the addon's reserve() where it can: pages are
// committed as answers touch them, and trim() gives back the pages of touched chunks that have been
// free for a while (it ages them on every call).
import { markAsUntransferable } from 'node:worker_threads';
import { shmAddon } from '../../shm/native.js';

export const DEFAULT_CHUNK_BYTES = 64 * 1024;
const HEADER_BYTES = 64;
const PAGE_BYTES = 4096;
const MAGIC = 0x5250_4f4c; // 'RPOL'

/** Header words (int32). */
const H = {
  Magic: 0,
  ChunkBytes: 1,
  Chunks: 2,
  /** Answers placed in the pool. */
  Pooled: 3,
  /** Answers larger than maxAnswerBytes (one-off buffers). */
  Oversize: 4,
  /** Answers that found no free run (one-off buffers). */
  Full: 5,
  InUseChunks: 6,
  /** Last owner id handed out. */
  Serial: 7,
  /** KiB given back by trim(). */
  ReleasedKib: 8,
} as const;
/** The owner id trim() claims free chunks with while it discards them. */
const TRIM_OWNER = -1;

/** A run of chunks holding one answer: plain data, posted from a packer to the main thread. */
export interface PoolRun {
  offset: number;
  length: number;
  /** The owner id of its chunks, checked when it is released. */
  owner: number;
}

export interface ResponsePoolStats {
  pooled: number;
  oversize: number;
  full: number;
  inUseChunks: number;
  /** inUseChunks in bytes. */
  inUseBytes: number;
  releasedBytes: number;
}

export class ResponsePool {
  readonly sab: SharedArrayBuffer;
  readonly chunkBytes: number;
  readonly chunks: number;
  /** The whole buffer, for packers to copy answers into. */
  readonly bytes: Uint8Array;
  readonly #words: Int32Array;
  /** Chunk i's owner is #words[#owners + i], its touched flag #words[#touched + i]. */
  readonly #owners = HEADER_BYTES / 4;
  readonly #touched: number;
  readonly #dataStart: number;
  #arrayBuffer: ArrayBuffer | null = null;

  /** A new pool of about `bytes` (main thread); hand `sab` to the packers. */
  static create(bytes: number, chunkBytes = DEFAULT_CHUNK_BYTES): ResponsePool {
    const chunks = Math.max(4, Math.floor(bytes / chunkBytes));
    const dataStart = dataStartFor(chunks);
    const total = dataStart + chunks * chunkBytes;
    let sab: SharedArrayBuffer;
    try {
      sab = shmAddon().reserve(total);
    } catch {
      sab = new SharedArrayBuffer(total);
    }
    const words = new Int32Array(sab, 0, HEADER_BYTES / 4);
    words[H.ChunkBytes] = chunkBytes;
    words[H.Chunks] = chunks;
    Atomics.store(words, H.Magic, MAGIC);
    return new ResponsePool(sab);
  }

  /** A view of an existing pool (packers, or the main thread's own). */
  constructor(sab: SharedArrayBuffer) {
    const header = new Int32Array(sab, 0, HEADER_BYTES / 4);
    if (Atomics.load(header, H.Magic) !== MAGIC) throw new TypeError('not a response pool');
    this.sab = sab;
    this.chunkBytes = header[H.ChunkBytes]!;
    this.chunks = header[H.Chunks]!;
    this.#touched = HEADER_BYTES / 4 + this.chunks;
    this.#words = new Int32Array(sab, 0, HEADER_BYTES / 4 + 2 * this.chunks);
    this.#dataStart = dataStartFor(this.chunks);
    this.bytes = new Uint8Array(sab);
  }

  /**
   * The pool's bytes as an ArrayBuffer (made on first use, on the main thread): fastify sends a
   * Buffer as raw bytes only when its .buffer is an ArrayBuffer, and serialises any other as JSON.
   */
  get arrayBuffer(): ArrayBuffer {
    if (this.#arrayBuffer === null) {
      this.#arrayBuffer = shmAddon().arrayBufferOf(this.sab);
      markAsUntransferable(this.#arrayBuffer);
    }
    return this.#arrayBuffer;
  }

  /** The largest answer the pool takes: a quarter of it, so one answer never fills it. */
  get maxAnswerBytes(): number {
    return Math.floor(this.chunks / 4) * this.chunkBytes;
  }

  /** A free run for `length` bytes, claimed; null (counted) when too large or none is free. */
  acquire(length: number): PoolRun | null {
    const w = this.#words;
    if (length > this.maxAnswerBytes) {
      Atomics.add(w, H.Oversize, 1);
      return null;
    }
    const need = Math.max(1, Math.ceil(length / this.chunkBytes));
    const owner = this.#nextOwner();
    let run = 0;
    for (let i = 0; i < this.chunks; i++) {
      if (Atomics.load(w, this.#owners + i) !== 0) {
        run = 0;
        continue;
      }
      if (++run < need) continue;
      const first = i - need + 1;
      const claimed = this.#claim(first, need, owner);
      if (claimed === need) {
        for (let k = first; k < first + need; k++) Atomics.store(w, this.#touched + k, 1);
        Atomics.add(w, H.InUseChunks, need);
        Atomics.add(w, H.Pooled, 1);
        return { offset: this.#dataStart + first * this.chunkBytes, length, owner };
      }
      // Another packer won chunk first + claimed: scan on after it.
      i = first + claimed;
      run = 0;
    }
    Atomics.add(w, H.Full, 1);
    return null;
  }

  /** Frees a run acquire() returned; throws if its chunks are not (or no longer) its own. */
  release(run: PoolRun): void {
    const w = this.#words;
    const first = (run.offset - this.#dataStart) / this.chunkBytes;
    const need = Math.max(1, Math.ceil(run.length / this.chunkBytes));
    for (let i = first; i < first + need; i++) {
      if (Atomics.load(w, this.#owners + i) !== run.owner) {
        throw new Error(`response pool: chunk ${i} is not owned by ${run.owner}`);
      }
    }
    for (let i = first; i < first + need; i++) Atomics.store(w, this.#owners + i, 0);
    Atomics.sub(w, H.InUseChunks, need);
  }

  /**
   * Gives back the pages of touched chunks that are free and were free at the `idleTicks` calls
   * before this one too (0: every touched free chunk, now), and ages the other free ones; an
   * answer placed in a chunk makes it young again. Called on a timer, this keeps resident what
   * the last few ticks used and lets go of a burst's peak once it has passed, so RSS follows the
   * load instead of climbing to the highest peak it ever saw, and a pause shorter than the ticks
   * (an engine restart) gives nothing back only to fault it in again. Chunks are claimed while
   * their pages are discarded (a packer that finds no other room meanwhile makes a one-off
   * buffer); chunks that answers hold are left alone. Returns the bytes given back (0 when the
   * memory is not the addon's).
   */
  trim(idleTicks = 0): number {
    const w = this.#words;
    let released = 0;
    let run = -1;
    for (let i = 0; i < this.chunks; i++) {
      if (this.#claimCold(i, idleTicks)) {
        if (run < 0) run = i;
        continue;
      }
      if (run >= 0) released += this.#discardClaimed(run, i);
      run = -1;
    }
    if (run >= 0) released += this.#discardClaimed(run, this.chunks);
    Atomics.add(w, H.ReleasedKib, released / 1024);
    return released;
  }

  stats(): ResponsePoolStats {
    const w = this.#words;
    const inUseChunks = Atomics.load(w, H.InUseChunks);
    return {
      pooled: Atomics.load(w, H.Pooled),
      oversize: Atomics.load(w, H.Oversize),
      full: Atomics.load(w, H.Full),
      inUseChunks,
      inUseBytes: inUseChunks * this.chunkBytes,
      releasedBytes: Atomics.load(w, H.ReleasedKib) * 1024,
    };
  }

  /**
   * Claims chunks first .. first + count - 1 for `owner`: returns `count`, or the index k of the
   * first chunk someone else held (its k claims rolled back).
   */
  #claim(first: number, count: number, owner: number): number {
    const w = this.#words;
    for (let k = 0; k < count; k++) {
      if (Atomics.compareExchange(w, this.#owners + first + k, 0, owner) !== 0) {
        for (let j = 0; j < k; j++) Atomics.store(w, this.#owners + first + j, 0);
        return k;
      }
    }
    return count;
  }

  /**
   * trim(): claims chunk i if it was touched, is free and has aged past `idleTicks`; else, if it
   * is free, ages it (a packer that claims it meanwhile makes it young, and the age is not bumped).
   * The touched word holds 0 (never touched, or discarded) or 1 + the ticks since its last answer.
   */
  #claimCold(i: number, idleTicks: number): boolean {
    const w = this.#words;
    const age = Atomics.load(w, this.#touched + i);
    if (age === 0 || Atomics.load(w, this.#owners + i) !== 0) return false;
    if (age <= idleTicks) {
      Atomics.compareExchange(w, this.#touched + i, age, age + 1);
      return false;
    }
    return Atomics.compareExchange(w, this.#owners + i, 0, TRIM_OWNER) === 0;
  }

  /** trim(): gives back chunks from .. to - 1, which it claimed, and frees them untouched. */
  #discardClaimed(from: number, to: number): number {
    const w = this.#words;
    const released = this.#discard(from, to);
    for (let k = from; k < to; k++) Atomics.store(w, this.#touched + k, 0);
    for (let k = from; k < to; k++) Atomics.store(w, this.#owners + k, 0);
    return released;
  }

  #discard(from: number, to: number): number {
    try {
      const start = this.#dataStart + from * this.chunkBytes;
      return shmAddon().discard(this.sab, start, (to - from) * this.chunkBytes);
    } catch {
      return 0; // a plain SharedArrayBuffer (the addon could not reserve): nothing to give back
    }
  }

  /** A positive owner id, never 0 (free) nor TRIM_OWNER. */
  #nextOwner(): number {
    return (Atomics.add(this.#words, H.Serial, 1) & 0x3fff_ffff) + 1;
  }
}

function dataStartFor(chunks: number): number {
  const end = HEADER_BYTES + 8 * chunks;
  return Math.ceil(end / PAGE_BYTES) * PAGE_BYTES;
}
