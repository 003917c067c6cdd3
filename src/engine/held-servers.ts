/**
 * The core loop's side of holding API servers (output-room.ts): it owns the OutputRoom the engine
 * is stepped with, checks at start that every output ring can take the largest output, and after
 * a step finds held servers that will never drain again: a ring whose consumer is gone (detached
 * on a clean stop, or its process no longer runs; liveness.ts, where a SIGSTOPped process still
 * runs). A ring whose consumer has not attached yet is not gone: its API server is starting.
 */

import { RS_ERR_RING_PEER_GONE, RS_ERR_SHM_BAD_LAYOUT } from '../errors.js';
import type { RingProducer } from '../shm/ring.js';
import { pidState } from '../shm/ring-endpoint.js';
import { ringConsumerPid } from '../shm/words.js';
import type { ModelCard } from '../wire/model-card.js';
import { expertIdBytes } from '../wire/model-card.js';
import { MAX_TOP_LOGPROBS } from '../wire/sampling-check.js';
import type { StepTiming } from '../wire/types.js';
import { maxOutputBytes, OutputRoom } from './output-room.js';
import type { StepBatchSink } from './step-batch-writer.js';
import type { StepOutputs } from './step-outputs.js';

/** How often the consumers of held servers' rings are checked for being gone (a syscall each). */
const LIVENESS_CHECK_MS = 250;

export class HeldServers {
  readonly room: OutputRoom;
  #nextLivenessCheck = 0;

  constructor(servers: number, model: ModelCard, outputRingBytes: number) {
    this.room = new OutputRoom(
      servers,
      model.routingLayers * model.expertsPerToken,
      expertIdBytes(model),
    );
    // One output with a vocabulary-sized mask, a routing row and the most top candidates must fit,
    // or a sequence could be held forever (layout-params.ts sizes the rings for far more).
    const need = this.room.outputBytes(model.vocabSize, 1, MAX_TOP_LOGPROBS);
    const max = maxOutputBytes(outputRingBytes);
    if (need > max) {
      throw new RS_ERR_SHM_BAD_LAYOUT(
        `output rings of ${outputRingBytes} bytes are too small for one output of ${need} bytes (at most ${max})`,
      );
    }
  }

  /**
   * After a step: reports held servers whose consumer is gone (at most every LIVENESS_CHECK_MS)
   * to `sink.serverGone`; returns true when every server with work was held, so nothing ran and
   * nothing changes until a ring has room.
   */
  afterStep(out: StepOutputs, timing: StepTiming, sink: StepBatchSink): boolean {
    const room = this.room;
    if (!room.anyHeld) return false;
    const now = performance.now();
    if (now >= this.#nextLivenessCheck) {
      this.#nextLivenessCheck = now + LIVENESS_CHECK_MS;
      for (let k = 0; k < room.servers; k++) {
        const producer = sink.producer(k);
        if (producer === null || !room.isHeld(k)) continue;
        const gone = consumerGone(producer);
        if (gone !== null) sink.serverGone(k, gone);
      }
    }
    return out.count === 0 && timing.sampledSeqs === 0 && timing.prefillTokens === 0;
  }
}

/** RS_ERR_RING_PEER_GONE if the ring's consumer is gone, else null. */
export function consumerGone(producer: RingProducer): Error | null {
  const pid = ringConsumerPid(producer.i32, producer.ringOffset);
  if (pidState(pid) !== 'gone') return null;
  return new RS_ERR_RING_PEER_GONE(producer.ringOffset, 'consumer', pid);
}
