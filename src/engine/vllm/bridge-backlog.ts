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
 * Staging and delivery copy typed-array columns; nothing is allocated per token. Kept rows are moved
 * to a second StepOutputs, which then becomes the backlog (they swap).
 */
import { copyIds } from '../copy-ids.js';
import type { OutputRoom } from '../output-room.js';
import { StepOutputs } from '../step-outputs.js';

export class BridgeBacklog {
  #rows: StepOutputs;
  #spare: StepOutputs;
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

  get count(): number {
    return this.#rows.count;
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
   */
  drainInto(out: StepOutputs, room: OutputRoom | null): void {
    const src = this.#rows;
    if (src.count === 0) return;
    const kept = this.#spare;
    kept.clear();
    const staged = this.#stagedFor(room?.servers ?? 0);
    for (let i = 0; i < src.count; i++) {
      const server = src.server[i]!;
      if (server < staged.length) staged[server] = 1;
      const held = room?.isHeld(server) === true;
      if (held || !this.#deliver(src, i, out, room)) copyRow(src, i, kept, src.routingRows[i]!);
    }
    src.clear();
    this.#rows = kept;
    this.#spare = src;
    this.#serverWithRoom = room === null;
    for (let k = 0; k < staged.length; k++) {
      if (staged[k] === 1 && !room!.isHeld(k)) this.#serverWithRoom = true;
    }
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
    for (let i = 0; i < src.count; i++) {
      if (src.server[i] !== server) copyRow(src, i, kept, src.routingRows[i]!);
    }
    src.clear();
    this.#rows = kept;
    this.#spare = src;
  }

  /**
   * Delivers row i of `src` as far as the room allows: routing-only pieces while its routing rows
   * exceed one output's limit, then the row itself. What does not fit stays in `src` (its routing
   * window advanced past what went out) and the server is held. True once the whole row went out.
   */
  #deliver(src: StepOutputs, i: number, out: StepOutputs, room: OutputRoom | null): boolean {
    const server = src.server[i]!;
    const mask = src.maskCount[i]!;
    if (room !== null) {
      const limit = room.routingRowsWithin(server, mask);
      while (src.routingRows[i]! > limit) {
        const piece = Math.min(src.routingRows[i]!, room.routingRowsWithin(server, 0));
        if (piece <= 0 || !room.tryCharge(server, 0, piece)) return false;
        const row = copyRow(src, i, out, piece);
        out.token[row] = -1;
        out.finish[row] = 0;
        out.stopTokenId[row] = -1;
        out.rejectReason[row] = 0;
        out.maskCount[row] = 0;
        src.routingStart[i]! += piece;
        src.routingFirstPos[i]! += piece;
        src.routingRows[i]! -= piece;
      }
      if (!room.tryCharge(server, mask, src.routingRows[i]!)) return false;
    }
    copyRow(src, i, out, src.routingRows[i]!);
    return true;
  }
}

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
      src.routingWords,
      from,
      dst.routing,
      dst.routingWords,
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
