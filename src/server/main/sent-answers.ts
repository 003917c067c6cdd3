// The main thread's side of the response pool (response-pool.ts): a pooled answer is a Buffer
// view of its run, and the run goes back once the socket has taken the bytes. 'finish' comes after
// the last write callback (the kernel has the bytes); 'close' before 'finish' means the socket was
// destroyed and libuv has dropped its pending writes. An answer that is never sent (its client left
// first, an onSend hook replaced it) goes back when its view is collected: nothing can read a
// view after that, so the run cannot be reused while a write still reads it.
import type { PoolRun, ResponsePool } from '../cross-thread/response-pool.js';

interface Lease {
  readonly pool: ResponsePool;
  readonly run: PoolRun;
  released: boolean;
}

const leases = new WeakMap<Buffer, Lease>();
const unsent = new FinalizationRegistry<Lease>(releaseLease);

function releaseLease(lease: Lease): void {
  if (lease.released) return;
  lease.released = true;
  lease.pool.release(lease.run);
}

/** The answer in `run` as a Buffer view of the pool (no copy); see releaseWhenSent. */
export function pooledAnswer(pool: ResponsePool, run: PoolRun): Buffer {
  const body = Buffer.from(pool.arrayBuffer, run.offset, run.length);
  const lease: Lease = { pool, run, released: false };
  leases.set(body, lease);
  unsent.register(body, lease, lease);
  return body;
}

/** What releaseWhenSent needs of an http.ServerResponse. */
export interface SendEvents {
  once(event: 'finish' | 'close', listener: () => void): unknown;
}

/**
 * Call right after handing `body` to `res` (reply.send): if it is a pooled answer, its run goes
 * back to the pool once the response has finished or its connection has closed. Any other Buffer
 * is left alone.
 */
export function releaseWhenSent(res: SendEvents, body: Buffer): void {
  const lease = leases.get(body);
  if (lease === undefined) return;
  const done = (): void => {
    unsent.unregister(lease);
    releaseLease(lease);
  };
  res.once('finish', done);
  res.once('close', done);
}
