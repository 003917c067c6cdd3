/**
 * The rows a vLLM engine has produced and the core loop has not delivered yet. Outputs arrive on the
 * event loop, between steps, whenever the engine pushes them; they are staged here in the columns of
 * a StepOutputs, and step() moves into its `out` those that the API servers' output rings have room
 * for (OutputRoom, the EngineCore.step contract). A server whose ring is full is held: its rows stay
 * here, in order, and go out at a later step; the engine is never asked to wait, so what stays is
 * bounded by what the requests in flight generate meanwhile. A row whose routing rows and prompt
 * logprobs exceed what one output may carry (a long prompt's) goes out in pieces: rows without a
 * token carrying the first prompt positions and routing rows (bridge-rows.ts splitOff), as the
 * simulator emits a chunked prefill, then the row with its token, mask, top candidates and the rest.
 *
 * Staging and delivery copy typed-array columns; nothing is allocated per token (drainInto says how
 * rows that stay are left where they are).
 */
import type { OutputRoom } from '../output-room.js';
import { StepOutputs } from '../step-outputs.js';
import { copyRow, fitsOneOutput, promptEntries, splitOff } from './bridge-rows.js';

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
    // The front row did not go whole: its server is held, or it must go in pieces.
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
   * routing or prompt logprobs to split), in order, and returns how many.
   */
  #chargeWhole(src: StepOutputs, head: number, room: OutputRoom | null): number {
    if (room === null) return src.count - head;
    for (let i = head; i < src.count; i++) {
      const server = src.server[i]!;
      if (room.isHeld(server) || !fitsOneOutput(room, src, i)) return i - head;
      const charged = room.tryCharge(
        server,
        src.maskCount[i]!,
        src.routingRows[i]!,
        src.topCount[i]!,
        promptEntries(src, i),
        src.kvCount[i]!,
      );
      if (!charged) return i - head;
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
   * Delivers row i of `src` as far as the room allows: pieces without a token while the row does
   * not fit one output (each takes as many prompt positions as fit, then routing rows in the
   * bytes left; its token, mask and top candidates stay for the last), then the row itself. What
   * does not fit stays in `src` (its windows advanced past what went out) and the server is held.
   * True once the whole row went out.
   */
  #deliver(src: StepOutputs, i: number, out: StepOutputs, room: OutputRoom): boolean {
    const server = src.server[i]!;
    while (!fitsOneOutput(room, src, i)) {
      const width = src.promptWidth[i]!;
      const positions = Math.min(
        src.promptPositions[i]!,
        room.promptPositionsWithin(server, width, 0, 0),
      );
      const entries = positions * width;
      const routing = Math.min(src.routingRows[i]!, room.routingRowsWithin(server, 0, 0, entries));
      if (positions + routing <= 0 || !room.tryCharge(server, 0, routing, 0, entries)) return false;
      splitOff(src, i, out, routing, positions);
    }
    const charged = room.tryCharge(
      server,
      src.maskCount[i]!,
      src.routingRows[i]!,
      src.topCount[i]!,
      promptEntries(src, i),
      src.kvCount[i]!,
    );
    if (!charged) return false;
    copyRow(src, i, out, src.routingRows[i]!);
    return true;
  }
}

/** A delivered front shorter than this is never compacted (it is reused when the queue empties). */
const COMPACT_MIN = 4096;
