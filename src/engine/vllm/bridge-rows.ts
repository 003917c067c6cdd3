/**
 * Copies of staged rows from one StepOutputs to another, for the bridge's backlog
 * (bridge-backlog.ts): a whole row with its mask, top candidates and what is left of its routing
 * and prompt windows, or a piece of a row, a row without a token carrying the first part of those
 * windows, which then move past it. A long prompt's routing rows and prompt logprobs go out in
 * such pieces, as the simulator emits a chunked prefill. Typed-array copies only: nothing is
 * allocated per row.
 */
import { copyIds } from '../copy-ids.js';
import type { OutputRoom } from '../output-room.js';
import type { StepOutputs } from '../step-outputs.js';

/** Prompt-logprob entries of row i. */
export function promptEntries(src: StepOutputs, i: number): number {
  return src.promptPositions[i]! * src.promptWidth[i]!;
}

/** Whether row i of `src` fits one output of its server whole. */
export function fitsOneOutput(room: OutputRoom, src: StepOutputs, i: number): boolean {
  const bytes = room.outputBytes(
    src.maskCount[i]!,
    src.routingRows[i]!,
    src.topCount[i]!,
    promptEntries(src, i),
    src.kvCount[i]!,
  );
  return bytes <= room.outputLimit(src.server[i]!);
}

/**
 * Appends row i of `src` to `dst` with its mask, top area, kv_transfer_params, first
 * `routingRows` routing rows and its prompt positions.
 */
export function copyRow(
  src: StepOutputs,
  i: number,
  dst: StepOutputs,
  routingRows: number,
): number {
  const row = dst.addRow(src.server[i]!, src.slot[i]!, src.weightVersion[i]!);
  dst.token[row] = src.token[i]!;
  dst.logprob[row] = src.logprob[i]!;
  dst.rank[row] = src.rank[i]!;
  dst.finish[row] = src.finish[i]!;
  dst.stopTokenId[row] = src.stopTokenId[i]!;
  dst.numCachedTokens[row] = src.numCachedTokens[i]!;
  dst.rejectReason[row] = src.rejectReason[i]!;
  const mask = src.maskCount[i]!;
  if (mask > 0) {
    const at = dst.reserveMask(mask);
    copyRun(src.maskIds, src.maskStart[i]!, dst.maskIds, at, mask);
    dst.maskStart[row] = at;
    dst.maskCount[row] = mask;
    dst.maskLength = at + mask;
  }
  const top = src.topCount[i]!;
  if (top > 0) {
    const at = dst.reserveTop(top);
    const from = src.topStart[i]!;
    for (let k = 0; k < top; k++) {
      dst.topIds[at + k] = src.topIds[from + k]!;
      dst.topLogprobs[at + k] = src.topLogprobs[from + k]!;
    }
    dst.topStart[row] = at;
    dst.topCount[row] = top;
    dst.topLength = at + top;
  }
  const kv = src.kvCount[i]!;
  if (kv > 0) dst.setKv(row, src.kvBytes, src.kvStart[i]!, src.kvStart[i]! + kv);
  copyWindows(src, i, dst, row, routingRows, src.promptPositions[i]!);
  return row;
}

/**
 * Delivers the first `routingRows` routing rows and `positions` prompt positions of row i as a
 * row of their own without a token (a prefill piece), and moves row i's windows past them.
 */
export function splitOff(
  src: StepOutputs,
  i: number,
  dst: StepOutputs,
  routingRows: number,
  positions: number,
): void {
  const row = dst.addRow(src.server[i]!, src.slot[i]!, src.weightVersion[i]!);
  dst.numCachedTokens[row] = src.numCachedTokens[i]!;
  copyWindows(src, i, dst, row, routingRows, positions);
  src.routingStart[i]! += routingRows;
  src.routingFirstPos[i]! += routingRows;
  src.routingRows[i]! -= routingRows;
  src.promptStart[i]! += positions * src.promptWidth[i]!;
  src.promptFirstPos[i]! += positions;
  src.promptPositions[i]! -= positions;
}

/** The first `routingRows` routing rows and `positions` prompt positions of row i into `row`. */
function copyWindows(
  src: StepOutputs,
  i: number,
  dst: StepOutputs,
  row: number,
  routingRows: number,
  positions: number,
): void {
  if (routingRows > 0) {
    const width = src.routingRowWidth;
    const at = dst.reserveRoutingRows(routingRows);
    const from = src.routingStart[i]! * width;
    copyIds(
      src.routing,
      src.routingBytes,
      from,
      dst.routing,
      dst.routingBytes,
      at,
      routingRows * width,
    );
    dst.routingRows[row] = routingRows;
    dst.routingFirstPos[row] = src.routingFirstPos[i]!;
    dst.routingRowCount += routingRows;
  }
  if (positions > 0) {
    const width = src.promptWidth[i]!;
    const n = positions * width;
    const at = dst.reservePrompt(n);
    const from = src.promptStart[i]!;
    copyRun(src.promptIds, from, dst.promptIds, at, n);
    copyRun(src.promptLogprobs, from, dst.promptLogprobs, at, n);
    copyRun(src.promptRanks, from, dst.promptRanks, at, n);
    dst.promptStart[row] = at;
    dst.promptPositions[row] = positions;
    dst.promptFirstPos[row] = src.promptFirstPos[i]!;
    dst.promptWidth[row] = width;
    dst.promptLength = at + n;
  }
}

/** Runs at least this long are copied with one TypedArray.set (a view each), shorter ones by hand. */
const BULK_COPY = 512;

function copyRun<T extends Int32Array | Float32Array>(
  src: T,
  from: number,
  dst: T,
  at: number,
  n: number,
): void {
  if (n >= BULK_COPY) dst.set(src.subarray(from, from + n), at);
  else for (let k = 0; k < n; k++) dst[at + k] = src[from + k]!;
}
