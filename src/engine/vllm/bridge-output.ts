/**
 * One EngineCoreOutput as the bridge reads it, and how it becomes step rows: the same rows the
 * simulator writes for the same request (step-outputs.ts), so nothing above the rings can tell the
 * engines apart. The codec's reader hands over one reused OutputView per output, its fields in
 * scratch typed arrays or byte ranges of the message; turning it into rows allocates nothing.
 *
 * Routing rows (docs/vllm-protocol.md, "Outputs"): the first output with tokens carries the prompt's rows
 * from the routed_experts_prompt_start that was sent (or, after a P/D import, from P - 1: the
 * rows end at P + k - 1 either way), each later one a row per forwarded position from P + C - 1
 * (C tokens before it). The simulator emits the rows of position p with the step
 * that forwards p, so with k tokens in one output the first token's row takes all rows but the last
 * k - 1, each later token one. Rows before the client's own start (the bridge sends at most P - 1,
 * vLLM dies on more) are dropped, as are all rows of a request that did not ask for routing (vLLM
 * returns them for every request when enabled). A layer axis of num_hidden_layers on a card whose
 * first layers are dense (GLM) drops those leading layers: the card's rows start at its first
 * routed layer.
 */
import { RejectReason } from '../../wire/reject.js';
import { FinishReason } from '../../wire/types.js';
import type { StepOutputs } from '../step-outputs.js';
import { floored, stagePrompt, stageTop } from './bridge-logprobs.js';
import { VllmFinishReason } from './outputs.js';
import type { OutputView } from './outputs-reader.js';
import type { RoutingShape } from './routing-shape.js';

/** ringserve's finish reason for a vLLM one; -1 (none) stays running. */
export function finishFromVllm(code: number): FinishReason {
  switch (code) {
    case VllmFinishReason.Stop:
    case VllmFinishReason.Repetition:
      return FinishReason.Stop;
    case VllmFinishReason.Length:
      return FinishReason.Length;
    case VllmFinishReason.Abort:
      return FinishReason.Abort;
    case VllmFinishReason.Error:
      return FinishReason.Error;
    default:
      return FinishReason.None;
  }
}

/** What the bridge keeps of one request in flight (one object per request, none per token). */
export interface BridgeRequest {
  readonly id: string;
  readonly server: number;
  readonly slot: number;
  /** The data-parallel rank it runs on. */
  readonly rank: number;
  readonly promptLength: number;
  /** Routing rows asked for, from this absolute position on. */
  readonly routing: boolean;
  readonly routingStart: number;
  /** The routed_experts_prompt_start vLLM was sent (at most P - 1). */
  readonly sentRoutingStart: number;
  readonly masks: boolean;
  /** Top candidates asked per token (0: none, or logprobs not asked). */
  readonly topLogprobs: number;
  /** prompt_logprobs asked (-1: none). */
  readonly promptLogprobs: number;
  /** The prompt position the next prompt logprob row scores (1 until the first arrives). */
  promptNext: number;
  /** The n of its request id `<nonce>-<server>-<slot>-<n>`. */
  readonly serial: number;
  /** Tokens received so far. */
  tokens: number;
  numCachedTokens: number;
}

/**
 * Stages one output's rows for `req` into `rows`; returns false (nothing staged) when its routing
 * does not have the card's shape. The caller checked that its prompt logprobs fit the prompt
 * (promptLogprobsFit).
 */
export function stageOutput(
  o: OutputView,
  req: BridgeRequest,
  shape: RoutingShape,
  weightVersion: number,
  rows: StepOutputs,
): boolean {
  const k = o.tokenCount;
  let skipLayers = 0;
  const routed = req.routing && o.hasRoutedExperts && o.routedRows > 0;
  if (routed) {
    const { hiddenLayers, routingLayers, topk } = shape;
    if (o.routedTopk !== topk) return false;
    if (o.routedLayers === hiddenLayers) skipLayers = hiddenLayers - routingLayers;
    else if (o.routedLayers !== routingLayers) return false;
  }
  const finish = finishFromVllm(o.finishReason);
  // The routing rows' positions: the prompt's from the start sent, then one per forwarded token.
  // The first output's rows end where its tokens' do (P + k - 1): fewer than P - start + k - 1 of
  // them are the last ones (a decode instance that imported the prompt's KV from a prefill one
  // forwards, and so routes, only from P - 1 on).
  let pos =
    req.tokens === 0
      ? Math.max(req.sentRoutingStart, req.promptLength + k - 1 - (routed ? o.routedRows : 0))
      : req.promptLength + req.tokens - 1;
  let routingLeft = routed ? o.routedRows : 0;
  let routingAt = 0;
  if (req.numCachedTokens < 0 && o.hasPrefillStats) req.numCachedTokens = o.numCachedTokens;
  let maskAt = 0;
  const prompt = req.promptLogprobs >= 0 && o.hasPromptLogprobs && o.promptPositions > 0;
  for (let t = 0; t < Math.max(k, 1); t++) {
    if (t >= k && finish === FinishReason.None && !prompt) break;
    const row = rows.addRow(req.server, req.slot, weightVersion);
    rows.numCachedTokens[row] = Math.max(req.numCachedTokens, 0);
    if (t === 0 && prompt) {
      req.promptNext += stagePrompt(o, req.promptLogprobs, req.promptNext, rows, row);
    }
    if (t < k) {
      rows.token[row] = o.tokenIds[t]!;
      rows.logprob[row] = o.hasLogprobs ? floored(o.logprobs[t]!) : 0;
      if (o.hasLogprobs) rows.rank[row] = o.ranks[t]!;
      if (req.topLogprobs > 0) stageTop(o, t, req.topLogprobs, rows, row);
      if (req.masks && o.hasMask) {
        const n = o.maskCounts[t]!;
        const at = rows.reserveMask(n);
        for (let m = 0; m < n; m++) rows.maskIds[at + m] = o.maskIds[maskAt + m]!;
        rows.maskStart[row] = at;
        rows.maskCount[row] = n;
        rows.maskLength = at + n;
        maskAt += n;
      }
    }
    // The first token's row takes all routing rows but one per later token.
    const take = t === 0 ? Math.max(routingLeft - (k - 1), 0) : Math.min(routingLeft, 1);
    if (take > 0) {
      stageRouting(o, routingAt, take, pos, req.routingStart, skipLayers, rows, row);
      routingAt += take;
      routingLeft -= take;
      pos += take;
    }
    if (t === Math.max(k, 1) - 1 && finish !== FinishReason.None) {
      rows.finish[row] = finish;
      rows.stopTokenId[row] = o.finishReason === VllmFinishReason.Stop ? o.stopReason : -1;
      if (finish === FinishReason.Error) rows.rejectReason[row] = RejectReason.EngineFailed;
    }
  }
  req.tokens += k;
  return true;
}

/**
 * Whether the output's prompt logprob rows, if `req` asked for them, stay within its prompt: an
 * engine scores positions 1 .. P - 1, never more (false: the request fails, as for a field that
 * does not decode).
 */
export function promptLogprobsFit(o: OutputView, req: BridgeRequest): boolean {
  if (req.promptLogprobs < 0 || !o.hasPromptLogprobs) return true;
  return req.promptNext - 1 + o.promptPositions <= req.promptLength - 1;
}

/** Buffer's copy takes any Uint8Array as its source and target (no view made per call). */
const COPY = Buffer.prototype.copy;

let byteSource: Uint8Array | Uint16Array = new Uint8Array(0);
let byteView: Uint8Array = new Uint8Array(0);

/** A byte view of the routing table, remade only when the table is another array. */
function bytesOf(a: Uint8Array | Uint16Array): Uint8Array {
  if (a !== byteSource) {
    byteSource = a;
    byteView = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  }
  return byteView;
}

/**
 * Copies routing rows [from, from + n) of the output, positions pos.., into `row`, dropping those
 * before `start` and the leading `skipLayers` layers of each.
 */
function stageRouting(
  o: OutputView,
  from: number,
  n: number,
  pos: number,
  start: number,
  skipLayers: number,
  rows: StepOutputs,
  row: number,
): void {
  const skip = Math.min(Math.max(start - pos, 0), n);
  const count = n - skip;
  if (count === 0) return;
  const src = o.routedData;
  const width = rows.routingRowWidth;
  const srcWidth = o.routedLayers * o.routedTopk;
  const srcSkip = skipLayers * o.routedTopk;
  const at = rows.reserveRoutingRows(count);
  const dst = rows.routing;
  const idBytes = o.routedWidth;
  if (idBytes === dst.BYTES_PER_ELEMENT) {
    // Same id width: bytes move with Buffer's native copy (no view made), all rows at once when
    // no dense layer is cut out of them (a Qwen3 row is 384 bytes; the byte loop was ~13% of the
    // bridge process under bench:bridge).
    const into = bytesOf(dst);
    const first = o.routedOffset + ((from + skip) * srcWidth + srcSkip) * idBytes;
    const rowBytes = width * idBytes;
    if (srcSkip === 0) {
      COPY.call(src, into, at * idBytes, first, first + count * rowBytes);
    } else {
      for (let r = 0; r < count; r++) {
        const base = first + r * srcWidth * idBytes;
        COPY.call(src, into, (at + r * width) * idBytes, base, base + rowBytes);
      }
    }
  } else {
    // uint8 ids into a uint16 table (or the other way): id by id.
    let to = at;
    for (let r = from + skip; r < from + n; r++) {
      const base = o.routedOffset + (r * srcWidth + srcSkip) * idBytes;
      for (let e = 0; e < width; e++) {
        dst[to + e] =
          idBytes === 1 ? src[base + e]! : src[base + 2 * e]! | (src[base + 2 * e + 1]! << 8);
      }
      to += width;
    }
  }
  rows.routingRows[row] = count;
  rows.routingFirstPos[row] = pos + skip;
  rows.routingRowCount += count;
}
