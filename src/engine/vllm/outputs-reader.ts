import { RS_ERR_VLLM_DECODE } from '../../errors.js';
import type { VllmLayout } from './layouts.js';
import { MsgReader } from './msgpack-reader.js';
import { NdarrayView, readNdarray } from './ndarray.js';
import { OutputView, SchedulerStatsView } from './output-view.js';
import { ENGINE_CORE_DEAD } from './outputs.js';

// Re-exported: importers of this module's sink types find the views here too.
export { OutputView, SchedulerStatsView };

/**
 * The frontend's hot path: EngineCoreOutputs frames walked in place and handed to a sink one
 * EngineCoreOutput at a time through one reused OutputView, so reading a step creates no object
 * per token (the token ids and column 0 of the logprobs go into scratch typed arrays; the request
 * id, the routing rows and the aux frames stay where they are, as byte ranges). A message that
 * does not match the layout throws RS_ERR_VLLM_DECODE naming the field.
 */

export interface OutputsSink {
  output(o: OutputView): void;
  /** The message's scheduler_stats (before its outputs). */
  schedulerStats?(s: SchedulerStatsView): void;
  /** utility_output: success has failure null and the method's return value. */
  utility?(callId: number, failure: string | null, result: unknown): void;
  /** The ENGINE_CORE_DEAD frame. */
  engineDead?(): void;
  /** After the message's outputs. */
  end?(engineIndex: number, timestamp: number): void;
}

export class OutputsReader {
  readonly #layout: VllmLayout;
  readonly #r = new MsgReader();
  readonly #o = new OutputView();
  readonly #stats = new SchedulerStatsView();
  readonly #nd = new NdarrayView();

  constructor(layout: VllmLayout) {
    this.#layout = layout;
  }

  /** Decodes one message (`frames` = [body, *aux]) into `sink`. */
  read(frames: readonly Uint8Array[], sink: OutputsSink): void {
    const body = frames[0];
    if (body === undefined) throw new RS_ERR_VLLM_DECODE('EngineCoreOutputs', 'no frames');
    if (isDeadFrame(frames)) {
      sink.engineDead?.();
      return;
    }
    const r = this.#r.reset(body);
    this.#o.body = body;
    const fields = this.#layout.outputs;
    const n = r.arrayHeader('EngineCoreOutputs');
    let engineIndex = 0;
    let timestamp = 0;
    // Outputs come before scheduler_stats on the wire; the sink sees stats first, so remember
    // where the outputs are and walk them after the rest.
    let outputsAt = -1;
    for (let i = 0; i < n; i++) {
      const field = fields[i];
      if (field === undefined) {
        r.skip('EngineCoreOutputs extra field');
        continue;
      }
      switch (field) {
        case 'engine_index':
          engineIndex = r.int(field);
          break;
        case 'outputs':
          outputsAt = r.pos;
          r.skip(field);
          break;
        case 'scheduler_stats':
          if (!r.nil(field)) {
            this.#readStats(r);
            sink.schedulerStats?.(this.#stats);
          }
          break;
        case 'timestamp':
          timestamp = r.float(field);
          break;
        case 'utility_output':
          if (!r.nil(field)) this.#readUtility(r, sink);
          break;
        default:
          r.skip(field);
      }
    }
    r.done('EngineCoreOutputs');
    if (outputsAt >= 0) {
      r.pos = outputsAt;
      for (let k = r.arrayHeader('outputs'); k > 0; k--) {
        this.#readOutput(r, frames);
        sink.output(this.#o);
      }
    }
    sink.end?.(engineIndex, timestamp);
  }

  #readOutput(r: MsgReader, frames: readonly Uint8Array[]): void {
    const o = this.#o;
    const fields = this.#layout.output;
    const n = r.arrayHeader('EngineCoreOutput');
    if (n < this.#layout.outputRequired) r.fail('EngineCoreOutput', `${n} fields`);
    o.tokenCount = 0;
    o.hasLogprobs = false;
    o.logprobWidth = 0;
    o.finishReason = -1;
    o.stopReason = -1;
    o.stopReasonIsText = false;
    o.hasPrefillStats = false;
    o.hasRoutedExperts = false;
    o.numNansInLogits = 0;
    o.hasMask = false;
    o.maskIdCount = 0;
    for (let i = 0; i < n; i++) {
      const field = fields[i];
      if (field === undefined) {
        if (i === fields.length) this.#readMask(r, frames);
        else r.skip('EngineCoreOutput extra field');
        continue;
      }
      switch (field) {
        case 'request_id':
          r.strRange(field);
          o.idOffset = r.strStart;
          o.idLength = r.strLength;
          break;
        case 'new_token_ids':
          this.#readTokens(r);
          break;
        case 'new_logprobs':
          if (!r.nil(field)) this.#readLogprobs(r, frames);
          break;
        case 'finish_reason':
          if (!r.nil(field)) {
            const f = r.int(field);
            if (f < 0 || f > 4) r.fail(field, `unknown finish reason ${f}`);
            o.finishReason = f;
          }
          break;
        case 'stop_reason':
          if (r.nil(field)) break;
          if (isStr(r.peek(field))) {
            r.skip(field);
            o.stopReasonIsText = true;
          } else o.stopReason = r.int(field);
          break;
        case 'prefill_stats':
          if (!r.nil(field)) this.#readPrefill(r);
          break;
        case 'routed_experts':
          if (!r.nil(field)) this.#readRouted(r, frames);
          break;
        case 'num_nans_in_logits':
          o.numNansInLogits = r.int(field);
          break;
        default:
          r.skip(field);
      }
    }
  }

  #readTokens(r: MsgReader): void {
    const o = this.#o;
    const k = r.arrayHeader('new_token_ids');
    if (o.tokenIds.length < k) o.tokenIds = new Int32Array(grow(k));
    for (let i = 0; i < k; i++) o.tokenIds[i] = r.int('new_token_ids');
    o.tokenCount = k;
  }

  #readLogprobs(r: MsgReader, frames: readonly Uint8Array[]): void {
    const o = this.#o;
    const n = r.arrayHeader('new_logprobs');
    if (n < 3) r.fail('new_logprobs', `LogprobsLists has ${n} fields`);
    const nd = this.#nd;
    readNdarray(r, 'new_logprobs.logprob_token_ids', frames, nd);
    const w = nd.shape1;
    readNdarray(r, 'new_logprobs.logprobs', frames, nd);
    if (nd.dtype !== '<f4' || nd.dims !== 2 || nd.shape0 !== o.tokenCount || nd.shape1 !== w) {
      r.fail('new_logprobs.logprobs', `expected <f4 [${o.tokenCount}, ${w}]`);
    }
    if (o.logprobs.length < o.tokenCount) o.logprobs = new Float32Array(grow(o.tokenCount));
    const view = nd.data === r.buf ? r.view : new DataView(nd.data.buffer, nd.data.byteOffset);
    for (let i = 0; i < o.tokenCount; i++) {
      o.logprobs[i] = view.getFloat32(nd.offset + i * w * 4, true);
    }
    o.logprobWidth = w;
    o.hasLogprobs = true;
    for (let i = 2; i < n; i++) r.skip('new_logprobs');
  }

  #readRouted(r: MsgReader, frames: readonly Uint8Array[]): void {
    const o = this.#o;
    const nd = readNdarray(r, 'routed_experts', frames, this.#nd);
    if ((nd.dtype !== '|u1' && nd.dtype !== '<u2') || nd.dims !== 3) {
      r.fail('routed_experts', `expected |u1 or <u2 [rows, layers, topk], got ${nd.dtype}`);
    }
    o.hasRoutedExperts = true;
    o.routedRows = nd.shape0;
    o.routedLayers = nd.shape1;
    o.routedTopk = nd.shape2;
    o.routedWidth = nd.width;
    o.routedData = nd.data;
    o.routedOffset = nd.offset;
    o.routedLength = nd.length;
  }

  #readMask(r: MsgReader, frames: readonly Uint8Array[]): void {
    const o = this.#o;
    if (r.nil('sampling_mask')) return;
    if (r.arrayHeader('sampling_mask') !== 2) r.fail('sampling_mask', 'expected [counts, ids]');
    const nd = this.#nd;
    readNdarray(r, 'sampling_mask.counts', frames, nd);
    if (nd.dtype !== '<i4' || nd.elements !== o.tokenCount)
      r.fail('sampling_mask.counts', `expected <i4 [${o.tokenCount}]`);
    if (o.maskCounts.length < o.tokenCount) o.maskCounts = new Int32Array(grow(o.tokenCount));
    copyInt32(nd, r, o.maskCounts);
    readNdarray(r, 'sampling_mask.ids', frames, nd);
    if (nd.dtype !== '<i4') r.fail('sampling_mask.ids', 'expected <i4');
    const total = nd.elements;
    let sum = 0;
    for (let i = 0; i < o.tokenCount; i++) sum += o.maskCounts[i] as number;
    if (sum !== total) r.fail('sampling_mask.ids', `${total} ids for counts summing to ${sum}`);
    if (o.maskIds.length < total) o.maskIds = new Int32Array(grow(total));
    copyInt32(nd, r, o.maskIds);
    o.maskIdCount = total;
    o.hasMask = true;
  }

  #readPrefill(r: MsgReader): void {
    const o = this.#o;
    o.numPromptTokens = 0;
    o.numComputedTokens = 0;
    o.numCachedTokens = 0;
    o.numLocalCachedTokens = 0;
    o.numExternalCachedTokens = 0;
    for (let n = r.mapHeader('prefill_stats'); n > 0; n--) {
      const key = r.str('prefill_stats key');
      const f = `prefill_stats.${key}`;
      if (key === 'num_prompt_tokens') o.numPromptTokens = r.int(f);
      else if (key === 'num_computed_tokens') o.numComputedTokens = r.int(f);
      else if (key === 'num_cached_tokens') o.numCachedTokens = r.int(f);
      else if (key === 'num_local_cached_tokens') o.numLocalCachedTokens = r.int(f);
      else if (key === 'num_external_cached_tokens') o.numExternalCachedTokens = r.int(f);
      else r.skip(f);
    }
    o.hasPrefillStats = true;
  }

  #readStats(r: MsgReader): void {
    const s = this.#stats;
    for (let n = r.mapHeader('scheduler_stats'); n > 0; n--) {
      const key = r.str('scheduler_stats key');
      const f = `scheduler_stats.${key}`;
      if (key === 'num_running_reqs') s.numRunningReqs = r.int(f);
      else if (key === 'num_waiting_reqs') s.numWaitingReqs = r.int(f);
      else if (key === 'kv_cache_usage') s.kvCacheUsage = r.float(f);
      else if (key === 'prefix_cache_stats' && !r.nil(f)) {
        for (let k = r.mapHeader(f); k > 0; k--) {
          const name = r.str(`${f} key`);
          const g = `${f}.${name}`;
          if (name === 'requests') s.prefixRequests = r.int(g);
          else if (name === 'queries') s.prefixQueries = r.int(g);
          else if (name === 'hits') s.prefixHits = r.int(g);
          else r.skip(g);
        }
      } else r.skip(f);
    }
  }

  #readUtility(r: MsgReader, sink: OutputsSink): void {
    if (r.arrayHeader('utility_output') !== 3) r.fail('utility_output', 'expected 3 fields');
    const callId = r.int('utility_output.call_id');
    const failure = r.nil('utility_output.failure_message')
      ? null
      : r.str('utility_output.failure_message');
    let result: unknown = null;
    if (!r.nil('utility_output.result')) {
      // UtilityResult: [type info (nil for plain msgpack values), value].
      if (r.arrayHeader('utility_output.result') !== 2)
        r.fail('utility_output.result', 'expected 2 fields');
      r.skip('utility_output.result.type');
      result = r.any('utility_output.result');
    }
    sink.utility?.(callId, failure, result);
  }
}

function isDeadFrame(frames: readonly Uint8Array[]): boolean {
  const b = frames[0] as Uint8Array;
  if (frames.length !== 1 || b.length !== ENGINE_CORE_DEAD.length) return false;
  for (let i = 0; i < b.length; i++) if (b[i] !== ENGINE_CORE_DEAD[i]) return false;
  return true;
}

function isStr(b: number): boolean {
  return (b & 0xe0) === 0xa0 || (b >= 0xd9 && b <= 0xdb);
}

function grow(n: number): number {
  return Math.max(64, 2 ** Math.ceil(Math.log2(n)));
}

function copyInt32(nd: NdarrayView, r: MsgReader, into: Int32Array): void {
  const view = nd.data === r.buf ? r.view : new DataView(nd.data.buffer, nd.data.byteOffset);
  const n = nd.elements;
  for (let i = 0; i < n; i++) into[i] = view.getInt32(nd.offset + i * 4, true);
}

/** Reads one message with a one-off reader: tests and cold callers. */
export function readOutputs(
  layout: VllmLayout,
  frames: readonly Uint8Array[],
  sink: OutputsSink,
): void {
  new OutputsReader(layout).read(frames, sink);
}
