// Hand-written STEP records for the output-side tests: rows as plain objects, written with the
// engine's own format helpers (messages.ts) into any SharedArrayBuffer or ring.
import {
  type RegionViews,
  StepColumn,
  StepRecordView,
  stepRecordBytes,
  writeStepHeader,
} from '../../../src/wire/messages.js';

export interface StepRow {
  slot: number;
  gen: number;
  /** -1: no token (a prefill chunk, an abort). */
  token?: number;
  logprob?: number;
  finish?: number;
  stopTokenId?: number;
  numCached?: number;
  weightVersion?: number;
  maskIds?: readonly number[];
  /** For finish 4 (Error): the engine's RejectReason. */
  rejectReason?: number;
  /** Routing rows: absolute position of the first, then rows x layers x topk ids, row-major. */
  routingFirstPos?: number;
  routing?: readonly number[];
  /** Top candidates of the token: [id, logprob] pairs, best first. */
  top?: readonly (readonly [number, number])[];
  /** Prompt logprobs: positions from `firstPos`, `width` [id, logprob, rank] entries each. */
  prompt?: {
    firstPos: number;
    width: number;
    entries: readonly (readonly [number, number, number])[];
  };
  /** kv_transfer_params the engine answered with this output (msgpack bytes). */
  kv?: Uint8Array;
}

export interface StepGeometry {
  layers: number;
  topk: number;
  idBytes: 1 | 2;
}

export const TINY_GEOMETRY: StepGeometry = { layers: 2, topk: 2, idBytes: 1 };

export function stepBytes(rows: readonly StepRow[], g: StepGeometry): number {
  const maskIds = rows.reduce((n, r) => n + (r.maskIds?.length ?? 0), 0);
  const routingRows = rows.reduce((n, r) => n + (r.routing?.length ?? 0) / (g.layers * g.topk), 0);
  const top = rows.reduce((n, r) => n + (r.top?.length ?? 0), 0);
  const prompt = rows.reduce((n, r) => n + (r.prompt?.entries.length ?? 0), 0);
  return stepRecordBytes(
    rows.length,
    maskIds,
    routingRows,
    g.layers * g.topk,
    g.idBytes,
    top,
    prompt,
    kvTotal(rows),
  );
}

function kvTotal(rows: readonly StepRow[]): number {
  return rows.reduce((n, r) => n + (r.kv?.length ?? 0), 0);
}

/** Writes a STEP record's payload at byte `offset` (8-aligned) of `v`; returns its byte length. */
export function writeStep(
  v: RegionViews,
  offset: number,
  rows: readonly StepRow[],
  g: StepGeometry,
): number {
  const rowIds = g.layers * g.topk;
  const maskTotal = rows.reduce((n, r) => n + (r.maskIds?.length ?? 0), 0);
  const routingTotal = rows.reduce((n, r) => n + (r.routing?.length ?? 0) / rowIds, 0);
  writeStepHeader(
    v,
    offset,
    rows.length,
    maskTotal,
    routingTotal,
    g.layers,
    g.topk,
    g.idBytes,
    0,
    0,
    rows.reduce((n, r) => n + (r.top?.length ?? 0), 0),
    rows.reduce((n, r) => n + (r.prompt?.entries.length ?? 0), 0),
    kvTotal(rows),
  );
  const rec = new StepRecordView().attach(v, offset);
  let maskAt = rec.maskBase;
  let topAt = 0;
  let promptAt = 0;
  let kvAt = rec.kvByteOffset;
  let routingAt = g.idBytes === 1 ? rec.routingByteOffset : rec.routingByteOffset >> 1;
  const routingDst = g.idBytes === 1 ? v.bytes : v.u16;
  rows.forEach((r, j) => {
    v.i32[rec.at(StepColumn.Slot, j)] = r.slot;
    v.i32[rec.at(StepColumn.Token, j)] = r.token ?? -1;
    v.f32[rec.at(StepColumn.Logprob, j)] = r.logprob ?? 0;
    v.i32[rec.at(StepColumn.Finish, j)] = r.finish ?? 0;
    v.i32[rec.at(StepColumn.StopTokenId, j)] = r.stopTokenId ?? -1;
    v.i32[rec.at(StepColumn.NumCached, j)] = r.numCached ?? 0;
    v.i32[rec.at(StepColumn.WeightVersion, j)] = r.weightVersion ?? 0;
    v.i32[rec.at(StepColumn.MaskCount, j)] = r.maskIds?.length ?? 0;
    v.i32[rec.at(StepColumn.RoutingRows, j)] = (r.routing?.length ?? 0) / rowIds;
    v.i32[rec.at(StepColumn.RoutingFirstPos, j)] = r.routingFirstPos ?? 0;
    v.i32[rec.at(StepColumn.SlotGen, j)] = r.gen;
    v.i32[rec.at(StepColumn.RejectReason, j)] = r.rejectReason ?? 0;
    for (const id of r.maskIds ?? []) v.i32[maskAt++] = id;
    v.i32[rec.at(StepColumn.TopCount, j)] = r.top?.length ?? 0;
    for (const [id, lp] of r.top ?? []) {
      v.i32[rec.topIdBase + topAt] = id;
      v.f32[rec.topLogprobBase + topAt++] = lp;
    }
    const p = r.prompt;
    v.i32[rec.at(StepColumn.PromptPositions, j)] = p === undefined ? 0 : p.entries.length / p.width;
    v.i32[rec.at(StepColumn.PromptFirstPos, j)] = p?.firstPos ?? 0;
    v.i32[rec.at(StepColumn.PromptWidth, j)] = p?.width ?? 0;
    for (const [id, lp, rank] of p?.entries ?? []) {
      v.i32[rec.promptIdBase + promptAt] = id;
      v.f32[rec.promptLogprobBase + promptAt] = lp;
      v.i32[rec.promptRankBase + promptAt++] = rank;
    }
    for (const id of r.routing ?? []) routingDst[routingAt++] = id;
    v.i32[rec.at(StepColumn.KvParamsBytes, j)] = r.kv?.length ?? 0;
    if (r.kv !== undefined) {
      v.bytes.set(r.kv, kvAt);
      kvAt += r.kv.length;
    }
  });
  return stepBytes(rows, g);
}
