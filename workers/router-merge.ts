// A merge thread of `ringserve router` (piscina, one per lane of src/router/merge-pool.ts): the P/D
// merge of the requests pinned to it, off the router's event loop (issue 32). The state and the
// work are src/router/merge-table.ts's; this file moves the bytes and turns errors into data.
import { move, transferableSymbol, valueSymbol, workerData } from 'piscina';
import { errorToData } from '../src/errors.js';
import { answerMemoryCollect } from '../src/obs/memory-collect.js';
import type { MergeFailure, MergeReply, MergeTask } from '../src/router/merge-messages.js';
import type { MergeWorkerData } from '../src/router/merge-pool.js';
import { MergeTable } from '../src/router/merge-table.js';
import { lowerThisThread } from '../src/shm/thread-priority.js';

const data = workerData as MergeWorkerData;
try {
  lowerThisThread(data.priority);
} catch {
  // Refused (a seccomp filter, no addon): the merge is the same at the main thread's priority.
}
// SIGUSR2 collects in every thread of the router, this one too (src/obs/memory-collect.ts).
answerMemoryCollect('timer');
const table = new MergeTable();

/** The reply with its bytes in the transfer list: piscina moves only a top-level Transferable. */
class MovedReply {
  readonly #reply: MergeReply;
  constructor(reply: MergeReply) {
    this.#reply = reply;
  }
  get [transferableSymbol](): ArrayBufferLike[] {
    return this.#reply.out === null ? [] : [this.#reply.out.buffer];
  }
  get [valueSymbol](): MergeReply {
    return this.#reply;
  }
}

/** The reply, or the request's coded error as plain data (a thrown Error would lose its code). */
export default function merge(task: MergeTask): unknown {
  try {
    return move(new MovedReply(table.run(task)) as never);
  } catch (err) {
    return { error: errorToData(err) } satisfies MergeFailure;
  }
}
