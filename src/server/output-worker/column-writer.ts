// The output worker's writes into one request's columns: append a token (id, logprob, mask row,
// top candidates), place routing rows and prompt logprobs by absolute position, grow a column's
// block, give all blocks back. Called once per engine output row; nothing here allocates except a
// block move when a column outgrows its block (amortised: blocks double) and one subarray view per
// bulk routing or prompt-logprob copy (a prefill chunk).
//
// Why values cross calls as they do: V8 passes numbers between functions it has not inlined as
// tagged values, and a number that is not a small integer (|n| < 2^30) is then boxed in a new heap
// object. A logprob passed as an argument did exactly that, one 16-byte object per token, whenever
// the optimiser chose not to inline (seen as 1.6 MB per 100k tokens in the allocation probe). So
// per-token calls carry only small integers: element indices (byte offsets / 4, which stay below
// 2^30 for buffers under 4 GiB) and the record's views, and floats are read where they are stored.

import type { TokenBytes } from '../../protocol/token-bytes.js';
import type { RegionViews, StepRecordView } from '../../wire/messages.js';
import { LOGPROB_FLOOR } from '../../wire/sampling-check.js';
import {
  type AccumulatorTable,
  AccWord,
  COLUMN_COUNT,
  Column,
} from '../cross-thread/accumulators.js';
import {
  type BlockArena,
  CLASS_COUNT,
  classBytes,
  classForBytes,
} from '../cross-thread/block-arena.js';
import { RS_ERR_OUTPUT_BAD_STEP } from '../cross-thread/errors.js';

/** Routing copies of at least this many bytes use one TypedArray.set (one view object per copy). */
const BULK_COPY_BYTES = 512;

/** Bytes a block of each class holds, read in place (no call) on the per-token path. */
const CLASS_BYTES = new Float64Array(CLASS_COUNT);
for (let c = 0; c < CLASS_COUNT; c++) CLASS_BYTES[c] = classBytes(c);

export class ColumnWriter {
  readonly #acc: AccumulatorTable;
  readonly #arena: BlockArena;
  readonly #words: Int32Array;
  readonly #offsets: Float64Array;

  constructor(acc: AccumulatorTable, arena: BlockArena) {
    this.#acc = acc;
    this.#arena = arena;
    this.#words = acc.words;
    this.#offsets = acc.offsets;
  }

  /**
   * Appends one completion position of the slot whose words start at `base`: the token, the
   * weight version it was sampled under (AccWord.LastWeightVersion, which the caller sets from the
   * same row first), its logprob read from `v.f32[logprobAt]` (when `withLogprobs`), and its mask
   * row of `maskCount` ids at `v.i32[maskAt..]` (when `withMask`). The arena's views are read
   * after each #ensure, because a growth replaces them.
   */
  appendToken(
    slot: number,
    base: number,
    token: number,
    v: RegionViews,
    logprobAt: number,
    withLogprobs: boolean,
    withMask: boolean,
    maskCount: number,
    maskAt: number,
  ): void {
    const words = this.#words;
    const arena = this.#arena;
    const n = words[base + AccWord.Completion]!;
    let at = this.#ensure(slot, base, Column.Tokens, n, n + 1, 4);
    arena.i32[at + n] = token;
    // The row's weight version, which the scatter stored as the slot's last one just before.
    at = this.#ensure(slot, base, Column.WeightVersions, n, n + 1, 4);
    arena.i32[at + n] = words[base + AccWord.LastWeightVersion]!;
    if (withLogprobs) {
      at = this.#ensure(slot, base, Column.Logprobs, n, n + 1, 4);
      arena.f32[at + n] = v.f32[logprobAt]!;
    }
    if (withMask) {
      at = this.#ensure(slot, base, Column.MaskCounts, n, n + 1, 4);
      arena.i32[at + n] = maskCount;
      const ids = words[base + AccWord.MaskIds]!;
      if (maskCount > 0) {
        const to = this.#ensure(slot, base, Column.MaskIds, ids, ids + maskCount, 4) + ids;
        const dst = arena.i32;
        const src = v.i32;
        for (let m = 0; m < maskCount; m++) dst[to + m] = src[maskAt + m]!;
      }
      words[base + AccWord.MaskIds] = ids + maskCount;
    }
    words[base + AccWord.Completion] = n + 1;
  }

  /**
   * Stores the top candidates of the completion position about to be appended (call before
   * appendToken): the first min(count, AccWord.TopK) of `count` ids at `v.i32[idAt..]` and
   * logprobs at `v.f32[logprobAt..]`, the rest of the position's TopK entries padded with id -1
   * and logprob -9999.
   */
  appendTop(
    slot: number,
    base: number,
    v: RegionViews,
    idAt: number,
    logprobAt: number,
    count: number,
  ): void {
    const words = this.#words;
    const arena = this.#arena;
    const k = words[base + AccWord.TopK]!;
    const from = words[base + AccWord.Completion]! * k;
    const ids = this.#ensure(slot, base, Column.TopIds, from, from + k, 4) + from;
    const lps = this.#ensure(slot, base, Column.TopLogprobs, from, from + k, 4) + from;
    // Both views are read after both #ensure calls: the second may have replaced them.
    const dstIds = arena.i32;
    const dstLps = arena.f32;
    const n = Math.min(count, k);
    for (let t = 0; t < n; t++) {
      dstIds[ids + t] = v.i32[idAt + t]!;
      dstLps[lps + t] = v.f32[logprobAt + t]!;
    }
    for (let t = n; t < k; t++) {
      dstIds[ids + t] = -1;
      dstLps[lps + t] = LOGPROB_FLOOR;
    }
  }

  /**
   * Stores `positions` prompt positions from `firstPos` on, `width` entries each, whose ids,
   * logprobs and ranks start at `v.i32[idAt..]`, `v.f32[logprobAt..]` and `v.i32[rankAt..]`.
   * Positions already stored (a recompute after preemption sends them again, identical) are
   * skipped; a gap before the new ones, a position 0 or a width that changes mid-request breaks
   * the format (RS_ERR_OUTPUT_BAD_STEP). One bulk copy per column (a prefill chunk's worth).
   */
  appendPrompt(
    slot: number,
    base: number,
    firstPos: number,
    positions: number,
    width: number,
    v: RegionViews,
    idAt: number,
    logprobAt: number,
    rankAt: number,
  ): void {
    const words = this.#words;
    const stored = words[base + AccWord.PromptPositions]!;
    const known = words[base + AccWord.PromptWidth]!;
    if (width < 1 || firstPos < 1 || (known !== 0 && known !== width)) {
      throw new RS_ERR_OUTPUT_BAD_STEP(
        `slot ${slot}: prompt logprobs of width ${width} from position ${firstPos} (stored width ${known})`,
      );
    }
    // Position p is stored at index p - 1: the next new one is stored + 1.
    if (firstPos > stored + 1) {
      throw new RS_ERR_OUTPUT_BAD_STEP(
        `slot ${slot}: prompt logprobs jump from position ${stored + 1} to ${firstPos}`,
      );
    }
    const skip = stored + 1 - firstPos;
    if (skip >= positions) return;
    words[base + AccWord.PromptWidth] = width;
    const from = stored * width;
    const n = (positions - skip) * width;
    const src = skip * width;
    const ids = this.#ensure(slot, base, Column.PromptIds, from, from + n, 4) + from;
    const lps = this.#ensure(slot, base, Column.PromptLogprobs, from, from + n, 4) + from;
    const ranks = this.#ensure(slot, base, Column.PromptRanks, from, from + n, 4) + from;
    // The views are read after every #ensure: a growth replaces them.
    const arena = this.#arena;
    arena.i32.set(v.i32.subarray(idAt + src, idAt + src + n), ids);
    arena.f32.set(v.f32.subarray(logprobAt + src, logprobAt + src + n), lps);
    arena.i32.set(v.i32.subarray(rankAt + src, rankAt + src + n), ranks);
    words[base + AccWord.PromptPositions] = stored + positions - skip;
  }

  /**
   * Stores the `rows` routing rows of absolute positions firstPos.. that start `rowCursor` rows
   * into record `rec`'s routing section. Rows before `promptStart` (routed_experts_prompt_start)
   * are skipped; rows already stored (a recompute after preemption sends them again, identical) are
   * written over in place; a row past the stored end with a hole before it breaks the format
   * (RS_ERR_OUTPUT_BAD_STEP).
   */
  appendRouting(
    slot: number,
    base: number,
    promptStart: number,
    firstPos: number,
    rows: number,
    v: RegionViews,
    rec: StepRecordView,
    rowCursor: number,
  ): void {
    const words = this.#words;
    const rowIds = rec.layers * rec.topk;
    let stored = words[base + AccWord.RoutingRows]!;
    if (stored === 0) {
      words[base + AccWord.RoutingFirstPos] = Math.max(firstPos, promptStart);
      words[base + AccWord.Layers] = rec.layers;
      words[base + AccWord.Topk] = rec.topk;
      words[base + AccWord.RoutingIdBytes] = rec.routingIdBytes;
    } else if (
      words[base + AccWord.Layers] !== rec.layers ||
      words[base + AccWord.Topk] !== rec.topk ||
      words[base + AccWord.RoutingIdBytes] !== rec.routingIdBytes
    ) {
      throw new RS_ERR_OUTPUT_BAD_STEP(`slot ${slot}: routing row geometry changed mid-request`);
    }
    const start = words[base + AccWord.RoutingFirstPos]!;
    const skip = Math.max(0, start - firstPos);
    if (skip >= rows) return;
    const from = firstPos + skip;
    const count = rows - skip;
    if (from > start + stored) {
      throw new RS_ERR_OUTPUT_BAD_STEP(
        `slot ${slot}: routing rows jump from position ${start + stored} to ${from}`,
      );
    }
    const dstRow = from - start;
    const end = Math.max(stored, dstRow + count);
    const rowBytes = rowIds * rec.routingIdBytes;
    // Bytes are counted in 4-byte units where possible so offsets stay small integers.
    if ((rowBytes & 3) === 0 && (rec.routingByteOffset & 3) === 0) {
      const rowWords = rowBytes >> 2;
      const at = this.#ensure(slot, base, Column.Routing, stored * rowWords, end * rowWords, 4);
      const d = this.#arena.i32;
      const s = v.i32;
      const to = at + dstRow * rowWords;
      const src = (rec.routingByteOffset >> 2) + (rowCursor + skip) * rowWords;
      const n = count * rowWords;
      if (n * 4 >= BULK_COPY_BYTES) d.set(s.subarray(src, src + n), to);
      else for (let k = 0; k < n; k++) d[to + k] = s[src + k]!;
    } else {
      const at = this.#ensure(slot, base, Column.Routing, stored * rowBytes, end * rowBytes, 1);
      const d = this.#arena.bytes;
      const s = v.bytes;
      const to = at + dstRow * rowBytes;
      const src = rec.routingByteOffset + (rowCursor + skip) * rowBytes;
      for (let k = 0, n = count * rowBytes; k < n; k++) d[to + k] = s[src + k]!;
    }
    stored = end;
    words[base + AccWord.RoutingRows] = stored;
  }

  /**
   * Appends the UTF-8 bytes of `token` to the slot's text column (a special token's only unless
   * `skipSpecial`); returns how many.
   */
  appendText(
    slot: number,
    base: number,
    tokens: TokenBytes,
    token: number,
    skipSpecial: boolean,
  ): number {
    const words = this.#words;
    const used = words[base + AccWord.TextBytes]!;
    const at = this.#ensure(slot, base, Column.Text, used, used + tokens.maxTokenBytes, 1);
    const added = tokens.write(token, this.#arena.bytes, at + used, skipSpecial);
    words[base + AccWord.TextBytes] = used + added;
    return added;
  }

  /** Gives every block of the slot back to the arena (the slot's figures are left as they are). */
  releaseBlocks(slot: number): void {
    const base = this.#acc.wordIndex(slot, 0);
    for (let c = 0; c < COLUMN_COUNT; c++) {
      const cls = this.#words[base + AccWord.ClassBase + c]!;
      if (cls < 0) continue;
      this.#arena.free(this.#offsets[slot * COLUMN_COUNT + c]!, cls);
      this.#words[base + AccWord.ClassBase + c] = -1;
    }
  }

  /**
   * Makes the column's block hold `need` elements of `size` bytes (`used` of them filled) and
   * returns the block's offset in elements of that size (byte offset / size).
   */
  #ensure(
    slot: number,
    base: number,
    column: number,
    used: number,
    need: number,
    size: number,
  ): number {
    const cls = this.#words[base + AccWord.ClassBase + column]!;
    const i = slot * COLUMN_COUNT + column;
    if (cls >= 0 && CLASS_BYTES[cls]! >= need * size) return this.#offsets[i]! / size;
    return this.#move(slot, base, column, used * size, need * size) / size;
  }

  /** A first block for the column, or a bigger one with its used bytes copied over. */
  #move(slot: number, base: number, column: number, usedBytes: number, needBytes: number): number {
    const cls = this.#words[base + AccWord.ClassBase + column]!;
    const i = slot * COLUMN_COUNT + column;
    let offset: number;
    let newClass: number;
    if (cls < 0) {
      offset = this.#arena.alloc(needBytes);
      newClass = classForBytes(needBytes);
    } else {
      newClass = this.#arena.regrowClass(cls, needBytes);
      offset = this.#arena.regrow(this.#offsets[i]!, cls, usedBytes, needBytes);
    }
    this.#offsets[i] = offset;
    this.#words[base + AccWord.ClassBase + column] = newClass;
    return offset;
  }
}
