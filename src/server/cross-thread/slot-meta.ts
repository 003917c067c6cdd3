// What the output worker and the packers need to know about a request, one row per request slot in
// a SharedArrayBuffer. The main thread writes a row before it commits the request's ADD record; the
// ring's publish/acquire chain (ADD commit -> engine -> STEP commit) orders the row before any
// output of the request, and the generation is stored last with Atomics.store and read first with
// Atomics.load, so a reader that sees a generation sees the row written with it.
//
//   0        +--------------------------------------------------------------+
//            | header: MAGIC, SLOT_COUNT                                    |
//   64       +--------------------------------------------------------------+
//            | slot 0 words: GEN FLAGS FORM PROMPT_LEN ROUTED_START         |
//            |   MAX_TOKENS MIN_TOKENS STOP_COUNT CHOICE_INDEX CHOICE_COUNT |
//            |   TOP_LOGPROBS (reserved) | STOP_LENGTHS x MAX_STOP_STRINGS  |
//            | slot 1 words ...                                             |
//   64+S*128 +--------------------------------------------------------------+
//            | slot 0 stop bytes: STOP_BYTES_LIMIT bytes, strings back to back |
//            | slot 1 stop bytes ...                                        |
//            +--------------------------------------------------------------+
import { STOP_BYTES_LIMIT, stopStringsProblem } from '../../protocol/stop-strings.js';
import { RS_ERR_OUTPUT_BAD_SLOT } from './errors.js';

const MAGIC = 0x544d_5352; // 'RSMT'
const HEADER_BYTES = 64;
const WORDS_PER_SLOT = 32;
const W_GEN = 0;
const W_FLAGS = 1;
const W_FORM = 2;
const W_PROMPT_LEN = 3;
const W_ROUTED_START = 4;
const W_MAX_TOKENS = 5;
const W_MIN_TOKENS = 6;
const W_STOP_COUNT = 7;
const W_CHOICE_INDEX = 8;
const W_CHOICE_COUNT = 9;
const W_TOP_LOGPROBS = 10;
const W_STOP_LENGTHS = 16;

export const SlotFlag = {
  Stream: 1,
  Logprobs: 2,
  SamplingMask: 4,
  RoutedExperts: 8,
  IncludeStopStrInOutput: 16,
  IncludeUsage: 32,
  ContinuousUsageStats: 64,
  HasStopStrings: 128,
  /** Detokenize the completion into the text column (the OpenAI routes answer text). */
  Text: 256,
  /** vLLM's return_token_ids: OpenAI choices carry their token ids. */
  ReturnTokenIds: 512,
  /** skip_special_tokens false: special tokens' text goes into the text column too. */
  KeepSpecialTokens: 1024,
} as const;

/**
 * The response form: 0 packed JSON, 1 legacy JSON, 2 msgpack (streams are JSON: 2 means 0), 3 an
 * OpenAI completion, 4 an OpenAI chat completion.
 */
export const ResponseFormCode = {
  Packed: 0,
  Legacy: 1,
  Msgpack: 2,
  Completion: 3,
  Chat: 4,
} as const;
export type ResponseFormCode = (typeof ResponseFormCode)[keyof typeof ResponseFormCode];

export interface SlotMetaFields {
  stream: boolean;
  logprobs: boolean;
  samplingMask: boolean;
  routedExperts: boolean;
  includeStopStrInOutput: boolean;
  includeUsage: boolean;
  continuousUsageStats: boolean;
  form: ResponseFormCode;
  promptLen: number;
  routedExpertsPromptStart: number;
  maxTokens: number;
  /** Stop strings are not checked before this many completion tokens (vLLM's min_tokens rule). */
  minTokens: number;
  stop: readonly string[];
  /** This sequence's index among the request's n choices, and n (default 0 of 1). */
  choiceIndex?: number;
  choiceCount?: number;
  /** OpenAI routes: detokenize into the text column; alternatives asked per position (-1: none). */
  text?: boolean;
  topLogprobs?: number;
  returnTokenIds?: boolean;
  keepSpecialTokens?: boolean;
}

const encoder = new TextEncoder();

export class SlotMetaTable {
  readonly sab: SharedArrayBuffer;
  readonly slots: number;
  /** The raw words, for readers on a per-token path (see generationIndex); written by write() only. */
  readonly words: Int32Array;
  readonly #words: Int32Array;
  readonly #bytes: Uint8Array;
  readonly #stopBase: number;

  static bytesFor(slots: number): number {
    return HEADER_BYTES + slots * (WORDS_PER_SLOT * 4 + STOP_BYTES_LIMIT);
  }

  /** A new table for `slots` slots (main thread), or a view of an existing one (workers). */
  constructor(sabOrSlots: SharedArrayBuffer | number) {
    if (typeof sabOrSlots === 'number') {
      if (!Number.isInteger(sabOrSlots) || sabOrSlots < 1 || sabOrSlots > 1 << 20) {
        throw new RS_ERR_OUTPUT_BAD_SLOT('count', `${sabOrSlots} slots is not in [1, 2^20]`);
      }
      this.sab = new SharedArrayBuffer(SlotMetaTable.bytesFor(sabOrSlots));
      this.#words = new Int32Array(this.sab);
      this.words = this.#words;
      this.#words[1] = sabOrSlots;
      Atomics.store(this.#words, 0, MAGIC);
    } else {
      this.sab = sabOrSlots;
      this.#words = new Int32Array(this.sab);
      this.words = this.#words;
      if (Atomics.load(this.#words, 0) !== MAGIC) throw new TypeError('not a slot meta table');
    }
    this.slots = this.#words[1]!;
    this.#bytes = new Uint8Array(this.sab);
    this.#stopBase = HEADER_BYTES + this.slots * WORDS_PER_SLOT * 4;
  }

  /**
   * Writes a slot's row for a new request with its generation (the one its ADD record carries, a
   * value in 1..2^31-1; 0 means "never used"). Stop strings must be within the limits request
   * parsing enforces (src/protocol/stop-strings.ts): more is a caller's bug.
   */
  write(slot: number, generation: number, f: SlotMetaFields): void {
    const w = this.#base(slot);
    const words = this.#words;
    if (!(generation >= 1 && generation <= 0x7fff_ffff && (generation | 0) === generation)) {
      throw new RS_ERR_OUTPUT_BAD_SLOT(slot, `generation ${generation} is not in [1, 2^31-1]`);
    }
    const problem = stopStringsProblem(f.stop);
    if (problem !== null) throw new RS_ERR_OUTPUT_BAD_SLOT(slot, problem);
    words[w + W_FLAGS] =
      (f.stream ? SlotFlag.Stream : 0) |
      (f.logprobs ? SlotFlag.Logprobs : 0) |
      (f.samplingMask ? SlotFlag.SamplingMask : 0) |
      (f.routedExperts ? SlotFlag.RoutedExperts : 0) |
      (f.includeStopStrInOutput ? SlotFlag.IncludeStopStrInOutput : 0) |
      (f.includeUsage ? SlotFlag.IncludeUsage : 0) |
      (f.continuousUsageStats ? SlotFlag.ContinuousUsageStats : 0) |
      (f.stop.length > 0 ? SlotFlag.HasStopStrings : 0) |
      (f.text === true ? SlotFlag.Text : 0) |
      (f.returnTokenIds === true ? SlotFlag.ReturnTokenIds : 0) |
      (f.keepSpecialTokens === true ? SlotFlag.KeepSpecialTokens : 0);
    words[w + W_FORM] = f.form;
    words[w + W_PROMPT_LEN] = f.promptLen;
    words[w + W_ROUTED_START] = f.routedExpertsPromptStart;
    words[w + W_MAX_TOKENS] = f.maxTokens;
    words[w + W_MIN_TOKENS] = f.minTokens;
    words[w + W_CHOICE_INDEX] = f.choiceIndex ?? 0;
    words[w + W_CHOICE_COUNT] = f.choiceCount ?? 1;
    words[w + W_TOP_LOGPROBS] = f.topLogprobs ?? -1;
    let at = this.#stopBase + slot * STOP_BYTES_LIMIT;
    for (let i = 0; i < f.stop.length; i++) {
      const { written } = encoder.encodeInto(
        f.stop[i]!,
        this.#bytes.subarray(at, at + STOP_BYTES_LIMIT),
      );
      words[w + W_STOP_LENGTHS + i] = written;
      at += written;
    }
    words[w + W_STOP_COUNT] = f.stop.length;
    // Last, with a release store: a reader that loads this generation sees the row above.
    Atomics.store(words, w + W_GEN, generation);
  }

  /** Index in `words` of the slot's generation: `Atomics.load(words, generationIndex(slot))`. */
  generationIndex(slot: number): number {
    return this.#base(slot) + W_GEN;
  }

  /** The generation of the slot's latest request (0: never used). */
  generation(slot: number): number {
    return Atomics.load(this.#words, this.#base(slot) + W_GEN);
  }

  flags(slot: number): number {
    return this.#words[this.#base(slot) + W_FLAGS]!;
  }

  hasFlag(slot: number, flag: number): boolean {
    return (this.flags(slot) & flag) !== 0;
  }

  form(slot: number): ResponseFormCode {
    return this.#words[this.#base(slot) + W_FORM]! as ResponseFormCode;
  }

  promptLen(slot: number): number {
    return this.#words[this.#base(slot) + W_PROMPT_LEN]!;
  }

  routedExpertsPromptStart(slot: number): number {
    return this.#words[this.#base(slot) + W_ROUTED_START]!;
  }

  maxTokens(slot: number): number {
    return this.#words[this.#base(slot) + W_MAX_TOKENS]!;
  }

  minTokens(slot: number): number {
    return this.#words[this.#base(slot) + W_MIN_TOKENS]!;
  }

  choiceIndex(slot: number): number {
    return this.#words[this.#base(slot) + W_CHOICE_INDEX]!;
  }

  choiceCount(slot: number): number {
    return this.#words[this.#base(slot) + W_CHOICE_COUNT]!;
  }

  /** OpenAI alternatives per position (completions' logprobs, chat's top_logprobs); -1: none. */
  topLogprobs(slot: number): number {
    return this.#words[this.#base(slot) + W_TOP_LOGPROBS]!;
  }

  /** Bytes of the slot's longest stop string (0 without stop strings). */
  longestStop(slot: number): number {
    let longest = 0;
    const count = this.stopCount(slot);
    for (let i = 0; i < count; i++) longest = Math.max(longest, this.stopLength(slot, i));
    return longest;
  }

  stopCount(slot: number): number {
    return this.#words[this.#base(slot) + W_STOP_COUNT]!;
  }

  /** UTF-8 byte length of stop string i. */
  stopLength(slot: number, i: number): number {
    return this.#words[this.#base(slot) + W_STOP_LENGTHS + i]!;
  }

  /** Byte offset in `stopBytes()` of the slot's first stop string (the rest follow back to back). */
  stopBytesOffset(slot: number): number {
    this.#base(slot);
    return this.#stopBase + slot * STOP_BYTES_LIMIT;
  }

  /** The whole table as bytes (stop strings are read from here at stopBytesOffset). */
  stopBytes(): Uint8Array {
    return this.#bytes;
  }

  /** Stop string i as text (once per finished request, for `stop_reason`). */
  stopString(slot: number, i: number): string {
    let at = this.stopBytesOffset(slot);
    for (let k = 0; k < i; k++) at += this.stopLength(slot, k);
    return Buffer.from(this.sab, at, this.stopLength(slot, i)).toString('utf8');
  }

  #base(slot: number): number {
    if (!(slot >= 0 && slot < this.slots && (slot | 0) === slot)) {
      throw new RS_ERR_OUTPUT_BAD_SLOT(slot, `not in [0, ${this.slots})`);
    }
    return (HEADER_BYTES >> 2) + slot * WORDS_PER_SLOT;
  }
}
