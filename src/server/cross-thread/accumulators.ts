// Per-request output state, one row per request slot in a SharedArrayBuffer: where each per-token
// column's block sits in the arena and how much of it is filled, plus the request's figures (finish
// reason, weight versions, routing geometry, how far it has been streamed). The output worker is
// the only writer; packers and the main thread read a row after the worker's message that names the
// slot (postMessage orders the worker's plain stores before the reader's loads).
//
//   0    +---------------------------------------------------------------------------+
//        | header: MAGIC, SLOT_COUNT                                                 |
//   64   +---------------------------------------------------------------------------+
//        | i32 words, AccWord.* x WORDS_PER_SLOT per slot                            |
//        +---------------------------------------------------------------------------+
//        | f64 words: the byte offset of each column's block, Column.* per slot      |
//        +---------------------------------------------------------------------------+
//
// Column element counts are derived, not stored twice: tokens, logprobs, mask counts and weight
// versions hold COMPLETION elements, top ids and logprobs COMPLETION * TOP_K, mask ids MASK_IDS,
// routing ROUTING_ROWS * LAYERS * TOPK ids of ROUTING_ID_BYTES each, text TEXT_BYTES bytes, prompt
// ids, logprobs and ranks PROMPT_POSITIONS * PROMPT_WIDTH. A column whose class is -1 has no block
// (not asked, or nothing yet).
import { RS_ERR_OUTPUT_BAD_SLOT } from './errors.js';

export const Column = {
  Tokens: 0,
  Logprobs: 1,
  MaskCounts: 2,
  MaskIds: 3,
  Routing: 4,
  /** The weight version each completion token was sampled under (int32, one per token). */
  WeightVersions: 5,
  /** The completion's detokenized text, UTF-8 bytes (OpenAI routes only; SlotFlag.Text). */
  Text: 6,
  /**
   * Top candidates of each completion position (legacy generate and OpenAI answers that asked
   * for alternatives): exactly AccWord.TopK entries per position, in the engine's order (best
   * first); a position the engine gave fewer for is padded with id -1 and logprob -9999.
   */
  TopIds: 7,
  TopLogprobs: 8,
  /**
   * Prompt logprobs (a request that asked prompt_logprobs k >= 0, its choice 0 only): AccWord.
   * PromptWidth = 1 + k entries for each prompt position from 1 on, position-major; entry 0 is the
   * prompt token with its rank in the vocabulary, entries 1..k the best candidates (ranks 1..k).
   */
  PromptIds: 9,
  PromptLogprobs: 10,
  PromptRanks: 11,
} as const;
export const COLUMN_COUNT = 12;

/** Lifecycle of a slot as the output worker sees it. */
export const SlotState = {
  /** No request, or one whose blocks are back in the arena. */
  Idle: 0,
  /** Outputs are being accumulated. */
  Running: 1,
  /** The response is complete (a stop string matched, or an output error) but the engine still runs it. */
  Finished: 2,
  /** Complete and confirmed by the engine's final output: waiting for the main thread's free. */
  Done: 3,
  /** Freed by the main thread while the engine still runs it: outputs are dropped until its final one. */
  Draining: 4,
} as const;

/** Why the output worker itself failed a request (AccWord.Error). */
export const OutputError = {
  None: 0,
  /** RS_ERR_OUTPUT_ARENA_FULL */
  ArenaFull: 1,
  /** RS_ERR_OUTPUT_BAD_STEP */
  BadStep: 2,
} as const;

export const AccWord = {
  Gen: 0,
  State: 1,
  Completion: 2,
  /** The engine's FinishReason (0 none, 1 stop, 2 length, 3 abort, 4 error). */
  Finish: 3,
  StopTokenId: 4,
  /** Index of the matched stop string in the slot meta, or -1. */
  StopString: 5,
  FirstWeightVersion: 6,
  LastWeightVersion: 7,
  NumCached: 8,
  RoutingRows: 9,
  /** Absolute sequence position of routing row 0. */
  RoutingFirstPos: 10,
  Layers: 11,
  Topk: 12,
  RoutingIdBytes: 13,
  StreamedTokens: 14,
  StreamedMaskIds: 15,
  StreamedRoutingRows: 16,
  Error: 17,
  MaskIds: 18,
  /** For an engine Error finish: the engine's RejectReason (reject.ts). */
  RejectReason: 19,
  /** Top candidates kept per completion position (the request's top_logprobs k; 0: none). */
  TopK: 20,
  /** Entries per prompt position (1 + prompt_logprobs k; 0: none stored yet). */
  PromptWidth: 21,
  /** Prompt positions stored, from position 1 on (position 0 has no logprob). */
  PromptPositions: 22,
  /** Bytes in the Text column. */
  TextBytes: 27,
  /** Text bytes already streamed, and their characters (completions' logprobs text_offset). */
  StreamedText: 28,
  StreamedChars: 29,
  /** Where the answer's text ends after a stop string cut it, or -1: all TEXT_BYTES. */
  TextEnd: 30,
  /** Column c's size class is at ClassBase + c (COLUMN_COUNT words). */
  ClassBase: 32,
} as const;

const MAGIC = 0x4341_5352; // 'RSAC'
const HEADER_BYTES = 64;
export const WORDS_PER_SLOT = 48;

export class AccumulatorTable {
  readonly sab: SharedArrayBuffer;
  readonly slots: number;
  /** Raw words: `words[wordIndex(slot, AccWord.X)]`. The output worker writes them; others read. */
  readonly words: Int32Array;
  /** Column block byte offsets: `offsets[slot * COLUMN_COUNT + column]`. */
  readonly offsets: Float64Array;

  static bytesFor(slots: number): number {
    return HEADER_BYTES + slots * (WORDS_PER_SLOT * 4 + COLUMN_COUNT * 8);
  }

  /** A new table (main thread), or a view of an existing one (worker, packers). */
  constructor(sabOrSlots: SharedArrayBuffer | number) {
    if (typeof sabOrSlots === 'number') {
      if (!Number.isInteger(sabOrSlots) || sabOrSlots < 1 || sabOrSlots > 1 << 20) {
        throw new RS_ERR_OUTPUT_BAD_SLOT('count', `${sabOrSlots} slots is not in [1, 2^20]`);
      }
      this.sab = new SharedArrayBuffer(AccumulatorTable.bytesFor(sabOrSlots));
      const header = new Int32Array(this.sab, 0, 2);
      header[1] = sabOrSlots;
      Atomics.store(header, 0, MAGIC);
    } else {
      this.sab = sabOrSlots;
      if (Atomics.load(new Int32Array(this.sab, 0, 2), 0) !== MAGIC) {
        throw new TypeError('not an accumulator table');
      }
    }
    this.slots = new Int32Array(this.sab, 0, 2)[1]!;
    this.words = new Int32Array(this.sab, HEADER_BYTES, this.slots * WORDS_PER_SLOT);
    this.offsets = new Float64Array(
      this.sab,
      HEADER_BYTES + this.slots * WORDS_PER_SLOT * 4,
      this.slots * COLUMN_COUNT,
    );
    if (typeof sabOrSlots === 'number') {
      for (let s = 0; s < this.slots; s++) this.clear(s);
    }
  }

  /** Index into `words` of one field of one slot. */
  wordIndex(slot: number, word: number): number {
    if (!(slot >= 0 && slot < this.slots && (slot | 0) === slot)) {
      throw new RS_ERR_OUTPUT_BAD_SLOT(slot, `not in [0, ${this.slots})`);
    }
    return slot * WORDS_PER_SLOT + word;
  }

  get(slot: number, word: number): number {
    return this.words[this.wordIndex(slot, word)]!;
  }

  /** Resets a slot's figures to an empty request (no blocks, no tokens); keeps the generation. */
  clear(slot: number): void {
    const base = this.wordIndex(slot, 0);
    const gen = this.words[base + AccWord.Gen]!;
    this.words.fill(0, base, base + WORDS_PER_SLOT);
    this.words[base + AccWord.Gen] = gen;
    this.words[base + AccWord.StopTokenId] = -1;
    this.words[base + AccWord.StopString] = -1;
    this.words[base + AccWord.FirstWeightVersion] = -1;
    this.words[base + AccWord.LastWeightVersion] = -1;
    this.words[base + AccWord.RoutingIdBytes] = 1;
    this.words[base + AccWord.TextEnd] = -1;
    for (let c = 0; c < COLUMN_COUNT; c++) this.words[base + AccWord.ClassBase + c] = -1;
  }

  generation(slot: number): number {
    return this.get(slot, AccWord.Gen);
  }

  state(slot: number): number {
    return this.get(slot, AccWord.State);
  }

  completionTokens(slot: number): number {
    return this.get(slot, AccWord.Completion);
  }

  /** The engine's FinishReason code (or Stop for a stop string, Error for an output error). */
  finishReason(slot: number): number {
    return this.get(slot, AccWord.Finish);
  }

  stopTokenId(slot: number): number {
    return this.get(slot, AccWord.StopTokenId);
  }

  stopStringIndex(slot: number): number {
    return this.get(slot, AccWord.StopString);
  }

  firstWeightVersion(slot: number): number {
    return this.get(slot, AccWord.FirstWeightVersion);
  }

  lastWeightVersion(slot: number): number {
    return this.get(slot, AccWord.LastWeightVersion);
  }

  numCachedTokens(slot: number): number {
    return this.get(slot, AccWord.NumCached);
  }

  topK(slot: number): number {
    return this.get(slot, AccWord.TopK);
  }

  promptWidth(slot: number): number {
    return this.get(slot, AccWord.PromptWidth);
  }

  promptPositions(slot: number): number {
    return this.get(slot, AccWord.PromptPositions);
  }

  routingRows(slot: number): number {
    return this.get(slot, AccWord.RoutingRows);
  }

  routingFirstPos(slot: number): number {
    return this.get(slot, AccWord.RoutingFirstPos);
  }

  /** The engine's RejectReason when it refused the request (finish reason Error), else 0. */
  rejectReason(slot: number): number {
    return this.get(slot, AccWord.RejectReason);
  }

  maskIdsCount(slot: number): number {
    return this.get(slot, AccWord.MaskIds);
  }

  /** OutputError code: why the worker failed the request itself (0: it did not). */
  outputError(slot: number): number {
    return this.get(slot, AccWord.Error);
  }

  /**
   * How many numbers the slot's answer holds, every column counted (tokens, logprobs, weight
   * versions, top candidates, masks, routing ids, prompt logprobs) plus its text bytes over 4: what
   * an encoder's time grows with, read in O(1) to decide where the answer is encoded.
   */
  answerValues(slot: number): number {
    const b = this.wordIndex(slot, 0);
    const w = this.words;
    const tokens = w[b + AccWord.Completion]!;
    const routing = w[b + AccWord.RoutingRows]! * w[b + AccWord.Layers]! * w[b + AccWord.Topk]!;
    const prompt = w[b + AccWord.PromptPositions]! * w[b + AccWord.PromptWidth]! * 3;
    const text = Math.max(0, w[b + AccWord.TextBytes]!) >> 2;
    return (
      tokens * (4 + 2 * w[b + AccWord.TopK]!) + w[b + AccWord.MaskIds]! + routing + prompt + text
    );
  }

  /** Bytes of the answer's text: up to a stop string's cut, else all that was detokenized. */
  textLength(slot: number): number {
    const end = this.get(slot, AccWord.TextEnd);
    return end >= 0 ? end : this.get(slot, AccWord.TextBytes);
  }

  columnClass(slot: number, column: number): number {
    return this.get(slot, AccWord.ClassBase + column);
  }

  columnOffset(slot: number, column: number): number {
    return this.offsets[slot * COLUMN_COUNT + column]!;
  }
}
