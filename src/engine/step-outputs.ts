import { idBytesForExperts } from '../wire/model-card.js';
import { FinishReason } from '../wire/types.js';
import { bytesOfBuffer } from './copy-ids.js';

/**
 * One step's outputs, columnar: output row i of the step is (server[i], slot[i], token[i], ...).
 * The object is reused across steps; its arrays grow by doubling and are never shrunk, so a warm
 * engine allocates nothing per step. After a growth the column properties point at new arrays:
 * read them from the object after step(), do not keep references across steps.
 *
 *   rows:     server | slot | token | logprob | rank | finish | stopTokenId | numCachedTokens | ...
 *   masks:    maskIds[maskStart[i] .. maskStart[i] + maskCount[i])      (CSR, shared array)
 *   top:      topIds / topLogprobs[topStart[i] .. topStart[i] + topCount[i])   (CSR, shared)
 *   prompt:   promptIds / promptLogprobs / promptRanks[promptStart[i] ..
 *             promptStart[i] + promptPositions[i] * promptWidth[i])              (CSR, shared)
 *   routing:  routing[(routingStart[i] + r) * rowWidth + layer * topk + k]
 *             for r < routingRows[i]; row r is sequence position routingFirstPos[i] + r
 *   kv:       kvBytes[kvStart[i] .. kvStart[i] + kvCount[i])   (CSR, shared; a vLLM engine's
 *             kv_transfer_params, one msgpack map, per request: the simulator writes none)
 */
export class StepOutputs {
  count = 0;
  server: Int32Array;
  slot: Int32Array;
  /** The new token, or -1 when the row carries none (a prefill chunk, an abort, an error). */
  token: Int32Array;
  /** Logprob of the token under the distribution it was sampled from; floored at -9999. */
  logprob: Float32Array;
  /**
   * The token's 1-based rank among the position's candidates in descending processed logprob
   * (vLLM's sampled_token_ranks: 1 = the most likely); 0 for a row without a token.
   */
  rank: Int32Array;
  finish: Uint8Array;
  /** The stop token id that ended the request, -1 for none (EOS gives -1, as vLLM's stop_reason). */
  stopTokenId: Int32Array;
  /** Prompt tokens served from the prefix cache when the request was first scheduled. */
  numCachedTokens: Int32Array;
  weightVersion: Int32Array;
  /** For finish = Error: why (RejectReason in reject.ts); 0 otherwise. */
  rejectReason: Uint8Array;
  maskStart: Int32Array;
  /** Kept-set size; 0 when not asked, or when no top-k/top-p/min-p truncation applied. */
  maskCount: Int32Array;
  maskIds: Int32Array;
  /** Used length of maskIds. */
  maskLength = 0;
  /**
   * The position's top candidates when the request asked for top logprobs: topCount[i] ids in
   * descending order, each with its logprob under the token's distribution (-9999 outside the
   * kept set). vLLM's LogprobsLists columns 1..k (column 0 is token/logprob): the sampled token
   * is one of them when it is among the k best, as in vLLM. 0 when not asked.
   */
  topStart: Int32Array;
  topCount: Int32Array;
  topIds: Int32Array;
  topLogprobs: Float32Array;
  /** Used length of topIds / topLogprobs. */
  topLength = 0;
  /**
   * Prompt logprobs (a request that asked prompt_logprobs k >= 0): promptPositions[i] positions of
   * the prompt from promptFirstPos[i] on (position p scores prompt token p given tokens 0..p-1, so
   * p >= 1), promptWidth[i] = 1 + k entries each, position-major. Entry 0 is the prompt token with
   * its 1-based rank among the vocabulary in descending logprob; entries 1..k are the k best
   * candidates, ranks 1..k (vLLM's new_prompt_logprobs_tensors: token ids, logprobs, ranks of
   * column 0). Logprobs floored at -9999. A row may carry prompt positions and no token (a
   * prefill chunk).
   */
  promptStart: Int32Array;
  promptPositions: Int32Array;
  promptFirstPos: Int32Array;
  promptWidth: Int32Array;
  promptIds: Int32Array;
  promptLogprobs: Float32Array;
  promptRanks: Int32Array;
  /** Used length of promptIds / promptLogprobs / promptRanks. */
  promptLength = 0;
  /** kv_transfer_params an engine answered with this output (bytes; 0: none). */
  kvStart: Int32Array;
  kvCount: Int32Array;
  kvBytes: Uint8Array;
  /** Used length of kvBytes. */
  kvLength = 0;
  /** Row index (not element index) of this output's first routing row. */
  routingStart: Int32Array;
  routingRows: Int32Array;
  routingFirstPos: Int32Array;
  routing: Uint8Array | Uint16Array;
  /** `routing`'s buffer as words (copy-ids.ts), replaced with it. */
  routingBytes: Uint8Array;
  /** Used routing rows in `routing`. */
  routingRowCount = 0;
  /** Routing row shape; the engine sets it (shapeRouting) before writing rows. */
  routingLayers = 0;
  routingTopk = 0;
  /** Elements per routing row: layers * topk. */
  routingRowWidth = 0;
  /** Uint16 rows when an expert id can exceed 255 (the contract's dtype rule). */
  routingWide = false;

  constructor(rowCapacity = 64) {
    const n = Math.max(1, rowCapacity);
    this.server = new Int32Array(n);
    this.slot = new Int32Array(n);
    this.token = new Int32Array(n);
    this.logprob = new Float32Array(n);
    this.rank = new Int32Array(n);
    this.finish = new Uint8Array(n);
    this.stopTokenId = new Int32Array(n);
    this.numCachedTokens = new Int32Array(n);
    this.weightVersion = new Int32Array(n);
    this.rejectReason = new Uint8Array(n);
    this.maskStart = new Int32Array(n);
    this.maskCount = new Int32Array(n);
    this.topStart = new Int32Array(n);
    this.topCount = new Int32Array(n);
    this.promptStart = new Int32Array(n);
    this.promptPositions = new Int32Array(n);
    this.promptFirstPos = new Int32Array(n);
    this.promptWidth = new Int32Array(n);
    this.kvStart = new Int32Array(n);
    this.kvCount = new Int32Array(n);
    this.routingStart = new Int32Array(n);
    this.routingRows = new Int32Array(n);
    this.routingFirstPos = new Int32Array(n);
    this.maskIds = new Int32Array(n * 4);
    this.topIds = new Int32Array(n);
    this.topLogprobs = new Float32Array(n);
    this.promptIds = new Int32Array(0);
    this.promptLogprobs = new Float32Array(0);
    this.promptRanks = new Int32Array(0);
    this.kvBytes = new Uint8Array(0);
    this.routing = new Uint8Array(0);
    this.routingBytes = bytesOfBuffer(this.routing);
  }

  /**
   * Sets the routing row shape (layers x topk, uint16 when numExperts > 256). A no-op when it is
   * unchanged, so the engine calls it every step; a change drops the routing area's contents.
   */
  shapeRouting(layers: number, topk: number, numExperts: number): void {
    const wide = idBytesForExperts(numExperts) === 2;
    if (layers === this.routingLayers && topk === this.routingTopk && wide === this.routingWide) {
      return;
    }
    this.routingLayers = layers;
    this.routingTopk = topk;
    this.routingRowWidth = layers * topk;
    this.routingWide = wide;
    const elements = this.server.length * this.routingRowWidth;
    this.routing = wide ? new Uint16Array(elements) : new Uint8Array(elements);
    this.routingBytes = bytesOfBuffer(this.routing);
    this.routingRowCount = 0;
  }

  /** Forget the previous step's rows; capacity is kept. */
  clear(): void {
    this.count = 0;
    this.maskLength = 0;
    this.topLength = 0;
    this.promptLength = 0;
    this.kvLength = 0;
    this.routingRowCount = 0;
  }

  /** Appends a row with no token, finish, mask, top or prompt area or routing; returns its index. */
  addRow(server: number, slot: number, weightVersion: number): number {
    const i = this.count;
    if (i === this.server.length) this.#growRows(i * 2);
    this.server[i] = server;
    this.slot[i] = slot;
    this.token[i] = -1;
    this.logprob[i] = 0;
    this.rank[i] = 0;
    this.finish[i] = FinishReason.None;
    this.stopTokenId[i] = -1;
    this.numCachedTokens[i] = 0;
    this.weightVersion[i] = weightVersion;
    this.rejectReason[i] = 0;
    this.maskStart[i] = this.maskLength;
    this.maskCount[i] = 0;
    this.topStart[i] = this.topLength;
    this.topCount[i] = 0;
    this.promptStart[i] = this.promptLength;
    this.promptPositions[i] = 0;
    this.promptFirstPos[i] = 0;
    this.promptWidth[i] = 0;
    this.kvStart[i] = this.kvLength;
    this.kvCount[i] = 0;
    this.routingStart[i] = this.routingRowCount;
    this.routingRows[i] = 0;
    this.routingFirstPos[i] = 0;
    this.count = i + 1;
    return i;
  }

  /** Makes room for n more mask ids; returns the offset to write them at (maskLength). */
  reserveMask(n: number): number {
    const need = this.maskLength + n;
    if (need > this.maskIds.length) {
      const grown = new Int32Array(Math.max(need, this.maskIds.length * 2));
      grown.set(this.maskIds.subarray(0, this.maskLength));
      this.maskIds = grown;
    }
    return this.maskLength;
  }

  /** Makes room for n more top candidates; returns the offset to write them at (topLength). */
  reserveTop(n: number): number {
    const need = this.topLength + n;
    if (need > this.topIds.length) {
      const size = Math.max(need, this.topIds.length * 2);
      const ids = new Int32Array(size);
      ids.set(this.topIds.subarray(0, this.topLength));
      this.topIds = ids;
      const logprobs = new Float32Array(size);
      logprobs.set(this.topLogprobs.subarray(0, this.topLength));
      this.topLogprobs = logprobs;
    }
    return this.topLength;
  }

  /**
   * Makes room for n more prompt-logprob entries; returns the offset to write them at
   * (promptLength). The caller sets the row's promptStart to it and advances promptLength.
   */
  reservePrompt(n: number): number {
    const need = this.promptLength + n;
    if (need > this.promptIds.length) {
      const size = Math.max(need, this.promptIds.length * 2, 64);
      const used = this.promptLength;
      const ids = new Int32Array(size);
      ids.set(this.promptIds.subarray(0, used));
      this.promptIds = ids;
      const logprobs = new Float32Array(size);
      logprobs.set(this.promptLogprobs.subarray(0, used));
      this.promptLogprobs = logprobs;
      const ranks = new Int32Array(size);
      ranks.set(this.promptRanks.subarray(0, used));
      this.promptRanks = ranks;
    }
    return this.promptLength;
  }

  /**
   * Copies `bytes` (kv_transfer_params, per request: not a hot path) into the kv area as row i's,
   * which must be the last row added.
   */
  setKv(i: number, bytes: Uint8Array, from = 0, to = bytes.length): void {
    const at = this.#appendKv(bytes, from, to);
    this.kvStart[i] = at;
    this.kvCount[i] = to - from;
  }

  /** Appends bytes [from, to) of `src` to the kv area; returns where they start. */
  #appendKv(src: Uint8Array, from: number, to: number): number {
    const at = this.kvLength;
    const need = at + to - from;
    if (need > this.kvBytes.length) {
      const grown = new Uint8Array(Math.max(need, this.kvBytes.length * 2, 256));
      grown.set(this.kvBytes.subarray(0, at));
      this.kvBytes = grown;
    }
    if (to > from) this.kvBytes.set(src.subarray(from, to), at);
    this.kvLength = need;
    return at;
  }

  /** Makes room for n more routing rows; returns the element offset of the first one. */
  reserveRoutingRows(n: number): number {
    const need = (this.routingRowCount + n) * this.routingRowWidth;
    if (need > this.routing.length) {
      const size = Math.max(need, this.routing.length * 2);
      const grown = this.routingWide ? new Uint16Array(size) : new Uint8Array(size);
      grown.set(this.routing.subarray(0, this.routingRowCount * this.routingRowWidth));
      this.routing = grown;
      this.routingBytes = bytesOfBuffer(grown);
    }
    return this.routingRowCount * this.routingRowWidth;
  }

  /**
   * Appends rows [from, to) of `src` (same routing shape) with their masks, top areas and routing
   * rows: each column and each area is copied as one run (a view per column per call, none per
   * row) and the rows' area offsets are rebased. A row's areas are where its start and count say,
   * so a row whose routing window was advanced (rows sent in pieces) keeps its own window.
   */
  appendRange(src: StepOutputs, from: number, to: number): void {
    const n = to - from;
    if (n <= 0) return;
    const at = this.count;
    if (at + n > this.server.length) this.#growRows(Math.max(this.server.length * 2, at + n));
    for (const key of ROW_COLUMNS) {
      const column = this[key] as Int32Array;
      column.set((src[key] as Int32Array).subarray(from, to), at);
    }
    const last = to - 1;
    const maskFrom = src.maskStart[from]!;
    const maskTo = src.maskStart[last]! + src.maskCount[last]!;
    const topFrom = src.topStart[from]!;
    const topTo = src.topStart[last]! + src.topCount[last]!;
    const promptFrom = src.promptStart[from]!;
    const promptTo = src.promptStart[last]! + src.promptPositions[last]! * src.promptWidth[last]!;
    const routingFrom = src.routingStart[from]!;
    const routingTo = src.routingStart[last]! + src.routingRows[last]!;
    const kvFrom = src.kvStart[from]!;
    const kvTo = src.kvStart[last]! + src.kvCount[last]!;
    const kvAt = this.#appendKv(src.kvBytes, kvFrom, kvTo);
    const maskAt = this.reserveMask(maskTo - maskFrom);
    this.maskIds.set(src.maskIds.subarray(maskFrom, maskTo), maskAt);
    const topAt = this.reserveTop(topTo - topFrom);
    this.topIds.set(src.topIds.subarray(topFrom, topTo), topAt);
    this.topLogprobs.set(src.topLogprobs.subarray(topFrom, topTo), topAt);
    const promptAt = this.reservePrompt(promptTo - promptFrom);
    this.promptIds.set(src.promptIds.subarray(promptFrom, promptTo), promptAt);
    this.promptLogprobs.set(src.promptLogprobs.subarray(promptFrom, promptTo), promptAt);
    this.promptRanks.set(src.promptRanks.subarray(promptFrom, promptTo), promptAt);
    const width = this.routingRowWidth;
    const routingAt = this.reserveRoutingRows(routingTo - routingFrom) / width;
    this.routing.set(
      src.routing.subarray(routingFrom * width, routingTo * width),
      routingAt * width,
    );
    for (let i = 0; i < n; i++) {
      this.maskStart[at + i] = src.maskStart[from + i]! - maskFrom + maskAt;
      this.topStart[at + i] = src.topStart[from + i]! - topFrom + topAt;
      this.promptStart[at + i] = src.promptStart[from + i]! - promptFrom + promptAt;
      this.routingStart[at + i] = src.routingStart[from + i]! - routingFrom + routingAt;
      this.kvStart[at + i] = src.kvStart[from + i]! - kvFrom + kvAt;
    }
    this.count = at + n;
    this.maskLength = maskAt + maskTo - maskFrom;
    this.topLength = topAt + topTo - topFrom;
    this.promptLength = promptAt + promptTo - promptFrom;
    this.routingRowCount = routingAt + routingTo - routingFrom;
  }

  /**
   * Exchanges every column and count with `other` (same routing shape): O(1) where copying would
   * touch every row. The vLLM bridge stages rows in a StepOutputs of its own and hands a whole
   * staged step to the core loop's this way when every row goes out.
   */
  swapWith(other: StepOutputs): void {
    const a = this as unknown as Record<string, unknown>;
    const b = other as unknown as Record<string, unknown>;
    for (const key of SWAPPED) {
      const t = a[key];
      a[key] = b[key];
      b[key] = t;
    }
  }

  #growRows(n: number): void {
    const grow = <T extends Int32Array | Float32Array | Uint8Array>(
      a: T,
      make: (k: number) => T,
    ): T => {
      const b = make(n);
      b.set(a);
      return b;
    };
    const i32 = (k: number) => new Int32Array(k);
    this.server = grow(this.server, i32);
    this.slot = grow(this.slot, i32);
    this.token = grow(this.token, i32);
    this.logprob = grow(this.logprob, (k) => new Float32Array(k));
    this.rank = grow(this.rank, i32);
    this.finish = grow(this.finish, (k) => new Uint8Array(k));
    this.stopTokenId = grow(this.stopTokenId, i32);
    this.numCachedTokens = grow(this.numCachedTokens, i32);
    this.weightVersion = grow(this.weightVersion, i32);
    this.rejectReason = grow(this.rejectReason, (k) => new Uint8Array(k));
    this.maskStart = grow(this.maskStart, i32);
    this.maskCount = grow(this.maskCount, i32);
    this.topStart = grow(this.topStart, i32);
    this.topCount = grow(this.topCount, i32);
    this.promptStart = grow(this.promptStart, i32);
    this.promptPositions = grow(this.promptPositions, i32);
    this.promptFirstPos = grow(this.promptFirstPos, i32);
    this.promptWidth = grow(this.promptWidth, i32);
    this.kvStart = grow(this.kvStart, i32);
    this.kvCount = grow(this.kvCount, i32);
    this.routingStart = grow(this.routingStart, i32);
    this.routingRows = grow(this.routingRows, i32);
    this.routingFirstPos = grow(this.routingFirstPos, i32);
  }
}

/** Every field swapWith exchanges: the columns, their used lengths and the routing shape. */
const SWAPPED = [
  'count',
  'server',
  'slot',
  'token',
  'logprob',
  'rank',
  'finish',
  'stopTokenId',
  'numCachedTokens',
  'weightVersion',
  'rejectReason',
  'maskStart',
  'maskCount',
  'maskIds',
  'maskLength',
  'topStart',
  'topCount',
  'topIds',
  'topLogprobs',
  'topLength',
  'promptStart',
  'promptPositions',
  'promptFirstPos',
  'promptWidth',
  'promptIds',
  'promptLogprobs',
  'promptRanks',
  'promptLength',
  'kvStart',
  'kvCount',
  'kvBytes',
  'kvLength',
  'routingStart',
  'routingRows',
  'routingFirstPos',
  'routing',
  'routingBytes',
  'routingRowCount',
  'routingLayers',
  'routingTopk',
  'routingRowWidth',
  'routingWide',
] as const;

/** The per-row columns appendRange copies as they are (the area offsets are rebased). */
const ROW_COLUMNS = [
  'server',
  'slot',
  'token',
  'logprob',
  'rank',
  'finish',
  'stopTokenId',
  'numCachedTokens',
  'weightVersion',
  'rejectReason',
  'maskCount',
  'topCount',
  'promptPositions',
  'promptFirstPos',
  'promptWidth',
  'kvCount',
  'routingRows',
  'routingFirstPos',
] as const;
