/**
 * The rows a vLLM engine has produced and the core loop has not delivered yet. Outputs arrive on the
 * event loop, between steps, whenever the engine pushes them; they are staged here in the columns of
 * a StepOutputs, and step() moves into its `out` those that the API servers' output rings have room
 * for (OutputRoom, the EngineCore.step contract). A server whose ring is full is held: its rows stay
 * here, in order, and go out at a later step; the engine is never asked to wait, so what stays is
 * bounded by what the requests in flight generate meanwhile. A row whose routing rows exceed what
 * one output may carry (a long prompt's) goes out in pieces: routing-only rows (token -1), as the
 * simulator emits a chunked prefill, then the row with its token.
 *
 * Staging and delivery copy typed-array columns; nothing is allocated per token (drainInto says how
 * rows that stay are left where they are).
 */
import { copyIds } from '../copy-ids.js';
import type { OutputRoom } from '../output-room.js';
import { StepOutputs } from '../step-outputs.js';

export class BridgeBacklog {
  #rows: StepOutputs;
  #spare: StepOutputs;
  /** Rows [0, #head) of #rows went out already; the pending ones are [#head, count). */
  #head = 0;
  /** Servers that had rows at the last drain (by server index), to find one the room did not hold. */
  #staged = new Uint8Array(0);
  #serverWithRoom = false;

  constructor(layers: number, topk: number, numExperts: number) {
    this.#rows = new StepOutputs(256);
    this.#spare = new StepOutputs(256);
    this.#rows.shapeRouting(layers, topk, numExperts);
    this.#spare.shapeRouting(layers, topk, numExperts);
  }

  /** Where new rows are staged (addRow, reserveRoutingRows ...); valid until the next drain. */
  get rows(): StepOutputs {
    return this.#rows;
  }

  /** Rows staged and not delivered yet. */
  get count(): number {
    return this.#rows.count - this.#head;
  }

  /**
   * True when, at the last drain, some server with staged rows was not held: its ring still has
   * room, so reading more of the engine's outputs can feed it whatever the other servers do. False
   * when every such server was held (or before the first drain).
   */
  get serverWithRoom(): boolean {
    return this.#serverWithRoom;
  }

  /**
   * Moves into `out` every staged row the room takes, oldest first (a held server keeps the rest of
   * its rows, in order). Without a room, everything goes.
   *
   * The pending rows are a queue: those that go out whole from its front are copied to `out` as one
   * range (StepOutputs.appendRange; or, when they are all the rows and `out` is empty, handed over:
   * StepOutputs.swapWith) and the front moves past them, so the rows that stay are not touched. Only when a held server's rows stand
   * before rows that can go (two or more API servers), or a row must go out in pieces, are the kept
   * rows copied into a fresh queue. Under bench:bridge the ring holds the core loop back most steps:
   * copying every kept row each step made it O(backlog) per step (copyRow was ~36% of the bridge).
   */
  drainInto(out: StepOutputs, room: OutputRoom | null): void {
    const src = this.#rows;
    const head = this.#head;
    if (head === src.count) return;
    const whole = this.#chargeWhole(src, head, room);
    if (head === 0 && whole === src.count && out.count === 0) {
      out.swapWith(src);
      this.#reset();
      this.#serverWithRoom = true;
      return;
    }
    out.appendRange(src, head, head + whole);
    this.#head = head + whole;
    if (this.#head === src.count) {
      this.#reset();
      this.#serverWithRoom = true;
      return;
    }
    // The front row did not go whole: its server is held, or its routing must go in pieces.
    if (this.#allHeld(room!)) {
      this.#serverWithRoom = false;
      this.#compactIfSparse();
      return;
    }
    this.#drainSlowly(out, room!);
  }

  /** Empties the queue (its arrays are kept). */
  #reset(): void {
    this.#rows.clear();
    this.#head = 0;
  }

  /** Whether every pending row's server is held (with one API server: whether it is). */
  #allHeld(room: OutputRoom): boolean {
    const src = this.#rows;
    for (let i = this.#head; i < src.count; i++) if (!room.isHeld(src.server[i]!)) return false;
    return true;
  }

  /**
   * Once the delivered front is most of the queue, the pending rows move to the spare queue (each
   * row is copied at most once per doubling of the queue: amortised O(1) per row).
   */
  #compactIfSparse(): void {
    const src = this.#rows;
    if (this.#head < COMPACT_MIN || this.#head * 2 < src.count) return;
    const kept = this.#spare;
    kept.clear();
    kept.appendRange(src, this.#head, src.count);
    src.clear();
    this.#rows = kept;
    this.#spare = src;
    this.#head = 0;
  }

  /**
   * The pending rows one by one: each goes (in pieces if need be) or, its server held, is kept in
   * order in a fresh queue.
   */
  #drainSlowly(out: StepOutputs, room: OutputRoom): void {
    const src = this.#rows;
    const kept = this.#spare;
    kept.clear();
    const staged = this.#stagedFor(room.servers);
    for (let i = this.#head; i < src.count; i++) {
      const server = src.server[i]!;
      if (server < staged.length) staged[server] = 1;
      if (room.isHeld(server) || !this.#deliver(src, i, out, room)) {
        copyRow(src, i, kept, src.routingRows[i]!);
      }
    }
    src.clear();
    this.#rows = kept;
    this.#spare = src;
    this.#head = 0;
    this.#serverWithRoom = false;
    for (let k = 0; k < staged.length; k++) {
      if (staged[k] === 1 && !room.isHeld(k)) this.#serverWithRoom = true;
    }
  }

  /**
   * Charges the room for the pending rows that go out whole from `head` on (no server held, no
   * routing to split), in order, and returns how many.
   */
  #chargeWhole(src: StepOutputs, head: number, room: OutputRoom | null): number {
    if (room === null) return src.count - head;
    for (let i = head; i < src.count; i++) {
      const server = src.server[i]!;
      const mask = src.maskCount[i]!;
      const top = src.topCount[i]!;
      const rows = src.routingRows[i]!;
      if (room.isHeld(server) || rows > room.routingRowsWithin(server, mask, top)) return i - head;
      if (!room.tryCharge(server, mask, rows, top)) return i - head;
    }
    return src.count - head;
  }

  #stagedFor(servers: number): Uint8Array {
    if (this.#staged.length !== servers) this.#staged = new Uint8Array(servers);
    else this.#staged.fill(0);
    return this.#staged;
  }

  /** Drops every staged row of API server k (it is gone). */
  dropServer(server: number): void {
    const src = this.#rows;
    const kept = this.#spare;
    kept.clear();
    for (let i = this.#head; i < src.count; i++) {
      if (src.server[i] !== server) copyRow(src, i, kept, src.routingRows[i]!);
    }
    src.clear();
    this.#rows = kept;
    this.#spare = src;
    this.#head = 0;
  }

  /**
   * Delivers row i of `src` as far as the room allows: routing-only pieces while its routing rows
   * exceed one output's limit, then the row itself. What does not fit stays in `src` (its routing
   * window advanced past what went out) and the server is held. True once the whole row went out.
   */
  #deliver(src: StepOutputs, i: number, out: StepOutputs, room: OutputRoom): boolean {
    const server = src.server[i]!;
    const mask = src.maskCount[i]!;
    const top = src.topCount[i]!;
    const limit = room.routingRowsWithin(server, mask, top);
    while (src.routingRows[i]! > limit) {
      const piece = Math.min(src.routingRows[i]!, room.routingRowsWithin(server, 0));
      if (piece <= 0 || !room.tryCharge(server, 0, piece)) return false;
      const row = copyRow(src, i, out, piece);
      out.token[row] = -1;
      out.finish[row] = 0;
      out.stopTokenId[row] = -1;
      out.rejectReason[row] = 0;
      out.maskCount[row] = 0;
      out.topCount[row] = 0;
      src.routingStart[i]! += piece;
      src.routingFirstPos[i]! += piece;
      src.routingRows[i]! -= piece;
    }
    if (!room.tryCharge(server, mask, src.routingRows[i]!, top)) return false;
    copyRow(src, i, out, src.routingRows[i]!);
    return true;
  }
}

/** A delivered front shorter than this is never compacted (it is reused when the queue empties). */
const COMPACT_MIN = 4096;

/** Appends row i of `src` to `dst` with its mask, top area and first `routingRows` routing rows. */
function copyRow(src: StepOutputs, i: number, dst: StepOutputs, routingRows: number): number {
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
  return row;
}

/** Mask runs at least this long are copied with one TypedArray.set (a view each), shorter ones by hand. */
const BULK_COPY = 512;

function copyRun(src: Int32Array, from: number, dst: Int32Array, at: number, n: number): void {
  if (n >= BULK_COPY) dst.set(src.subarray(from, from + n), at);
  else for (let k = 0; k < n; k++) dst[at + k] = src[from + k]!;
}
