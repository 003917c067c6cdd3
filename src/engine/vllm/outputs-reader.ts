import { RS_ERR_VLLM_DECODE, RS_ERR_VLLM_LAYOUT } from '../../errors.js';
import { isMapByte } from './kv-params.js';
import { describeLayouts, layoutForOutputFields, type VllmLayout } from './layouts.js';
import { MsgReader, typeName } from './msgpack-reader.js';
import { NdarrayView } from './ndarray.js';
import {
  readLogprobs,
  readPrefill,
  readPromptLogprobs,
  readRouted,
  readSamplingMask,
  readSchedulerStats,
} from './output-fields.js';
import { OutputView, SchedulerStatsView } from './output-view.js';
import { ENGINE_CORE_DEAD } from './outputs.js';

// Re-exported: importers of this module's sink types find the views here too.
export { OutputView, SchedulerStatsView };

/**
 * The frontend's hot path: EngineCoreOutputs frames walked in place and handed to a sink one
 * EngineCoreOutput at a time through one reused OutputView, so reading a step creates no object
 * per token (the token ids and logprob columns go into scratch typed arrays; the request id, the
 * routing rows and the aux frames stay where they are, as byte ranges).
 *
 * The layout is confirmed on the first EngineCoreOutput (msgspec writes every field of an
 * array-like struct, so its element count names the release series): with `auto` the reader
 * takes the table of that count, pinned it insists on its own; otherwise it throws
 * RS_ERR_VLLM_LAYOUT, and the link refuses that engine (nothing of it can be read).
 *
 * Otherwise nothing one item holds can cost more than that item: an output that does not decode
 * (an unknown finish reason, a dtype or shape vLLM does not send) is skipped whole and reported to
 * `outputFailed` with its request id, an undecodable scheduler_stats or utility_output is skipped
 * and reported, and a message broken in its structure (truncated, reserved bytes) is reported to
 * `messageFailed` with the body and where the break is, so the sink can fail the requests the
 * rest of it names.
 */

export interface OutputsSink {
  output(o: OutputView): void;
  /** An output that did not decode; o's idOffset/idLength hold its request id (0 length: none). */
  outputFailed?(o: OutputView, error: Error): void;
  /** The message's scheduler_stats (after its outputs, in wire order). */
  schedulerStats?(s: SchedulerStatsView): void;
  /** utility_output: success has failure null and the method's return value. */
  utility?(callId: number | bigint, failure: string | null, result: unknown): void;
  /** A part of the message other than an output did not decode (it was skipped). */
  partFailed?(part: string, error: Error): void;
  /** The message's structure broke at byte `at` of `body`; nothing after it was read. */
  messageFailed?(body: Uint8Array, at: number, error: Error): void;
  /** The ENGINE_CORE_DEAD frame. */
  engineDead?(): void;
  /**
   * The message's DP wave fields (vLLM's MoE data parallelism, docs/vllm-protocol.md "Data
   * parallelism"), when either is set: wave_complete (the engine group finished wave `complete`)
   * and start_wave (an engine started wave `start`); null where the field is nil.
   */
  wave?(engineIndex: number, complete: number | null, start: number | null): void;
  /** After the message's outputs. */
  end?(engineIndex: number, timestamp: number): void;
}

export type LayoutMode = 'auto' | 'pinned';

export class OutputsReader {
  #layout: VllmLayout;
  #confirmed = false;
  readonly #mode: LayoutMode;
  readonly #r = new MsgReader();
  readonly #o = new OutputView();
  readonly #stats = new SchedulerStatsView();
  readonly #nd = new NdarrayView();

  /** `layout`: the table to read with (auto: the registration's guess, until outputs confirm it). */
  constructor(layout: VllmLayout, mode: LayoutMode = 'pinned') {
    this.#layout = layout;
    this.#mode = mode;
  }

  get layout(): VllmLayout {
    return this.#layout;
  }

  /** Whether an EngineCoreOutput has confirmed the layout. */
  get confirmed(): boolean {
    return this.#confirmed;
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
    try {
      this.#readMessage(r, frames, sink);
    } catch (error) {
      if (!(error instanceof RS_ERR_VLLM_DECODE)) throw error;
      if (sink.messageFailed === undefined) throw error;
      sink.messageFailed(body, r.pos, error);
    }
  }

  #readMessage(r: MsgReader, frames: readonly Uint8Array[], sink: OutputsSink): void {
    const fields = this.#layout.outputs;
    const n = r.arrayHeader('EngineCoreOutputs');
    let engineIndex = 0;
    let timestamp = 0;
    let waveComplete: number | null = null;
    let startWave: number | null = null;
    // One pass, in wire order: outputs (field 1) reach the sink before scheduler_stats (2).
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
          for (let k = r.arrayHeader(field); k > 0; k--) this.#output(r, frames, sink);
          break;
        case 'scheduler_stats':
          if (!r.nil(field)) this.#part(r, field, sink, () => this.#readStats(r, sink));
          break;
        case 'timestamp':
          timestamp = r.float(field);
          break;
        case 'utility_output':
          if (!r.nil(field)) this.#part(r, field, sink, () => this.#readUtility(r, sink));
          break;
        case 'wave_complete':
          if (!r.nil(field)) waveComplete = r.int(field);
          break;
        case 'start_wave':
          if (!r.nil(field)) startWave = r.int(field);
          break;
        default:
          r.skip(field);
      }
    }
    r.done('EngineCoreOutputs');
    if (waveComplete !== null || startWave !== null)
      sink.wave?.(engineIndex, waveComplete, startWave);
    sink.end?.(engineIndex, timestamp);
  }

  /** One EngineCoreOutput; one that does not decode is skipped whole and reported. */
  #output(r: MsgReader, frames: readonly Uint8Array[], sink: OutputsSink): void {
    const start = r.pos;
    const n = r.arrayHeader('EngineCoreOutput');
    if (!this.#confirmed) this.#confirm(n);
    try {
      if (n !== this.#layout.output.length) {
        const want = this.#layout.output.length;
        r.fail('EngineCoreOutput', `${n} fields, the ${this.#layout.name} layout has ${want}`);
      }
      this.#readOutput(r, n, frames);
    } catch (error) {
      if (!(error instanceof RS_ERR_VLLM_DECODE) || sink.outputFailed === undefined) throw error;
      // Back to the output's start: skipping it whole tells whether the message is still sound
      // (a skip that fails is a structural break, which the caller reports).
      r.pos = start;
      this.#idOf(r);
      r.pos = start;
      try {
        r.skip('EngineCoreOutput');
      } catch (broken) {
        // The break is in this output: what follows its start is what the sink must scan.
        r.pos = start;
        throw broken;
      }
      sink.outputFailed(this.#o, error);
      return;
    }
    sink.output(this.#o);
  }

  /** The first output's element count confirms the layout, or picks it (auto). */
  #confirm(n: number): void {
    const named = layoutForOutputFields(n);
    if (named === this.#layout || (this.#mode === 'auto' && named !== undefined)) {
      this.#layout = named;
      this.#confirmed = true;
      return;
    }
    const pinned = `--vllm-version ${this.#layout.name} has ${this.#layout.output.length}`;
    const hint = named === undefined ? '' : ` (${named.name} has ${n}: use it, or auto)`;
    throw new RS_ERR_VLLM_LAYOUT(
      this.#mode === 'auto'
        ? `its EngineCoreOutput has ${n} fields; layouts: ${describeLayouts()}`
        : `its EngineCoreOutput has ${n} fields, ${pinned}${hint}`,
    );
  }

  /** Points the view's request id at the output's first element, if it is a string. */
  #idOf(r: MsgReader): void {
    const o = this.#o;
    o.idOffset = 0;
    o.idLength = 0;
    try {
      if (r.arrayHeader('EngineCoreOutput') === 0) return;
      r.strRange('request_id');
      o.idOffset = r.strStart;
      o.idLength = r.strLength;
    } catch {
      // No readable id: the sink gets a zero-length one.
    }
  }

  #readOutput(r: MsgReader, n: number, frames: readonly Uint8Array[]): void {
    const o = this.#o;
    const fields = this.#layout.output;
    if (n < this.#layout.outputRequired) r.fail('EngineCoreOutput', `${n} fields`);
    o.tokenCount = 0;
    o.hasLogprobs = false;
    o.logprobWidth = 0;
    o.hasPromptLogprobs = false;
    o.promptPositions = 0;
    o.finishReason = -1;
    o.stopReason = -1;
    o.stopReasonIsText = false;
    o.hasPrefillStats = false;
    o.hasRoutedExperts = false;
    o.numNansInLogits = 0;
    o.hasMask = false;
    o.maskIdCount = 0;
    o.kvParamsLength = 0;
    for (let i = 0; i < n; i++) {
      const field = fields[i];
      if (field === undefined) {
        r.skip('EngineCoreOutput extra field');
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
          if (!r.nil(field)) readLogprobs(r, frames, this.#nd, o);
          break;
        case 'new_prompt_logprobs_tensors':
          if (!r.nil(field)) readPromptLogprobs(r, frames, this.#nd, o);
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
          if (!r.nil(field)) readPrefill(r, o);
          break;
        case 'routed_experts':
          if (!r.nil(field)) readRouted(r, frames, this.#nd, o);
          break;
        case 'new_sampling_mask':
          if (!r.nil(field)) readSamplingMask(r, frames, this.#nd, o);
          break;
        case 'kv_transfer_params':
          if (!r.nil(field)) this.#kvParams(r);
          break;
        case 'num_nans_in_logits':
          o.numNansInLogits = r.nil(field) ? 0 : r.int(field);
          break;
        default:
          r.skip(field);
      }
    }
  }

  /** kv_transfer_params (vLLM: dict[str, Any] | None) is kept as its bytes, for the API server. */
  #kvParams(r: MsgReader): void {
    const o = this.#o;
    const at = r.pos;
    const b = r.peek('kv_transfer_params');
    if (!isMapByte(b)) r.fail('kv_transfer_params', `expected a map or nil, got ${typeName(b)}`);
    r.skip('kv_transfer_params');
    o.kvParamsOffset = at;
    o.kvParamsLength = r.pos - at;
  }

  #readTokens(r: MsgReader): void {
    const o = this.#o;
    const k = r.arrayHeader('new_token_ids');
    if (o.tokenIds.length < k) o.tokenIds = new Int32Array(Math.max(64, k * 2));
    for (let i = 0; i < k; i++) o.tokenIds[i] = r.int('new_token_ids');
    o.tokenCount = k;
  }

  /** A part that does not decode is skipped (from where it began) and reported. */
  #part(r: MsgReader, part: string, sink: OutputsSink, read: () => void): void {
    const start = r.pos;
    try {
      read();
    } catch (error) {
      if (!(error instanceof RS_ERR_VLLM_DECODE) || sink.partFailed === undefined) throw error;
      r.pos = start;
      r.skip(part);
      sink.partFailed(part, error);
    }
  }

  #readStats(r: MsgReader, sink: OutputsSink): void {
    readSchedulerStats(r, this.#stats);
    sink.schedulerStats?.(this.#stats);
  }

  /** UtilityOutput: [call_id, failure_message, UtilityResult [type info, value] | nil, ...]. */
  #readUtility(r: MsgReader, sink: OutputsSink): void {
    const n = r.arrayHeader('utility_output');
    if (n < 3) r.fail('utility_output', `${n} fields, expected 3`);
    const callId = r.intOrBig('utility_output.call_id');
    const failure = r.nil('utility_output.failure_message')
      ? null
      : r.str('utility_output.failure_message');
    let result: unknown = null;
    if (!r.nil('utility_output.result')) {
      const m = r.arrayHeader('utility_output.result');
      if (m < 2) r.fail('utility_output.result', `${m} fields, expected [type info, value]`);
      r.skip('utility_output.result.type');
      result = r.any('utility_output.result');
      for (let i = 2; i < m; i++) r.skip('utility_output.result');
    }
    for (let i = 3; i < n; i++) r.skip('utility_output');
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

/** Reads one message with a one-off reader: tests and cold callers. */
export function readOutputs(
  layout: VllmLayout,
  frames: readonly Uint8Array[],
  sink: OutputsSink,
  mode: LayoutMode = 'pinned',
): void {
  new OutputsReader(layout, mode).read(frames, sink);
}
