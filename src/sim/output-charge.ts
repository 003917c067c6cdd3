import type { OutputRoom } from '../engine/output-room.js';
import type { SamplingParams } from '../wire/types.js';
import { newPromptPositions } from './prompt-logprobs.js';
import { maxKeptIds } from './sampler.js';
import type { Sequence } from './sequence.js';

/**
 * What scheduling a sequence costs its API server's output ring (OutputRoom), worked out before
 * the step from what the model runner will emit for it (model-runner.ts): an output row when the
 * chunk emits routing rows or prompt logprobs, or completes the known tokens (then a token is
 * sampled, with at most maxKeptIds mask ids and top_logprobs candidates). A chunk ending at `end`
 * emits the routing rows of positions [routingFrom, end) and the prompt logprobs of positions
 * [promptLogprobsTo, min(end + 1, P)), 1 + k entries each (prompt-logprobs.ts): both start at
 * the first position not emitted before, so prefix-cache hits and loaded KV are paid for by the
 * first chunk. A chunk is trimmed so that one output stays under the room's per-output limit, as
 * it is trimmed to the token budget (a long prompt's logprobs and rows go out over several steps);
 * what is charged is never less than what the runner emits, so the writer always finds the room.
 * The trim counts the mask and the top candidates whether or not the chunk samples: a chunk that
 * fits with them fits without.
 */
export class OutputCharge {
  readonly #vocabSize: number;
  readonly #blockSize: number;

  constructor(vocabSize: number, blockSize: number) {
    this.#vocabSize = vocabSize;
    this.#blockSize = blockSize;
  }

  /**
   * The prefix-cache hits an admitted sequence may use: the hits' routing rows and prompt logprobs
   * are emitted with the first chunk, so the hits stop where one output could not carry them any
   * more (the rest is recomputed in chunks, with the same rows and logprobs).
   */
  capHits(seq: Sequence, numHits: number, room: OutputRoom): number {
    if (!emitsPerPosition(seq.params)) return numHits;
    const most = this.#mostComputed(seq, numHits * this.#blockSize, room);
    return Math.min(numHits, Math.floor(most / this.#blockSize));
  }

  /**
   * The tokens past `hitTokens` that an admitted sequence may load from outside the pool (a P/D
   * import, the CPU tier: external-kv.ts), under the same bound as capHits, in whole blocks when
   * it must be cut.
   */
  capLoaded(seq: Sequence, hitTokens: number, loaded: number, room: OutputRoom): number {
    if (loaded === 0 || !emitsPerPosition(seq.params)) return loaded;
    const most = this.#mostComputed(seq, hitTokens + loaded, room);
    if (most >= hitTokens + loaded) return loaded;
    const B = this.#blockSize;
    return Math.max(0, Math.floor((most - hitTokens) / B) * B);
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
    let end = computed + numNew;
    if (emitsPerPosition(p)) end = this.#lastFitting(seq, computed + 1, end, room);
    const rows = routingRows(seq, end);
    const entries = promptEntries(seq, end);
    const samples = end === seq.numTokens;
    if (rows === 0 && entries === 0 && !samples) return end - computed; // no output row this step
    const charged = room.tryCharge(server, samples ? maskIds : 0, rows, samples ? top : 0, entries);
    return charged ? end - computed : 0;
  }

  /**
   * The most leading tokens (at most `computed`) an admission may count as computed so that its
   * first chunk, one token, still fits one output.
   */
  #mostComputed(seq: Sequence, computed: number, room: OutputRoom): number {
    return this.#lastFitting(seq, 1, computed + 1, room) - 1;
  }

  /**
   * The largest chunk end in [lo, hi] whose output fits the per-output limit (hi when it does, lo
   * when none does: a chunk computes at least one token). The cost grows with the end, so a
   * bisection, and only when the whole chunk does not fit: O(1) for a decode.
   */
  #lastFitting(seq: Sequence, lo: number, hi: number, room: OutputRoom): number {
    const limit = room.outputLimit(seq.server);
    if (limit === Number.POSITIVE_INFINITY || this.#cost(seq, hi, room) <= limit) return hi;
    // Invariant: the answer is in [a, b); the cost at b is over the limit.
    let a = lo;
    let b = hi;
    while (b - a > 1) {
      const m = a + ((b - a) >>> 1);
      if (this.#cost(seq, m, room) <= limit) a = m;
      else b = m;
    }
    return a;
  }

  /** The most one output of a chunk ending at `end` costs, the mask and top candidates counted. */
  #cost(seq: Sequence, end: number, room: OutputRoom): number {
    const p = seq.params;
    const maskIds = maxKeptIds(p, this.#vocabSize);
    return room.outputBytes(maskIds, routingRows(seq, end), topEntries(p), promptEntries(seq, end));
  }
}

/** Whether the sequence emits something per position (routing rows or prompt logprobs). */
function emitsPerPosition(p: SamplingParams): boolean {
  return p.returnRoutedExperts || p.promptLogprobs >= 0;
}

/** The most top candidates the runner writes with a sampled token (model-runner.ts #writeSets). */
function topEntries(p: SamplingParams): number {
  return p.logprobs && p.topLogprobs > 0 ? p.topLogprobs : 0;
}

/** Routing rows a chunk ending at `end` emits (model-runner.ts #forward). */
function routingRows(seq: Sequence, end: number): number {
  const p = seq.params;
  if (!p.returnRoutedExperts) return 0;
  return Math.max(0, end - Math.max(seq.routingEmittedTo, p.routedExpertsPromptStart));
}

/** Prompt-logprob entries a chunk ending at `end` emits (prompt-logprobs.ts). */
function promptEntries(seq: Sequence, end: number): number {
  return newPromptPositions(seq, end) * (1 + seq.params.promptLogprobs);
}
