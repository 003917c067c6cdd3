// Encoder buffers that an idle thread gives back. A packer thread keeps its writers for its whole
// life, and each holds its largest answer so far: in a long soak the largest keeps rising (a rare
// 4,096-token answer with routing grows a writer to 8 MiB), so an idle API server's memory crept
// up by the writers' high-water marks. A scratch is a reservation from the addon: pages are
// committed as a writer touches them, the writer never grows or copies inside it, and release()
// gives the touched pages back (MADV_DONTNEED) once the thread has been idle for a while.
import { markAsUntransferable } from 'node:worker_threads';
import type { WriterScratch } from '../../protocol/byte-writer.js';
import { shmAddon } from '../../shm/native.js';

/**
 * Room for one answer without growing: a larger one grows on the heap for that answer only.
 * Address space only until written (16 MiB: 4,096 tokens with routing and logprobs is ~3 MB).
 */
export const SCRATCH_BYTES = 16 * 1024 * 1024;

/** A thread that has encoded nothing for this long gives its writers' pages back. */
export const SCRATCH_IDLE_RELEASE_MS = 10_000;

/** A reserved scratch of `bytes`; null where the addon cannot reserve (the writer uses the heap). */
export function reservedScratch(bytes = SCRATCH_BYTES): WriterScratch | null {
  let sab: SharedArrayBuffer;
  let ab: ArrayBuffer;
  try {
    sab = shmAddon().reserve(bytes);
    ab = shmAddon().arrayBufferOf(sab);
  } catch {
    return null;
  }
  // A transfer would detach the writer's buffer; Buffers made from it are only ever copied.
  markAsUntransferable(ab);
  return {
    bytes: new Uint8Array(ab),
    discard: (upTo) => shmAddon().discard(sab, 0, Math.min(bytes, roundUpToPage(upTo))),
  };
}

function roundUpToPage(n: number): number {
  return Math.ceil(n / 4096) * 4096;
}

/**
 * Calls `release` once the thread has run no task for `idleMs` (then not again until a task has
 * run): `tick()` after each task costs one increment. The timer does not keep the thread alive.
 */
export class IdleRelease {
  #tasks = 0;
  #seen = 0;
  #released = true;
  readonly #timer: NodeJS.Timeout;

  constructor(release: () => void, idleMs = SCRATCH_IDLE_RELEASE_MS) {
    // Checked every idleMs / 2: released between idleMs / 2 and idleMs after the last task.
    this.#timer = setInterval(() => {
      if (this.#tasks !== this.#seen) {
        this.#seen = this.#tasks;
        this.#released = false;
      } else if (!this.#released) {
        this.#released = true;
        release();
      }
    }, idleMs / 2);
    this.#timer.unref();
  }

  tick(): void {
    this.#tasks++;
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
