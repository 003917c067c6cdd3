/**
 * The STEP record of the output ring (messages.ts has every record's format in its header): one
 * per engine step and API server, columns of that step's outputs and their areas, written in place
 * by the engine (step-batch-writer.ts) and read in place through a reused StepRecordView.
 */
import { slotIndex, wordIndex } from '../shm/words.js';
import type { RegionViews } from './messages.js';

// Not `(n + 7) & ~7`: that wraps at 2^31, so a corrupt STEP header declaring 2^30 outputs would pass
// the length check that stepRecordBytes serves (found by ops/fuzz). `-n & 7` keeps the low bits right.
const pad8 = (n: number): number => n + (-n & 7);
/** 4-byte words of an area of `n` 4-byte entries padded to 8 bytes (an element count, not an index). */
const padWords = (n: number): number => pad8(n * 4) >> 2;

const STEP_HEADER_I32 = 10;
const STEP_HEADER_BYTES = STEP_HEADER_I32 * 4 + 2 * 8;
// The header's i32 fields, in words from the record's start.
const H_COUNT = 0;
const H_MASK_IDS_TOTAL = 1;
const H_ROUTING_ROWS_TOTAL = 2;
const H_LAYERS = 3;
const H_TOPK = 4;
const H_ROUTING_ID_BYTES = 5;
const H_TOP_TOTAL = 6;
const H_PROMPT_TOTAL = 7;
const H_KV_TOTAL = 8;
const H_RESERVED = 9;
/** The header's f64 pair (clock, step ms), in slots from the record's start. */
const STEP_CLOCK_F64 = STEP_HEADER_I32 / 2;
const STEP_MS_F64 = STEP_CLOCK_F64 + 1;
const STEP_COLUMNS = 17;

export const StepColumn = {
  Slot: 0,
  Token: 1,
  Logprob: 2,
  Finish: 3,
  StopTokenId: 4,
  NumCached: 5,
  WeightVersion: 6,
  MaskCount: 7,
  RoutingRows: 8,
  RoutingFirstPos: 9,
  SlotGen: 10,
  RejectReason: 11,
  /** Top candidates of this output's token in the top area (0: none). */
  TopCount: 12,
  /** Prompt positions this output carries in the prompt area (0: none). */
  PromptPositions: 13,
  PromptFirstPos: 14,
  /** Entries per prompt position: 1 + the request's prompt_logprobs k. */
  PromptWidth: 15,
  /** Bytes of the kv_transfer_params this output carries in the kv area (0: none). */
  KvParamsBytes: 16,
} as const;

/**
 * Bytes of a STEP record's payload. `topEntries`, `promptEntries` and `kvBytes` are the top, prompt
 * and kv areas' sizes (top_total, prompt_total, kv_total).
 */
export function stepRecordBytes(
  count: number,
  maskIds: number,
  routingRows: number,
  routingRowIds: number,
  routingIdBytes: number,
  topEntries = 0,
  promptEntries = 0,
  kvBytes = 0,
): number {
  return (
    STEP_HEADER_BYTES +
    pad8(count * 4) * STEP_COLUMNS +
    pad8(maskIds * 4) +
    pad8(topEntries * 4) * 2 +
    pad8(promptEntries * 4) * 3 +
    pad8(routingRows * routingRowIds * routingIdBytes) +
    pad8(kvBytes)
  );
}

/** A ring record's header (payload length, type): RECORD_HEADER_BYTES in src/shm/ring-endpoint.ts. */
const RING_RECORD_HEADER_BYTES = 8;

/**
 * What one output adds to a step's records whatever it shares a record with: its 17 column values
 * with each column's padding (8 bytes a column) and a whole record's fixed part (ring header, STEP
 * header, the padding of the mask, top, prompt, routing and kv areas: at most 4 bytes for each of
 * the five 4-byte areas, 7 each for routing and kv). A step has at most one record per output, so
 * its records never take more than the sum of stepOutputBytesBound over its outputs.
 */
const STEP_OUTPUT_FIXED_BYTES =
  RING_RECORD_HEADER_BYTES + STEP_HEADER_BYTES + STEP_COLUMNS * 8 + 40;

/** Ring bytes one top candidate takes (id and logprob). */
export const TOP_ENTRY_BYTES = 8;
/** Ring bytes one prompt-logprob entry takes (id, logprob and rank). */
export const PROMPT_ENTRY_BYTES = 12;

/**
 * The most ring bytes one output of a step can take: `maskIds` kept-token ids, `routingRows`
 * routing rows, `topEntries` top candidates, `promptEntries` prompt-logprob entries and `kvBytes`
 * bytes of kv_transfer_params, with its share of headers and padding (see
 * STEP_OUTPUT_FIXED_BYTES). The engine budgets each API server's output ring with it before a step
 * (src/engine/output-room.ts).
 */
export function stepOutputBytesBound(
  maskIds: number,
  routingRows: number,
  routingRowIds: number,
  routingIdBytes: number,
  topEntries = 0,
  promptEntries = 0,
  kvBytes = 0,
): number {
  return (
    STEP_OUTPUT_FIXED_BYTES +
    maskIds * 4 +
    topEntries * TOP_ENTRY_BYTES +
    promptEntries * PROMPT_ENTRY_BYTES +
    routingRows * routingRowIds * routingIdBytes +
    kvBytes
  );
}

/**
 * Where the columns of one STEP record sit, as element indices into the region views. One reader is
 * kept per consumer and re-attached to each record: reading a step allocates nothing.
 */
export class StepRecordView {
  count = 0;
  maskIdsTotal = 0;
  routingRowsTotal = 0;
  layers = 0;
  topk = 0;
  routingIdBytes = 1;
  topTotal = 0;
  promptTotal = 0;
  kvTotal = 0;
  clockMs = 0;
  stepMs = 0;
  /** i32 index of column c's first element is `colBase + c * colStride`. */
  colBase = 0;
  colStride = 0;
  /** i32 index of the first mask id. */
  maskBase = 0;
  /** i32 (f32) indices of the first top id and the first top logprob. */
  topIdBase = 0;
  topLogprobBase = 0;
  /** i32 (f32) indices of the first prompt id, prompt logprob and prompt rank. */
  promptIdBase = 0;
  promptLogprobBase = 0;
  promptRankBase = 0;
  /** Byte offset of the first routing id (a u16 index is half of it when routingIdBytes is 2). */
  routingByteOffset = 0;
  /** Byte offset of the kv area (outputs' kv_transfer_params, in output order). */
  kvByteOffset = 0;

  attach(v: RegionViews, offset: number): this {
    const h = wordIndex(offset);
    const d = slotIndex(offset);
    this.count = v.i32[h + H_COUNT]!;
    this.maskIdsTotal = v.i32[h + H_MASK_IDS_TOTAL]!;
    this.routingRowsTotal = v.i32[h + H_ROUTING_ROWS_TOTAL]!;
    this.layers = v.i32[h + H_LAYERS]!;
    this.topk = v.i32[h + H_TOPK]!;
    this.routingIdBytes = v.i32[h + H_ROUTING_ID_BYTES]!;
    this.topTotal = v.i32[h + H_TOP_TOTAL]!;
    this.promptTotal = v.i32[h + H_PROMPT_TOTAL]!;
    this.kvTotal = v.i32[h + H_KV_TOTAL]!;
    this.clockMs = v.f64[d + STEP_CLOCK_F64]!;
    this.stepMs = v.f64[d + STEP_MS_F64]!;
    this.colBase = wordIndex(offset + STEP_HEADER_BYTES);
    this.colStride = padWords(this.count);
    this.maskBase = this.colBase + this.colStride * STEP_COLUMNS;
    // Areas in 4-byte words; a corrupt header's counts only move indices (the reader checks the
    // record's length with stepRecordBytes before it reads anything).
    const topWords = padWords(this.topTotal);
    const promptWords = padWords(this.promptTotal);
    this.topIdBase = this.maskBase + padWords(this.maskIdsTotal);
    this.topLogprobBase = this.topIdBase + topWords;
    this.promptIdBase = this.topLogprobBase + topWords;
    this.promptLogprobBase = this.promptIdBase + promptWords;
    this.promptRankBase = this.promptLogprobBase + promptWords;
    this.routingByteOffset = (this.promptRankBase + promptWords) << 2;
    this.kvByteOffset =
      this.routingByteOffset +
      pad8(this.routingRowsTotal * this.layers * this.topk * this.routingIdBytes);
    return this;
  }

  /** i32 (or f32, for Logprob) index of output `j`'s value in column `c`. */
  at(c: number, j: number): number {
    return this.colBase + c * this.colStride + j;
  }
}

/**
 * Writes a STEP record header. The caller then fills the columns through `StepRecordView.at` after
 * attaching a view at the same offset (the engine process gathers each server's outputs that way).
 */
export function writeStepHeader(
  v: RegionViews,
  offset: number,
  count: number,
  maskIdsTotal: number,
  routingRowsTotal: number,
  layers: number,
  topk: number,
  routingIdBytes: number,
  clockMs: number,
  stepMs: number,
  topTotal = 0,
  promptTotal = 0,
  kvTotal = 0,
): void {
  const h = wordIndex(offset);
  const d = slotIndex(offset);
  v.i32[h + H_COUNT] = count;
  v.i32[h + H_MASK_IDS_TOTAL] = maskIdsTotal;
  v.i32[h + H_ROUTING_ROWS_TOTAL] = routingRowsTotal;
  v.i32[h + H_LAYERS] = layers;
  v.i32[h + H_TOPK] = topk;
  v.i32[h + H_ROUTING_ID_BYTES] = routingIdBytes;
  v.i32[h + H_TOP_TOTAL] = topTotal;
  v.i32[h + H_PROMPT_TOTAL] = promptTotal;
  v.i32[h + H_KV_TOTAL] = kvTotal;
  v.i32[h + H_RESERVED] = 0;
  v.f64[d + STEP_CLOCK_F64] = clockMs;
  v.f64[d + STEP_MS_F64] = stepMs;
}
