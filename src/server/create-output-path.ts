/**
 * Chooses the output path for --output-processing: the output worker and packer pool (default),
 * or the inline per-token-object baseline; both detokenize stop strings with the served
 * tokenizer's byte table when given one.
 */
import type { RingserveConfig } from '../config.js';
import type { Region } from '../shm/region.js';
import { outputRingConsumer } from '../shm/region.js';
import type { TokenBytesTable } from '../tokenizer/token-bytes.js';
import { InlineOutputPath } from './inline/inline-output-path.js';
import type { OutputEvents, OutputPath } from './main/output-path.js';
import { WorkerOutputPath } from './main/worker-output-path.js';

export async function createOutputPath(
  config: RingserveConfig,
  region: Region,
  server: number,
  events: OutputEvents,
  tokenBytes?: TokenBytesTable,
): Promise<OutputPath> {
  if (config.outputProcessing === 'inline') {
    const consumer = outputRingConsumer(region, server);
    return new InlineOutputPath(consumer, events, config.model, config.maxQueueLen, tokenBytes);
  }
  return WorkerOutputPath.start(config, region, server, events, tokenBytes?.shared);
}
