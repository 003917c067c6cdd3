/**
 * The array-valued EngineCoreOutput fields, as plain JS objects (one number per token: test code):
 * LogprobsLists (VM §8), LogprobsTensors (VM §9a), SamplingMaskLists (VM §10), routed experts (VM §11).
 */
import {
  decodeTensor,
  encodeTensor,
  type Frames,
  fromRows,
  rowsOf,
  scalarOf,
  type Tensor,
} from './ndarray.js';
import { array, MirrorDecodeError } from './wire-types.js';

/** LogprobsLists: row i is new_token_ids[i]; column 0 the sampled token, 1..K the top K. */
export interface Logprobs {
  tokenIds: number[][];
  logprobs: number[][];
  /** The sampled token's 1-based rank in the vocabulary, one per row (>= 1, VM §8). */
  ranks: number[];
  /** Wire dtypes; the encoder's defaults are '<i4' ids and '<i8' ranks (VE §5). */
  idsDtype?: string;
  ranksDtype?: string;
}

/**
 * Prompt logprobs (LogprobsTensors of torch tensors, VM §9a; vllm/v1/outputs.py): row r scores
 * prompt position 1 + r of the request's prompt logprobs so far (a frontend counts rows on from
 * chunk to chunk); column 0 the prompt token, then the engine's K best candidates.
 */
export interface PromptLogprobs {
  tokenIds: number[][];
  logprobs: number[][];
  /** The prompt token's 1-based vocabulary rank, one per row (>= 1, as for sampled tokens). */
  ranks: number[];
  /**
   * torch dtype names. The encoder's defaults are vLLM's default model runner's
   * (LogprobsTensors.empty_cpu: 'int32' ids and ranks); Model Runner V2 sends 'int64' ids.
   */
  idsDtype?: string;
  ranksDtype?: string;
}
/** routed_experts: ids[(row * layers + layer) * topk + k]; `wide` is '<u2' (> 256 experts). */
export interface RoutedExperts {
  rows: number;
  layers: number;
  topk: number;
  wide: boolean;
  ids: number[];
}

/** new_sampling_mask: row i holds the ids that survived sampling filters for new_token_ids[i]. */
export interface SamplingMask {
  rows: number[][];
}

const INT_DTYPES = ['<i4', '<i8', '=i4', '=i8', 'i4', 'i8', 'int32', 'int64'];

function intTensor(t: Tensor, where: string): Tensor {
  if (!INT_DTYPES.includes(t.dtype)) {
    throw new MirrorDecodeError(where, `dtype ${t.dtype}, not an int32/int64`);
  }
  return t;
}

function floatTensor(t: Tensor, where: string): Tensor {
  if (!['<f4', '=f4', 'f4', 'float32'].includes(t.dtype)) {
    throw new MirrorDecodeError(where, `dtype ${t.dtype}, not float32`);
  }
  return t;
}

function sameRows(a: number[][], b: number[][], where: string): void {
  if (a.length !== b.length || a.some((r, i) => r.length !== b[i]?.length)) {
    throw new MirrorDecodeError(where, 'token_ids and logprobs differ in shape');
  }
}

export function encodeLogprobs(l: Logprobs, frames: Frames): unknown[] {
  return [
    encodeTensor(fromRows(l.idsDtype ?? '<i4', l.tokenIds), frames),
    encodeTensor(fromRows('<f4', l.logprobs), frames),
    encodeTensor(
      { dtype: l.ranksDtype ?? '<i8', shape: [l.ranks.length], values: l.ranks },
      frames,
    ),
    null,
  ];
}

export function decodeLogprobs(v: unknown, frames: Frames, where: string): Logprobs {
  const a = array(v, where);
  if (a.length !== 4) throw new MirrorDecodeError(where, `LogprobsLists of ${a.length}, not 4`);
  const ids = intTensor(decodeTensor(a[0], frames, `${where}.logprob_token_ids`), where);
  const lps = floatTensor(decodeTensor(a[1], frames, `${where}.logprobs`), where);
  const ranks = intTensor(decodeTensor(a[2], frames, `${where}.sampled_token_ranks`), where);
  const tokenIds = rowsOf(ids, `${where}.logprob_token_ids`);
  const logprobs = rowsOf(lps, `${where}.logprobs`);
  sameRows(tokenIds, logprobs, where);
  if (ranks.values.length !== tokenIds.length || ranks.values.some((r) => r < 1)) {
    throw new MirrorDecodeError(`${where}.sampled_token_ranks`, 'one rank >= 1 per row wanted');
  }
  if (a[3] !== null) {
    throw new MirrorDecodeError(
      `${where}.cu_num_generated_tokens`,
      'not nil in a per-request output',
    );
  }
  return { tokenIds, logprobs, ranks: ranks.values, idsDtype: ids.dtype, ranksDtype: ranks.dtype };
}

/**
 * Torch tensors, so torch dtype names (VM §9a): `[ids [P, W], logprobs float32 [P, W], ranks [P],
 * cu_num_generated_tokens]`, the 4th nil per request (vLLM >= #26060; every era here has it).
 */
export function encodePromptLogprobs(p: PromptLogprobs, frames: Frames): unknown[] {
  const width = p.tokenIds[0]?.length ?? 1;
  const rows = p.tokenIds.length;
  const ids = { dtype: p.idsDtype ?? 'int32', shape: [rows, width], values: p.tokenIds.flat() };
  const logprobs = { dtype: 'float32', shape: [rows, width], values: p.logprobs.flat() };
  const ranks = { dtype: p.ranksDtype ?? 'int32', shape: [rows], values: p.ranks };
  return [
    encodeTensor(ids, frames),
    encodeTensor(logprobs, frames),
    encodeTensor(ranks, frames),
    null,
  ];
}

/**
 * 3 elements before vLLM #26060, 4 since (VM §9a); ranks one per row and >= 1, and
 * cu_num_generated_tokens nil, as vLLM's Rust client requires (protocol/logprobs.rs).
 */
export function decodePromptLogprobs(v: unknown, frames: Frames, where: string): PromptLogprobs {
  const a = array(v, where);
  if (a.length !== 3 && a.length !== 4) {
    throw new MirrorDecodeError(where, `LogprobsTensors of ${a.length}, not 3 or 4`);
  }
  const ids = intTensor(decodeTensor(a[0], frames, `${where}.logprob_token_ids`), where);
  const lps = floatTensor(decodeTensor(a[1], frames, `${where}.logprobs`), where);
  const ranks = intTensor(decodeTensor(a[2], frames, `${where}.selected_token_ranks`), where);
  const tokenIds = rowsOf(ids, `${where}.logprob_token_ids`);
  const logprobs = rowsOf(lps, `${where}.logprobs`);
  sameRows(tokenIds, logprobs, where);
  if (ids.shape[1] !== lps.shape[1]) {
    throw new MirrorDecodeError(where, 'token_ids and logprobs differ in width');
  }
  const oneRankPerRow = ranks.shape.length === 1 && ranks.values.length === tokenIds.length;
  if (!oneRankPerRow || ranks.values.some((r) => r < 1)) {
    throw new MirrorDecodeError(`${where}.selected_token_ranks`, 'one rank >= 1 per row wanted');
  }
  if (a.length === 4 && a[3] !== null) {
    throw new MirrorDecodeError(`${where}.cu_num_generated_tokens`, 'not nil per request');
  }
  return {
    tokenIds,
    logprobs,
    ranks: ranks.values,
    idsDtype: ids.dtype,
    ranksDtype: ranks.dtype,
  };
}

export function encodeRoutedExperts(r: RoutedExperts, frames: Frames): unknown[] {
  return encodeTensor(
    { dtype: r.wide ? '<u2' : '|u1', shape: [r.rows, r.layers, r.topk], values: r.ids },
    frames,
  );
}

/** '|u1' or '<u2' (and the spellings the Rust client takes), '<i4' from older engines (VM §11). */
export function decodeRoutedExperts(v: unknown, frames: Frames, where: string): RoutedExperts {
  const t = decodeTensor(v, frames, where);
  const width = scalarOf(t.dtype)?.size;
  const ok = ['|u1', 'u1', 'uint8', '<u2', '=u2', 'u2', 'uint16', '<i4'].includes(t.dtype);
  if (!ok || t.shape.length !== 3) {
    throw new MirrorDecodeError(where, `routed experts ${t.dtype} of rank ${t.shape.length}`);
  }
  const [rows, layers, topk] = t.shape as [number, number, number];
  return { rows, layers, topk, wide: width !== 1, ids: t.values };
}

/** offsets is nil when the mask holds one row (VM §10), else CSR '<i8' [rows + 1]. */
export function encodeSamplingMask(m: SamplingMask, frames: Frames): unknown[] {
  const flat = m.rows.flat();
  const ids = encodeTensor({ dtype: '<i4', shape: [flat.length], values: flat }, frames);
  if (m.rows.length === 1) return [ids, null, null];
  const offsets = [0];
  for (const row of m.rows) offsets.push(offsets[offsets.length - 1]! + row.length);
  return [
    ids,
    encodeTensor({ dtype: '<i8', shape: [offsets.length], values: offsets }, frames),
    null,
  ];
}

export function decodeSamplingMask(v: unknown, frames: Frames, where: string): SamplingMask {
  const a = array(v, where);
  if (a.length !== 3) throw new MirrorDecodeError(where, `SamplingMaskLists of ${a.length}, not 3`);
  if (a[2] !== null) {
    throw new MirrorDecodeError(
      `${where}.cu_num_generated_tokens`,
      'not nil in a per-request output',
    );
  }
  const ids = intTensor(decodeTensor(a[0], frames, `${where}.token_ids`), where).values;
  if (a[1] === null) return { rows: [ids] };
  const offsets = intTensor(decodeTensor(a[1], frames, `${where}.offsets`), where).values;
  const bad = offsets[0] !== 0 || offsets[offsets.length - 1] !== ids.length;
  if (bad || offsets.some((o, i) => i > 0 && o < offsets[i - 1]!)) {
    throw new MirrorDecodeError(`${where}.offsets`, `[${offsets}] is not CSR over ${ids.length}`);
  }
  return { rows: offsets.slice(1).map((end, i) => ids.slice(offsets[i], end)) };
}
