import type { ChatDeltaPart, ChatParseOptions } from './chat-output.js';
import { HermesCallReader } from './hermes-stream.js';
import { isBlank } from './python-str.js';
import {
  findFirstMarker,
  partialMarkerTail,
  partialTailOfAny,
  reasoningMarkers,
  THINK_START,
  TOOL_CALL_END,
  TOOL_CALL_START,
} from './reasoning.js';
import {
  type ParsedCall,
  parseGlm45Region,
  parseHermesRegion,
  parseRequiredCalls,
  type RegionResult,
  type ToolMode,
  toolModeOf,
} from './tool-calls.js';

/**
 * parseChatOutput delta by delta. The parts of each kind, joined, are what parseChatOutput gives
 * for the whole text, however the text was split (test/protocol/chat-parse/stream.test.ts cuts
 * generated answers at random places). To keep that promise it holds text back where vLLM's own
 * streaming guesses early:
 * - a tail that may be the start of a marker, until the next delta settles it;
 * - a hermes call until its name is known and its arguments have begun; then its first part goes
 *   out, and its arguments follow in fragments as they come, each written as json.dumps writes it
 *   once it can no longer change (HermesCallReader), so the fragments join to the arguments the
 *   whole-output parse gives. A glm45 call waits for its `</tool_call>` and goes out whole;
 * - blank content before the first call (vLLM returns null content then), and everything from the
 *   first `<tool_call>` until one parses (if none does, all of it is content after all);
 * - for tool_choice "required", the whole answer (a JSON array, read at the end).
 * Where the whole output is known only at its end, this cannot follow: a bad region after a good
 * call makes vLLM's non-streaming answer all content; here the call has gone and the bad region is
 * dropped (vLLM's own streaming has sent that call too). Likewise a hermes call that went out and
 * then turns out malformed stays sent: the first one's text becomes content as in the whole
 * answer, a later one is dropped.
 */
export class ChatStreamParser {
  readonly #opts: ChatParseOptions;
  readonly #newId: () => string;
  readonly #mode: ToolMode;
  #inReasoning: boolean;
  /** Text received and not yet sent or set aside. */
  #pending = '';
  #calls = 0;
  // Markup mode.
  #inRegion = false;
  #regionChunks: string[] = [];
  /** The region's last text, not yet fed to #reader: it may be the start of `</tool_call>`. */
  #regionTail = '';
  /** hermes: the region read as it comes; null outside a region and for glm45. */
  #reader: HermesCallReader | null = null;
  /** The index of the region's call once its first part went out, else -1. */
  #streamIndex = -1;
  /** The arguments fragments of that call sent so far. */
  #sentArgs = '';
  #sawRegion = false;
  #contentStarted = false;
  #heldBlank = '';
  #heldRaw = '';
  #allContent = false;
  // Named choice.
  #namedStarted = false;

  constructor(opts: ChatParseOptions, newId: () => string) {
    this.#opts = opts;
    this.#newId = newId;
    this.#mode = toolModeOf(opts);
    this.#inReasoning = opts.reasoning !== null && opts.thinking;
  }

  /** The next text delta of one choice (any split, even mid-marker like "<tool_" + "call>"); final
   *  at the choice's last delta (flushes what was held back). Returns the parts to send, in order. */
  push(delta: string, final: boolean): ChatDeltaPart[] {
    const out: ChatDeltaPart[] = [];
    this.#pending += delta;
    while (this.#step(out, final)) {}
    if (final) this.#finish(out);
    return out;
  }

  /** True once a tool call has been emitted: finish_reason "tool_calls" as toolCallsFinish above. */
  get toolCallsFinish(): boolean {
    // serving.py's streaming rule: calls were streamed and the choice was not a named function.
    return this.#calls > 0 && typeof this.#opts.toolChoice !== 'object';
  }

  /** One move; true when another may follow on the same text. */
  #step(out: ChatDeltaPart[], final: boolean): boolean {
    if (this.#inReasoning) return this.#stepReasoning(out, final);
    switch (this.#mode) {
      case 'none':
        this.#text(out, 'content', this.#pending);
        this.#pending = '';
        return false;
      case 'json-named':
        this.#stepNamed(out);
        return false;
      case 'json-required':
        return false;
      case 'markup':
        return this.#inRegion ? this.#stepRegion(out, final) : this.#stepOutside(out, final);
    }
  }

  #stepReasoning(out: ChatDeltaPart[], final: boolean): boolean {
    const markers = reasoningMarkers(this.#opts.reasoning ?? 'qwen3');
    const p = this.#pending;
    const hit = findFirstMarker(p, markers, 0);
    if (hit === null) {
      const keep = final ? 0 : partialTailOfAny(p, markers);
      this.#text(out, 'reasoning', p.slice(0, p.length - keep));
      this.#pending = p.slice(p.length - keep);
      return false;
    }
    this.#text(out, 'reasoning', p.slice(0, hit.at));
    if (hit.marker === TOOL_CALL_START) {
      this.#pending = p.slice(hit.at);
      this.#inReasoning = false;
    } else {
      this.#pending = p.slice(hit.at + hit.marker.length);
      this.#inReasoning = hit.marker === THINK_START;
    }
    return true;
  }

  #stepNamed(out: ChatDeltaPart[]): void {
    const p = this.#pending;
    // vLLM makes no call of blank output: wait for the first visible character.
    if (p === '' || (!this.#namedStarted && isBlank(p))) return;
    if (!this.#namedStarted) {
      this.#namedStarted = true;
      this.#callHeader(out, (this.#opts.toolChoice as { name: string }).name);
    }
    out.push({ kind: 'tool_call', index: 0, arguments: p });
    this.#pending = '';
  }

  #stepOutside(out: ChatDeltaPart[], final: boolean): boolean {
    const p = this.#pending;
    if (this.#allContent) {
      this.#text(out, 'content', p);
      this.#pending = '';
      return false;
    }
    const at = p.indexOf(TOOL_CALL_START);
    if (at < 0) {
      const keep = final ? 0 : partialMarkerTail(p, TOOL_CALL_START);
      this.#outside(out, p.slice(0, p.length - keep));
      this.#pending = p.slice(p.length - keep);
      return false;
    }
    this.#outside(out, p.slice(0, at));
    this.#pending = p.slice(at + TOOL_CALL_START.length);
    if (this.#calls === 0) this.#heldRaw += TOOL_CALL_START;
    this.#sawRegion = true;
    this.#inRegion = true;
    if (this.#opts.tools === 'hermes') this.#reader = new HermesCallReader();
    return true;
  }

  /**
   * Inside a region. Its text goes to #regionChunks as it comes and only the new text (with the
   * tail that may hold the start of `</tool_call>`) is searched: a long argument value streamed in
   * small deltas must not be rescanned, nor its string flattened, at each one. A hermes region's
   * text, but for that tail, also goes to its HermesCallReader, which streams the call.
   */
  #stepRegion(out: ChatDeltaPart[], final: boolean): boolean {
    const p = this.#pending;
    const tail = this.#regionTail;
    const probe = tail + p;
    const end = probe.indexOf(TOOL_CALL_END);
    if (end < 0 && !final) {
      const keep = partialMarkerTail(probe, TOOL_CALL_END);
      this.#regionChunks.push(p);
      this.#regionTail = probe.slice(probe.length - keep);
      this.#pending = '';
      if (this.#reader !== null) this.#streamCall(out, probe.slice(0, probe.length - keep));
      return false;
    }
    const seen = this.#regionChunks.join('');
    this.#regionChunks = [];
    this.#regionTail = '';
    this.#inRegion = false;
    const reader = this.#reader;
    this.#reader = null;
    const full = seen + p;
    const bodyEnd = end >= 0 ? seen.length - tail.length + end : full.length;
    const rawEnd = end >= 0 ? bodyEnd + TOOL_CALL_END.length : full.length;
    const body = full.slice(0, bodyEnd);
    this.#pending = full.slice(rawEnd);
    if (reader !== null && this.#streamIndex >= 0) {
      // A call already announced: the reader gets the rest of its text.
      reader.feed(end >= 0 ? probe.slice(0, end) : probe);
      reader.finish();
      this.#closeStreamed(out, parseHermesRegion(body), full.slice(0, rawEnd), reader);
    } else if (end >= 0 || this.#opts.tools === 'hermes') {
      // The output may end inside a region: hermes reads it as a call, glm45 does not.
      this.#region(out, this.#parseRegion(body), full.slice(0, rawEnd));
    } else {
      this.#region(out, 'skip', full);
    }
    return end >= 0;
  }

  /**
   * More of a hermes region (none of it part of `</tool_call>`): once its name is known and its
   * arguments have begun, the call's first part goes out, then each arguments fragment as the
   * reader writes it.
   */
  #streamCall(out: ChatDeltaPart[], text: string): void {
    const reader = this.#reader as HermesCallReader;
    reader.feed(text);
    if (this.#streamIndex < 0) {
      if (!reader.ready) return;
      this.#streamIndex = this.#callHeader(out, reader.name as string);
      this.#sentArgs = '';
    }
    this.#sendArgs(out, reader.take());
  }

  #sendArgs(out: ChatDeltaPart[], fragment: string): void {
    if (fragment === '') return;
    out.push({ kind: 'tool_call', index: this.#streamIndex, arguments: fragment });
    this.#sentArgs += fragment;
  }

  /**
   * The end of a region whose call went out before it closed. If it parsed, the rest of its
   * arguments follow: what completes parseHermesRegion's string (the usual case), else the
   * reader's own rest (a repeated key: see HermesCallReader). If it did not parse, what went out
   * stays out, and the region is treated as the parser treats a bad region: the first one turns
   * the whole output into content (the text from its `<tool_call>` included), a later one is
   * dropped.
   */
  #closeStreamed(
    out: ChatDeltaPart[],
    result: RegionResult,
    raw: string,
    reader: HermesCallReader,
  ): void {
    const first = this.#streamIndex === 0;
    if (result === 'fail' || result === 'skip') {
      this.#streamIndex = -1;
      this.#sentArgs = '';
      if (first) this.#allContentNow(out, raw);
      return;
    }
    if (first) {
      this.#heldBlank = '';
      this.#heldRaw = '';
    }
    const sent = this.#sentArgs;
    const whole = result.arguments;
    this.#sendArgs(out, whole.startsWith(sent) ? whole.slice(sent.length) : reader.take());
    this.#streamIndex = -1;
    this.#sentArgs = '';
  }

  #parseRegion(body: string): RegionResult {
    return this.#opts.tools === 'hermes'
      ? parseHermesRegion(body)
      : parseGlm45Region(body, this.#opts.requestTools);
  }

  /** Text outside any region: content before the first one, set aside until a call, or dropped. */
  #outside(out: ChatDeltaPart[], text: string): void {
    if (text === '') return;
    if (!this.#sawRegion) {
      if (this.#contentStarted) {
        this.#text(out, 'content', text);
        return;
      }
      this.#heldBlank += text;
      if (isBlank(text)) return;
      this.#contentStarted = true;
      this.#text(out, 'content', this.#heldBlank);
      this.#heldBlank = '';
    } else if (this.#calls === 0) {
      this.#heldRaw += text;
    }
    // After a call vLLM returns only the content before the first region: the rest is dropped.
  }

  #region(out: ChatDeltaPart[], result: RegionResult, raw: string): void {
    if (result === 'skip') {
      if (this.#calls === 0) this.#heldRaw += raw;
      return;
    }
    if (result === 'fail') {
      if (this.#calls === 0) this.#allContentNow(out, raw);
      return;
    }
    if (this.#calls === 0) {
      this.#heldBlank = '';
      this.#heldRaw = '';
    }
    this.#call(out, result);
  }

  /** Before any call, a failing region turns the whole output into content, as in vLLM. */
  #allContentNow(out: ChatDeltaPart[], raw: string): void {
    this.#allContent = true;
    this.#contentStarted = true;
    this.#text(out, 'content', this.#heldBlank + this.#heldRaw + raw);
    this.#heldBlank = '';
    this.#heldRaw = '';
  }

  #finish(out: ChatDeltaPart[]): void {
    if (this.#inReasoning) return;
    if (this.#mode === 'json-required') {
      for (const call of parseRequiredCalls(this.#pending)) this.#call(out, call);
      this.#pending = '';
    } else if (this.#mode === 'markup' && this.#calls === 0 && !this.#allContent) {
      // No call after all: what was set aside is content, except blank text under a forced choice.
      const text = this.#heldBlank + this.#heldRaw;
      const forced = this.#opts.toolChoice !== 'auto';
      if (!(forced && !this.#contentStarted && isBlank(text))) this.#text(out, 'content', text);
      this.#heldBlank = '';
      this.#heldRaw = '';
    }
    this.#pending = '';
  }

  #callHeader(out: ChatDeltaPart[], name: string): number {
    const index = this.#calls++;
    out.push({ kind: 'tool_call', index, id: this.#newId(), name, arguments: '' });
    return index;
  }

  #call(out: ChatDeltaPart[], call: ParsedCall): void {
    const index = this.#callHeader(out, call.name);
    if (call.arguments !== '') out.push({ kind: 'tool_call', index, arguments: call.arguments });
  }

  /** Append reasoning or content text, joined to the previous part when it is of the same kind. */
  #text(out: ChatDeltaPart[], kind: 'reasoning' | 'content', text: string): void {
    if (text === '') return;
    const last = out[out.length - 1];
    if (last !== undefined && last.kind === kind) last.text += text;
    else out.push({ kind, text });
  }
}
