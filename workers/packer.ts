// A packer thread (piscina): encodes one finished request straight from the accumulators in the
// requested form, into a run of the response pool (posted back as its offset, length and owner)
// or, when the pool has no room, into a Buffer moved (transferred) to the main thread. The thread
// keeps its encoder's buffers between tasks, gives their pages back once it has been idle for
// 10 s (writer-scratch.ts), and runs below the main thread's priority.
import { move, workerData } from 'piscina';
import { errorToData } from '../src/errors.js';
import { answerMemoryCollect } from '../src/obs/memory-collect.js';
import { startThreadHealth } from '../src/obs/thread-health-share.js';
import { tokenBytesFor } from '../src/server/cross-thread/detokenizer.js';
import type {
  PackAnswer,
  PackerWorkerData,
  PackTask,
} from '../src/server/cross-thread/pack-task.js';
import { ResponsePacker } from '../src/server/cross-thread/response-packer.js';
import { ResponsePool } from '../src/server/cross-thread/response-pool.js';
import { IdleRelease, reservedScratch } from '../src/server/cross-thread/writer-scratch.js';
import { lowerThisThread } from '../src/shm/thread-priority.js';

const data = workerData as PackerWorkerData;
lowerThisThread(data.priority);
const packer = new ResponsePacker(data.metaSab, data.accSab, data.arenaSab, tokenBytesFor(data), {
  json: reservedScratch(),
  msgpack: reservedScratch(),
});
const idle = new IdleRelease(() => packer.release());
startThreadHealth('packer');
answerMemoryCollect('timer');
const pool = data.poolSab === null ? null : new ResponsePool(data.poolSab);

/**
 * The encoded response (a pool run, or a moved Buffer); or, when the request cannot be packed, its
 * coded error as plain data (an Error thrown here would reach the main thread without its code).
 */
export default function pack(task: PackTask): unknown {
  idle.tick();
  try {
    const out = packer.packInto(task, pool);
    return out instanceof Uint8Array ? move(out) : out;
  } catch (err) {
    return { error: errorToData(err) } satisfies PackAnswer;
  }
}
