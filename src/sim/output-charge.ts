import type { OutputRoom } from '../engine/output-room.js';
import type { SamplingParams } from '../wire/types.js';
import { maxKeptIds } from './sampler.js';
import type { Sequence } from './sequence.js';

/**
 * What scheduling a sequence costs its API server's output ring (OutputRoom), worked out before
 * the step from what the model runner will emit for it (model-runner.ts): an output row when the
 * chunk emits routing rows or completes the known tokens (then a token is sampled, with at most
 * maxKeptIds mask ids and top_logprobs candidates); its routing rows are the chunk's positions not emitted before (prefix-cache
 * hits included, at admission). A chunk is trimmed so that one output stays under the room's
 * per-output limit, as it is trimmed to the token budget; what is charged is never less than what
 * the runner emits, so the writer always finds the room.
 */
export class OutputCharge {
  readonly #vocabSize: number;
  readonly #blockSize: number;

  constructor(vocabSize: number, blockSize: number) {
    this.#vocabSize = vocabSize;
    this.#blockSize = blockSize;
  }

  /**
   * The prefix-cache hits an admitted sequence may use: a hit's routing rows are emitted with the
   * first chunk, so with routing asked the hits stop where one output could not carry them any
   * more (the rest is recomputed in chunks, with the same rows).
   */
  capHits(seq: Sequence, numHits: number, room: OutputRoom): number {
    const p = seq.params;
    if (!p.returnRoutedExperts) return numHits;
    const rows = room.routingRowsWithin(seq.server, maxKeptIds(p, this.#vocabSize), topEntries(p));
    // Leave room for the one token the chunk must compute.
    const maxComputed = rows + routingFrom(seq) - 1;
    return Math.max(0, Math.min(numHits, Math.floor(maxComputed / this.#blockSize)));
  }

  /**
   * Trims a chunk of `numNew` tokens from `computed` on to the per-output limit and charges its
   * output to the sequence's API server; returns the tokens to schedule, or 0 when the server has
   * no room this step (it is then held for the rest of the step).
   */
  charge(seq: Sequence, computed: number, numNew: number, room: OutputRoom): number {
    const p = seq.params;
    const server = seq.server;
    if (room.isHeld(server)) return 0;
    const maskIds = maxKeptIds(p, this.#vocabSize);
    const top = topEntries(p);
    let n = numNew;
    let rows = 0;
    if (p.returnRoutedExperts) {
      const from = routingFrom(seq);
      const most = room.routingRowsWithin(server, maskIds, top);
      if (computed + n - from > most) n = Math.max(1, most + from - computed);
      rows = Math.max(0, computed + n - from);
    }
    const samples = computed + n === seq.numTokens;
    if (rows === 0 && !samples) return n; // no output row this step
    return room.tryCharge(server, samples ? maskIds : 0, rows, samples ? top : 0) ? n : 0;
  }
}

/** The most top candidates the runner writes with a sampled token (model-runner.ts #writeSets). */
function topEntries(p: SamplingParams): number {
  return p.logprobs && p.topLogprobs > 0 ? p.topLogprobs : 0;
}

/** The first position whose routing row has not been emitted (model-runner.ts #forward). */
function routingFrom(seq: Sequence): number {
  return Math.max(seq.routingEmittedTo, seq.params.routedExpertsPromptStart);
}
