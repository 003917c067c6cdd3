/**
 * Ring sizes for a configuration. The request ring must hold the largest ADD record (a prompt of
 * max_model_len tokens, 4 bytes each) several times over; the output ring must hold the largest STEP
 * record several times over: a full prefill budget of routing rows plus every running sequence's
 * outputs. It must also take the largest single output within the quarter of the ring the step
 * writer puts in one record (a full budget of routing rows and a vocabulary-sized mask), so that
 * the engine never has to cut a prefill chunk for its output (src/engine/output-room.ts).
 */
import type { RingserveConfig } from '../config.js';
import type { LayoutParams } from '../shm/layout.js';
import { MAX_KV_PARAMS_BYTES, stepOutputBytesBound, stepRecordBytes } from '../wire/messages.js';
import { expertIdBytes, getModelCard } from '../wire/model-card.js';

// 32 MiB: a burst of 300 prompts of 16k tokens (19 MiB) is taken without waiting for the engine.
const MIN_REQUEST_RING = 32 * 1024 * 1024;
const MIN_OUTPUT_RING = 16 * 1024 * 1024;
/** A ring holds at least this many of its largest record, so one slow drain does not stall a step. */
const RECORDS_PER_RING = 4;
/** Kept-set ids per position assumed when sizing (top_k 512 is the RL default ceiling). */
const MASK_IDS_PER_POSITION = 512;

function pow2AtLeast(bytes: number): number {
  return 2 ** Math.ceil(Math.log2(bytes));
}

export function layoutParamsFor(config: RingserveConfig): LayoutParams {
  const card = getModelCard(config.model);
  const rowIds = card.routingLayers * card.expertsPerToken;
  const idBytes = expertIdBytes(card);
  // A prompt of max_model_len tokens and the largest kv_transfer_params a request hands an engine.
  const largestAdd = 256 + config.maxModelLen * 4 + MAX_KV_PARAMS_BYTES;
  const rows = config.maxNumBatchedTokens + config.maxNumSeqs;
  const largestStep = stepRecordBytes(
    config.maxNumSeqs,
    config.maxNumSeqs * MASK_IDS_PER_POSITION,
    rows,
    rowIds,
    idBytes,
  );
  const largestOutput = stepOutputBytesBound(
    card.vocabSize,
    config.maxNumBatchedTokens,
    rowIds,
    idBytes,
    0,
    0,
    MAX_KV_PARAMS_BYTES,
  );
  const outputRing = Math.max(largestStep, largestOutput) * RECORDS_PER_RING;
  return {
    apiServerCount: config.apiServerCount,
    requestRingBytes: pow2AtLeast(Math.max(MIN_REQUEST_RING, largestAdd * RECORDS_PER_RING)),
    outputRingBytes: pow2AtLeast(Math.max(MIN_OUTPUT_RING, outputRing)),
  };
}
