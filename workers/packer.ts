// A packer thread (piscina): encodes one finished request straight from the accumulators into one
// Buffer in the requested form and moves (transfers) it to the main thread. The thread keeps its
// encoder's buffers between tasks, so after warm-up a task allocates only the Buffer it returns,
// and runs below the main thread's priority.
import { move, workerData } from 'piscina';
import { toRingserveError } from '../src/errors.js';
import { ResponsePacker } from '../src/server/output/pack.js';
import type { PackerWorkerData, PackFailure, PackTask } from '../src/server/output/packer-pool.js';
import { lowerThisThread } from '../src/shm/thread-priority.js';

const data = workerData as PackerWorkerData;
lowerThisThread(data.priority);
const packer = new ResponsePacker(data.metaSab, data.accSab, data.arenaSab);

/**
 * The encoded response, moved; or, when the request cannot be packed, its coded error as plain
 * data (an Error thrown here would reach the main thread without its code and status).
 */
export default function pack(task: PackTask): unknown {
  try {
    return move(packer.pack(task));
  } catch (err) {
    const e = toRingserveError(err);
    return { code: e.code, message: e.message, statusCode: e.statusCode } satisfies PackFailure;
  }
}
