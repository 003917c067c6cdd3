/**
 * Is the consumer of an output ring gone? The core loop asks this of held servers only: a ring that
 * nobody drains keeps its server held forever, and the engine must free that server's requests. The
 * consumer's pid word says it (layout.ts RING_CONSUMER_PID): detached on a clean stop, or a process
 * that no longer runs (liveness.ts; a SIGSTOPped process still runs). A ring whose consumer has not
 * attached yet is not gone: its API server is starting.
 */
import { RS_ERR_RING_PEER_GONE } from '../errors.js';
import { RING_CONSUMER_PID } from '../shm/layout.js';
import type { RingProducer } from '../shm/ring.js';
import { pidState } from '../shm/ring-endpoint.js';

/** RS_ERR_RING_PEER_GONE if the ring's consumer is gone, else null. */
export function consumerGone(producer: RingProducer): Error | null {
  const pid = Atomics.load(producer.i32, (producer.ringOffset + RING_CONSUMER_PID) >> 2);
  if (pidState(pid) !== 'gone') return null;
  return new RS_ERR_RING_PEER_GONE(producer.ringOffset, 'consumer', pid);
}
